"""Moved to :mod:`dprm.ias.curves.equal_cost`; this module keeps the old import path working."""

from dprm.ias.curves.equal_cost import (  # noqa: F401 (re-exported)
    SEQ_TRIALS,
    auto_rows,
    curve_mixture,
    p_oracle_rows,
    reference_rows,
    sequential_rows,
    shift_fallback_rows,
)

__all__ = [
    "SEQ_TRIALS",
    "auto_rows",
    "curve_mixture",
    "p_oracle_rows",
    "reference_rows",
    "sequential_rows",
    "shift_fallback_rows",
]
