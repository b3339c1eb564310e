"""Moved to :mod:`dprm.ias.learnt.allocation`; this module keeps the old import path working."""

from dprm.ias.learnt.allocation import (  # noqa: F401 (re-exported)
    FLOOR_SHARES,
    REPORT_COSTS,
    SHIFT_AUC,
    SelectionModel,
    auto_budgets,
    choose_floor_share,
    concave_hull_greedy,
    pd_rank,
    shift_auc,
    uniform_budgets,
)

__all__ = [
    "FLOOR_SHARES",
    "REPORT_COSTS",
    "SHIFT_AUC",
    "SelectionModel",
    "auto_budgets",
    "choose_floor_share",
    "concave_hull_greedy",
    "pd_rank",
    "shift_auc",
    "uniform_budgets",
]
