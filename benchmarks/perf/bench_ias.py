"""Benchmark: the exact IAS C sweep against a plain-Python Monte Carlo loop.

Workload (docs/design.md §4): 10 values of C x 3 methods (Base point rule, QR point rule at
Q(0.1), OT mixture rule over 100 levels) x 500 questions x a pool of 64 candidates.

* exact: budgets for every (method, C), the per-question table of expected best-of-n accuracy
  for n = 1..64 (closed form on the sorted pool, ties averaged), then table lookups;
* Monte Carlo: for every (method, C, question), 100 trials of ``random.sample`` without
  replacement and an argmax of the PRM score, in plain Python (the budgets are given to it).

Prints both timings, the speed ratio (target >= 100x) and, per (method, C), |exact - MC|
against the MC standard error (the standard deviation of the 100 per-trial accuracies / 10).
Run: ``.venv/bin/python benchmarks/perf/bench_ias.py``.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from dprm import ias
from dprm.metrics import midpoint_levels, true_quantiles

Q, K, TRIALS = 500, 64, 100


def world(seed: int = 0):
    """A synthetic BoN workload: logit-normal truth, an over-confident PRM, scores with ties."""
    rng = np.random.default_rng(seed)
    mu, sigma = rng.normal(-0.5, 1.5, Q), rng.uniform(0.5, 1.5, Q)
    p = 1 / (1 + np.exp(-(mu + sigma * rng.standard_normal(Q))))
    correct = rng.random((Q, K)) < p[:, None]
    score = np.round(
        1 / (1 + np.exp(-(2.0 + 1.6 * (2 * correct - 1) + rng.normal(0, 1, (Q, K))))), 3
    )
    levels = np.concatenate([midpoint_levels(100), ias.BETA_GRID])
    q = true_quantiles(mu, sigma, levels)
    estimates = [
        ias.Estimate("base", "point", p=1 / (1 + np.exp(-(mu + 2.0)))),
        ias.Estimate(
            "qr",
            "levels",
            p=q[:, 100 + 1],
            levels=np.asarray(ias.BETA_GRID),
            q_levels=q[:, 100:],
            beta=0.1,
        ),
        ias.Estimate("ot", "distribution", q_mid=q[:, :100], levels=levels, q_levels=q),
    ]
    return score, correct, estimates


def exact_sweep(pools: ias.Pools, estimates) -> tuple[np.ndarray, np.ndarray]:
    """Budgets [methods, C, Q] and exact accuracies [methods, C]."""
    budgets = np.stack([e.budgets(np.asarray(ias.C_GRID)) for e in estimates])
    table = ias.exact_accuracy_table(pools)
    return budgets, ias.lookup(table, budgets).mean(axis=-1)


def mc_loop(score: np.ndarray, correct: np.ndarray, budgets: np.ndarray, seed: int = 0):
    """Plain Python: per (method, C, question) 100 trials; returns mean and SE per (method, C)."""
    rng = random.Random(seed)
    s_rows, c_rows = score.tolist(), correct.tolist()
    pool = list(range(K))
    n_m, n_c, _ = budgets.shape
    per_trial = np.zeros((n_m, n_c, TRIALS))
    for m in range(n_m):
        for c in range(n_c):
            for i in range(Q):
                n, s, ok = int(budgets[m, c, i]), s_rows[i], c_rows[i]
                for t in range(TRIALS):
                    drawn = rng.sample(pool, n)
                    best = max(drawn, key=s.__getitem__)  # ties: first of a random order
                    per_trial[m, c, t] += ok[best]
    per_trial /= Q
    return per_trial.mean(axis=-1), per_trial.std(axis=-1, ddof=1) / np.sqrt(TRIALS)


def main() -> None:
    global Q, TRIALS
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--questions", type=int, default=Q, help=f"questions (default {Q})")
    parser.add_argument("--trials", type=int, default=TRIALS, help="Monte Carlo trials")
    parser.add_argument("--smoke", action="store_true", help="the smallest run: 20 q, 5 trials")
    args = parser.parse_args()
    Q, TRIALS = (20, 5) if args.smoke else (args.questions, args.trials)
    score, correct, estimates = world()
    pools = ias.Pools.from_arrays(list(score), list(correct))
    exact_sweep(pools, estimates)  # warm-up (caches the pick-weight tensor)
    reps = 2 if args.smoke else 20
    t0 = time.perf_counter()
    for _ in range(reps):
        budgets, exact = exact_sweep(pools, estimates)
    t_exact = (time.perf_counter() - t0) / reps
    t0 = time.perf_counter()
    ias.monte_carlo(pools, budgets.reshape(-1, Q), trials=TRIALS, seed=0)
    t_vec = time.perf_counter() - t0
    t0 = time.perf_counter()
    mc, se = mc_loop(score, correct, budgets)
    t_loop = time.perf_counter() - t0
    diff = np.abs(exact - mc)
    z = diff / np.maximum(se, 1e-12)
    print(
        f"workload: {len(ias.C_GRID)} C x {len(estimates)} methods x {Q} questions x pool {K}, MC {TRIALS} trials"
    )
    print(
        f"exact sweep (budgets + table + lookups): {t_exact * 1e3:8.2f} ms  (mean of {reps} runs)"
    )
    print(f"vectorised MC (dprm.ias.monte_carlo):     {t_vec * 1e3:8.2f} ms")
    print(f"plain-Python MC loop:                     {t_loop * 1e3:8.2f} ms")
    print(f"speed-up exact vs plain-Python MC: {t_loop / t_exact:,.0f}x (target >= 100x)")
    print(
        f"max |exact - MC| = {diff.max():.4f}; max |exact - MC| / SE = {z.max():.2f} (SE median {np.median(se):.4f})"
    )
    print(f"rows within 3 SE: {(z <= 3).sum()} / {z.size}")
    print("method   C      cost   exact    MC       SE")
    for m, est in enumerate(estimates):
        for c, cval in enumerate(ias.C_GRID):
            cost = budgets[m, c].mean() / 64
            print(
                f"{est.method:6s} {cval:6.3f} {cost:6.3f} {exact[m, c]:.4f}  {mc[m, c]:.4f}  {se[m, c]:.4f}"
            )


if __name__ == "__main__":
    main()
