"""Moved to :mod:`dprm.ias.selection.draws`; this module keeps the old import path working."""

from dprm.ias.selection.draws import (  # noqa: F401 (re-exported)
    draw_orders,
    order_outcomes,
    outcome_accuracy,
    rule_outcomes,
    table_weight,
    vote_order_outcomes,
)

__all__ = [
    "draw_orders",
    "order_outcomes",
    "outcome_accuracy",
    "rule_outcomes",
    "table_weight",
    "vote_order_outcomes",
]
