"""Moved to :mod:`dprm.ias.curves.pays`; this module keeps the old import path working."""

from dprm.ias.curves.pays import (  # noqa: F401 (re-exported)
    PAYS_COLUMNS,
    pays_table,
    run_pays,
)

__all__ = [
    "PAYS_COLUMNS",
    "pays_table",
    "run_pays",
]
