"""Moved to :mod:`dprm.ias.curves.population`; this module keeps the old import path working."""

from dprm.ias.curves.population import (  # noqa: F401 (re-exported)
    POP_POOLS,
    PopulationCurves,
    population_curves,
    population_oracle_rows,
)

__all__ = [
    "POP_POOLS",
    "PopulationCurves",
    "population_curves",
    "population_oracle_rows",
]
