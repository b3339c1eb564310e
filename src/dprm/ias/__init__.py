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

The package, by job (each subpackage's docstring lists its modules):

* :mod:`dprm.ias.constants` -- defaults (N_max, grids) and output columns;
  :mod:`dprm.ias.outputs` -- the files of one run; :mod:`dprm.ias.run` -- :func:`run_ias`,
  one run (the sweeps plus the equal-cost rows);
* :mod:`dprm.ias.paper` -- the paper's rules: pools, estimates, budgets, exact accuracy, sweeps;
* :mod:`dprm.ias.selection` -- selection rules (highest / weighted / majority x last / min /
  product / calibrated weights) and draw orders;
* :mod:`dprm.ias.learnt` -- allocations learnt on a training set with every budget fixed
  before drawing (``auto``, the oracle's concave-hull greedy, the label-free shift check);
* :mod:`dprm.ias.sequential` -- ``auto-seq``: posterior, race index, policy, floor share;
* :mod:`dprm.ias.peers` -- the calibrator-free peers, their and ``auto-seq``'s cost-accuracy
  curves, the fallback under a shift;
* :mod:`dprm.ias.curves` -- evaluation at equal cost: the rows, ``oracle-pop``, the "does it
  pay?" table.

The modules of the flat layout this package had before (``dprm.ias.budgets``,
``dprm.ias.peer_curves``, ...) remain as thin re-exports, so old imports keep working.

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
    "CalibratorInput": "dprm.ias.learnt.inputs",
    "Estimate": "dprm.ias.paper.estimates",
    "MC_TRIALS": "dprm.ias.constants",
    "M_LEVELS": "dprm.ias.constants",
    "N_MAX": "dprm.ias.constants",
    "P_CLIP": "dprm.ias.constants",
    "Pools": "dprm.ias.paper.pools",
    "SUMMARY_COLUMNS": "dprm.ias.constants",
    "TAU_C": "dprm.ias.constants",
    "budget_from_curve": "dprm.ias.paper.budgets",
    "budget_greedy": "dprm.ias.paper.budgets",
    "budget_mixture": "dprm.ias.paper.budgets",
    "budget_point": "dprm.ias.paper.budgets",
    "estimate_from_model": "dprm.ias.paper.estimates",
    "exact_accuracy_table": "dprm.ias.paper.accuracy",
    "lookup": "dprm.ias.paper.accuracy",
    "monte_carlo": "dprm.ias.paper.accuracy",
    "pick_weights": "dprm.ias.paper.accuracy",
    "run_ias": "dprm.ias.run",
    "run_sweeps": "dprm.ias.paper.sweeps",
    "success_curve_mixture": "dprm.ias.paper.budgets",
    "success_curve_point": "dprm.ias.paper.budgets",
    "sweep_rows": "dprm.ias.paper.sweeps",
    "threshold_exact": "dprm.ias.paper.accuracy",
    "truth_estimate": "dprm.ias.paper.estimates",
    "uniform_curve": "dprm.ias.paper.sweeps",
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
