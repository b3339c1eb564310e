"""Defaults and output columns of the IAS rules and sweeps (docs/design.md §4)."""

from __future__ import annotations

N_MAX = 64
P_CLIP = 1e-4
M_LEVELS = 100
DEFAULT_BETA = 0.1
MC_TRIALS = 100
#: target costs (mean draws / N_MAX) of the equal-cost rows of ias.csv (curves for the figures)
COST_GRID = (0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5)
#: the C sweep of docs/design.md §4
C_GRID = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.975, 0.99, 0.995, 0.999)
TAU_C = 0.99  # target of the tau sweep (paper Fig. 4)
BETA_C = 0.9  # target that sets the cap of beta-threshold early stopping (paper Fig. 3)
#: the beta sweep runs over the 11 levels (dprm.metrics.LEVELS_11, written without numpy so that
#: ``dprm ias --help`` loads none)
BETA_GRID = tuple(round(i / 10, 10) for i in range(11))
#: the columns of ias.csv; ``level`` is a sweep's knob (tau, beta), ``target_cost`` the target
#: mean draws / N_MAX of an equal-cost row (uniform, oracle, auto, auto-seq, ...)
SUMMARY_COLUMNS = [
    "method",
    "allocation",
    "C",
    "level",
    "cost",
    "accuracy",
    "accuracy_mc",
    "rule",
    "target_cost",
]
EXTRA_COLUMNS = [
    "accuracy_mc_se",
    "cost_mc",
    "n_questions",
    "accuracy_se",
    "oracle_bound",
    "floor_share",
]
BUDGET_COLUMNS = ["question_id", "method", "allocation", "C", "level", "n"]

#: step aggregations of a candidate's PRM scores (name -> [steps] -> score)
STEP_AGGREGATIONS = ("last", "min", "product")
WEIGHTS = (*STEP_AGGREGATIONS, "calibrated")
#: the contract rule of docs/design.md §4 (the candidate with the highest final PRM score)
CONTRACT_RULE = "highest-last"
#: every rule name
RULES = (
    *(f"highest-{w}" for w in WEIGHTS),
    *(f"weighted-{w}" for w in WEIGHTS),
    "majority",
)
