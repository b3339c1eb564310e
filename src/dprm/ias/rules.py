"""Moved to :mod:`dprm.ias.selection.rules`; this module keeps the old import path working."""

from dprm.ias.selection.rules import (  # noqa: F401 (re-exported)
    CONTRACT_RULE,
    DEFAULT_TRIALS,
    N_MAX,
    RULES,
    STEP_AGGREGATIONS,
    WEIGHTS,
    Candidates,
    RuleTable,
    answer_key,
    parse_rule,
    rule_of_label,
    rule_table,
    select_candidate,
    uses_answers,
    vote_in_order,
)

__all__ = [
    "CONTRACT_RULE",
    "Candidates",
    "DEFAULT_TRIALS",
    "N_MAX",
    "RULES",
    "RuleTable",
    "STEP_AGGREGATIONS",
    "WEIGHTS",
    "answer_key",
    "parse_rule",
    "rule_of_label",
    "rule_table",
    "select_candidate",
    "uses_answers",
    "vote_in_order",
]
