"""Moved to :mod:`dprm.ias.paper.accuracy`; this module keeps the old import path working."""

from dprm.ias.paper.accuracy import (  # noqa: F401 (re-exported)
    exact_accuracy_table,
    lookup,
    monte_carlo,
    pick_weights,
    threshold_exact,
    threshold_mask_exact,
)

__all__ = [
    "exact_accuracy_table",
    "lookup",
    "monte_carlo",
    "pick_weights",
    "threshold_exact",
    "threshold_mask_exact",
]
