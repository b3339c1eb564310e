"""Moved to :mod:`dprm.ias.paper.budgets`; this module keeps the old import path working."""

from dprm.ias.paper.budgets import (  # noqa: F401 (re-exported)
    NEAR_TIE,
    budget_from_curve,
    budget_greedy,
    budget_mixture,
    budget_point,
    clipped,
    exact_budget,
    success_curve_mixture,
    success_curve_point,
)

__all__ = [
    "NEAR_TIE",
    "budget_from_curve",
    "budget_greedy",
    "budget_mixture",
    "budget_point",
    "clipped",
    "exact_budget",
    "success_curve_mixture",
    "success_curve_point",
]
