"""Instance-adaptive best-of-N (IAS): budgets, exact and Monte Carlo accuracy, sweeps.

Implements docs/design.md §4 (the paper's section "Instance-Adaptive BoN").

Budget rules (both search n = 1..N_max directly and decide comparisons that float64 cannot
settle in exact rational arithmetic, so budgets are exact on knife-edge inputs too; the closed
form ``ceil(log(1-C)/log(1-p))`` is not used):

* point rule (Base, QR, any point calibrator): N(p, C) = min{n : 1 - (1 - p)^n >= C};
* mixture rule (any full-distribution calibrator, e.g. OT):
  N = min{n : (1/M) sum_m [1 - (1 - Q(beta_m | h))^n] >= C}, beta_m = (m - 0.5)/M;

with N = N_max when no n qualifies and every p (or quantile) clipped to [1e-4, 1 - 1e-4].

Accuracy of best-of-n by the uncalibrated PRM score, candidates drawn uniformly without
replacement from a question's pool of K: on the pool sorted by score (descending, rank j),
P(rank j is picked | n) = C(K - j, n - 1) / C(K, n); tied scores share their mean correctness
(the pick among tied maxima is uniform). ``exact_accuracy_table`` evaluates this for every
n = 1..N_max at once, so the accuracy of any budget vector is a table lookup.

beta-threshold early stopping (paper Fig. 3), exact: with a = #candidates scoring >= the
threshold t, b = K - a and cap N, the first acceptable draw F satisfies
P(F > n) = C(b, n) / C(K, n). If F <= N the pick is that (uniformly random) acceptable
candidate; otherwise it is best-of-N within the b others. Hence
accuracy = (1 - P(F > N)) mean_A(correct) + P(F > N) bestofN_B(N) and
E[draws] = sum_{n=0}^{N-1} P(F > n). The ``accuracy`` column is exact for every sweep;
``accuracy_mc`` is a seeded Monte Carlo (``MC_TRIALS`` trials, common random draws for every
row of one call) kept as a cross-check, with its standard error in ``accuracy_mc_se``.

Modules:

* :mod:`dprm.ias.constants` -- defaults (N_max, grids) and output columns;
* :mod:`dprm.ias.budgets` -- success curves, the point / mixture budget rules, and a greedy
  allocation under a total budget;
* :mod:`dprm.ias.pools` -- :class:`Pools`, the candidate pools of a BoN set;
* :mod:`dprm.ias.accuracy` -- exact accuracy tables, exact early stopping, Monte Carlo;
* :mod:`dprm.ias.estimates` -- :class:`Estimate` from any calibrator (or the synthetic truth);
* :mod:`dprm.ias.inputs` -- :class:`CalibratorInput`, one calibrator's estimates on the test
  and training sets, the input of the equal-cost rows;
* :mod:`dprm.ias.sweeps` -- the C / tau / beta / beta-cal sweeps, plain best-of-n,
  :func:`run_ias`;
* :mod:`dprm.ias.rules` -- selection rules (highest / weighted / majority x last / min /
  product / calibrated weights) and their accuracy for every n (exact or seeded Monte Carlo);
* :mod:`dprm.ias.allocation` -- concave-hull greedy (the oracle), the selection-accuracy model,
  ``auto`` budgets with a cross-fitted uniform floor, the label-free shift check;
* :mod:`dprm.ias.auto` -- ``auto``: budgets fixed before drawing, learnt on a training set;
* :mod:`dprm.ias.sequential` -- ``auto-seq``: posterior, race index, policy, floor share;
* :mod:`dprm.ias.draws` -- draw orders and what a rule picks along them (Monte Carlo scoring);
* :mod:`dprm.ias.equal_cost` -- uniform / oracle / oracle-p / auto / auto-seq rows at equal cost;
* :mod:`dprm.ias.population` -- the twin's population oracle (``oracle-pop``);
* :mod:`dprm.ias.peers`, :mod:`dprm.ias.peer_curves` -- calibrator-free peers and their curves;
* :mod:`dprm.ias.pays` -- the "does it pay?" table (:func:`dprm.ias.pays.run_pays`).

Names are imported from their module on first use, so that ``dprm.ias.outputs`` and
``dprm.ias.constants`` (read by ``dprm ias --help``) load without pandas.
"""

import importlib

#: exported name -> the module that defines it
_EXPORTS = {
    "BETA_C": "dprm.ias.constants",
    "BETA_GRID": "dprm.ias.constants",
    "BUDGET_COLUMNS": "dprm.ias.constants",
    "C_GRID": "dprm.ias.constants",
    "DEFAULT_BETA": "dprm.ias.constants",
    "EXTRA_COLUMNS": "dprm.ias.constants",
    "CalibratorInput": "dprm.ias.inputs",
    "Estimate": "dprm.ias.estimates",
    "MC_TRIALS": "dprm.ias.constants",
    "M_LEVELS": "dprm.ias.constants",
    "N_MAX": "dprm.ias.constants",
    "P_CLIP": "dprm.ias.constants",
    "Pools": "dprm.ias.pools",
    "SUMMARY_COLUMNS": "dprm.ias.constants",
    "TAU_C": "dprm.ias.constants",
    "budget_from_curve": "dprm.ias.budgets",
    "budget_greedy": "dprm.ias.budgets",
    "budget_mixture": "dprm.ias.budgets",
    "budget_point": "dprm.ias.budgets",
    "estimate_from_model": "dprm.ias.estimates",
    "exact_accuracy_table": "dprm.ias.accuracy",
    "lookup": "dprm.ias.accuracy",
    "monte_carlo": "dprm.ias.accuracy",
    "pick_weights": "dprm.ias.accuracy",
    "run_ias": "dprm.ias.sweeps",
    "run_sweeps": "dprm.ias.sweeps",
    "success_curve_mixture": "dprm.ias.budgets",
    "success_curve_point": "dprm.ias.budgets",
    "sweep_rows": "dprm.ias.sweeps",
    "threshold_exact": "dprm.ias.accuracy",
    "truth_estimate": "dprm.ias.estimates",
    "uniform_curve": "dprm.ias.sweeps",
}

__all__ = [
    "BETA_C",
    "BETA_GRID",
    "BUDGET_COLUMNS",
    "C_GRID",
    "DEFAULT_BETA",
    "EXTRA_COLUMNS",
    "MC_TRIALS",
    "M_LEVELS",
    "N_MAX",
    "P_CLIP",
    "SUMMARY_COLUMNS",
    "TAU_C",
    "CalibratorInput",
    "Estimate",
    "Pools",
    "budget_from_curve",
    "budget_greedy",
    "budget_mixture",
    "budget_point",
    "estimate_from_model",
    "exact_accuracy_table",
    "lookup",
    "monte_carlo",
    "pick_weights",
    "run_ias",
    "run_sweeps",
    "success_curve_mixture",
    "success_curve_point",
    "sweep_rows",
    "threshold_exact",
    "truth_estimate",
    "uniform_curve",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
