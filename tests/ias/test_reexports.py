"""The flat modules ``dprm.ias`` had before its subpackages still export every public name they
defined, as the very objects of the new modules (so old imports and monkeypatches of the classes
keep working)."""

from __future__ import annotations

import importlib

import pytest

#: old module -> (its new module, the public names it defined)
MOVED = {
    "budgets": (
        "paper.budgets",
        (
            "NEAR_TIE",
            "budget_from_curve",
            "budget_greedy",
            "budget_mixture",
            "budget_point",
            "clipped",
            "exact_budget",
            "success_curve_mixture",
            "success_curve_point",
        ),
    ),
    "accuracy": (
        "paper.accuracy",
        (
            "exact_accuracy_table",
            "lookup",
            "monte_carlo",
            "pick_weights",
            "threshold_exact",
            "threshold_mask_exact",
        ),
    ),
    "sweeps": (
        "paper.sweeps",
        (
            "run_ias",
            "run_sweeps",
            "sweep_rows",
            "uniform_curve",
        ),
    ),
    "pools": (
        "paper.pools",
        (
            "Pools",
            "response_rows",
        ),
    ),
    "estimates": (
        "paper.estimates",
        (
            "Estimate",
            "candidate_estimates",
            "estimate_from_model",
            "estimate_samples",
            "truth_estimate",
        ),
    ),
    "rules": (
        "selection.rules",
        (
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
        ),
    ),
    "draws": (
        "selection.draws",
        (
            "draw_orders",
            "order_outcomes",
            "outcome_accuracy",
            "rule_outcomes",
            "table_weight",
            "vote_order_outcomes",
        ),
    ),
    "allocation": (
        "learnt.allocation",
        (
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
        ),
    ),
    "auto": (
        "learnt.auto",
        (
            "AutoAllocator",
            "mean_budget",
            "pool_share",
        ),
    ),
    "inputs": (
        "learnt.inputs",
        (
            "CalibratorInput",
            "calibrator_input",
            "reads_states",
        ),
    ),
    "peers": (
        "peers.methods",
        (
            "AC_THRESHOLDS",
            "CALIBRATOR_FREE",
            "DrawView",
            "MEAN_BUDGETS",
            "PEERS",
            "Peer",
            "SCORE_PEERS",
            "SCORE_QUANTILES",
            "SWEEP_LEVELS",
            "TrainingScores",
            "ac_signal",
            "best_score_signal",
            "beta_stop_probability",
            "esc_budgets",
            "esc_levels",
            "esc_signal",
            "first_stop",
            "matched_budgets",
            "mean_budget_levels",
            "peers_for_rule",
            "running_top2",
            "score_levels",
            "uniform_peer_budgets",
            "vote_lead_budgets",
            "vote_lead_sequence",
        ),
    ),
    "peer_curves": (
        "peers.curves",
        (
            "BOOTSTRAP",
            "Curve",
            "CurveSet",
            "MATCH_TARGETS",
            "MATCH_TOLERANCE",
            "PRIORS",
            "SEQ_BUDGETS",
            "auto_seq_curve",
            "best_fallback",
            "choose_fallback",
            "curve_at_cost",
            "draws_to_reach",
            "flat_prior",
            "peer_curve",
            "peer_tables",
            "per_question",
            "prior_inputs",
            "set_curves",
            "shuffle_priors",
            "summarise",
            "training_peer_curves",
            "training_scores",
        ),
    ),
    "fallback": (
        "peers.fallback",
        (
            "ShiftFallback",
            "level_for_target",
            "shift_fallback",
        ),
    ),
    "equal_cost": (
        "curves.equal_cost",
        (
            "SEQ_TRIALS",
            "auto_rows",
            "curve_mixture",
            "p_oracle_rows",
            "reference_rows",
            "sequential_rows",
            "shift_fallback_rows",
        ),
    ),
    "pays": (
        "curves.pays",
        (
            "PAYS_COLUMNS",
            "pays_table",
            "run_pays",
        ),
    ),
    "population": (
        "curves.population",
        (
            "POP_POOLS",
            "PopulationCurves",
            "population_curves",
            "population_oracle_rows",
        ),
    ),
}
#: names whose definition moved elsewhere than the module's new home
ELSEWHERE = {("sweeps", "run_ias"): "dprm.ias.run"}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_name_imports_from_its_old_path(old):
    new, names = MOVED[old]
    old_module = importlib.import_module(f"dprm.ias.{old}")
    for name in names:
        home = importlib.import_module(ELSEWHERE.get((old, name), f"dprm.ias.{new}"))
        assert getattr(old_module, name) is getattr(home, name), f"dprm.ias.{old}.{name}"


def test_from_import_of_old_names():
    from dprm.ias.peer_curves import summarise
    from dprm.ias.peers import PEERS, DrawView
    from dprm.ias.peers.curves import summarise as new_summarise
    from dprm.ias.rules import CONTRACT_RULE, RULES
    from dprm.ias.sweeps import run_ias

    assert summarise is new_summarise
    assert "uniform" in PEERS and DrawView.__module__ == "dprm.ias.peers.views"
    assert CONTRACT_RULE == "highest-last" and CONTRACT_RULE in RULES
    assert run_ias.__module__ == "dprm.ias.run"
