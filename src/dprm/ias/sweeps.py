"""Moved to :mod:`dprm.ias.paper.sweeps`; this module keeps the old import path working."""

from dprm.ias.paper.sweeps import (  # noqa: F401 (re-exported)
    run_sweeps,
    sweep_rows,
    uniform_curve,
)
from dprm.ias.run import run_ias  # noqa: F401 (re-exported)

__all__ = [
    "run_ias",
    "run_sweeps",
    "sweep_rows",
    "uniform_curve",
]
