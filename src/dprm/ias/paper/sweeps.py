"""The C, tau and beta sweeps of docs/design.md §4 over a BoN set's pools.

The ``accuracy`` column is exact for every sweep; ``accuracy_mc`` is a seeded Monte Carlo
(``MC_TRIALS`` trials, common random draws for every row of one call) kept as a cross-check, with
its standard error in ``accuracy_mc_se``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dprm.ias.constants import (
    BETA_C,
    BETA_GRID,
    C_GRID,
    CONTRACT_RULE,
    MC_TRIALS,
    N_MAX,
    TAU_C,
)
from dprm.ias.paper.accuracy import (
    exact_accuracy_table,
    lookup,
    monte_carlo,
    threshold_exact,
    threshold_mask_exact,
)
from dprm.ias.paper.budgets import budget_greedy, budget_point
from dprm.ias.paper.estimates import Estimate
from dprm.ias.paper.pools import Pools
from dprm.metrics import midpoint_levels


@dataclass
class _Row:
    method: str
    allocation: str
    C: float
    level: float
    budgets: np.ndarray  # [Q]
    thresholds: np.ndarray | None = None  # [Q], beta sweep only
    accept: np.ndarray | None = None  # bool [Q, K] in pool order, beta-cal sweep only


def _tau_grid(est: Estimate) -> tuple[np.ndarray, np.ndarray] | None:
    """(levels [L], quantiles [Q, L]) of the tau sweep: 100 mid-points or the trained levels."""
    if est.kind == "distribution":
        return midpoint_levels(est.q_mid.shape[1]), est.q_mid
    if est.kind == "levels":
        return est.levels, est.q_levels
    return None


def sweep_rows(
    estimates: Sequence[Estimate],
    *,
    c_grid: Sequence[float] = C_GRID,
    tau_c: float = TAU_C,
    beta_c: float = BETA_C,
    beta_grid: Sequence[float] = BETA_GRID,
    n_max: int = N_MAX,
    greedy: bool = False,
    pools: Pools | None = None,
) -> list[_Row]:
    """The budgets of the three sweeps (docs/design.md §4) for every estimate.

    * ``C``: every method, every C in ``c_grid``.
    * ``tau``: C = ``tau_c``, N_i = N(Q(tau | h_i), C) at every available level (distribution
      and levels kinds).
    * ``beta``: cap N_i at ``beta_c`` by the method's rule (mixture for distributions, Q(beta)
      point rule for levels kinds), stop at the first candidate scoring >= Q(beta | h_i).
    * ``greedy`` (only with ``greedy=True``; beyond docs/design.md): at every C, the same total
      budget as the C rule, spent on the largest marginal gains of the method's success curves
      (:func:`dprm.ias.paper.budgets.budget_greedy`); ``C`` names the C-rule row whose cost it matches.
    * ``beta-cal`` (the paper's reading of the beta rule; needs ``pools`` from a BoN set and the
      estimate's ``candidate`` estimates): the same cap, stop at the first candidate whose own
      calibrated estimate is >= Q(beta | h_i); the pick is that candidate (or, at the cap, the
      best drawn by PRM score).
    """
    rows: list[_Row] = []
    for est in estimates:
        curve = est.success_curve(n_max)  # [Q, n_max], shared by the C, greedy and beta sweeps
        budgets = est.budgets(np.asarray(c_grid), n_max, curve)
        rows += [_Row(est.method, "C", float(c), np.nan, budgets[i]) for i, c in enumerate(c_grid)]
        if greedy:
            rows += [
                _Row(est.method, "greedy", float(c), np.nan, budget_greedy(curve, b.mean()))
                for c, b in zip(c_grid, budgets, strict=True)
            ]
        grid = _tau_grid(est)
        if grid is not None:
            levels, q = grid
            tau_budgets = budget_point(q.T, tau_c, n_max)  # [L, Q]
            rows += [
                _Row(est.method, "tau", tau_c, float(t), tau_budgets[i])
                for i, t in enumerate(levels)
            ]
        q_beta = est.quantiles_at(beta_grid)
        if q_beta is not None:
            cap = est.budgets(beta_c, n_max, curve)
            rows += [
                _Row(est.method, "beta", beta_c, float(b), cap, q_beta[:, i])
                for i, b in enumerate(beta_grid)
            ]
            if est.candidate is not None and pools is not None and pools.row is not None:
                cand = pools.gather(est.candidate)  # [Q, K], -inf padding
                rows += [
                    _Row(
                        est.method,
                        "beta-cal",
                        beta_c,
                        float(b),
                        cap,
                        accept=cand >= q_beta[:, i][:, None],
                    )  # fmt: skip
                    for i, b in enumerate(beta_grid)
                ]
    return rows


def _plain_cost(pools: Pools, budgets, n_max: int) -> float:
    """Normalised cost mean_i min(N_i, K_i) / n_max of plain best-of-N (no early stopping)."""
    return np.minimum(budgets, pools.size).mean() / n_max


def _exact(pools: Pools, rows: list[_Row], n_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact (accuracy [R], normalised cost [R]) of every row."""
    table = exact_accuracy_table(pools, n_max)
    acc = np.empty(len(rows))
    cost = np.empty(len(rows))
    for i, row in enumerate(rows):
        if row.accept is not None:
            a, d = threshold_mask_exact(pools, row.accept, row.budgets)
            acc[i], cost[i] = a.mean(), d.mean() / n_max
        elif row.thresholds is None:
            acc[i] = lookup(table, row.budgets).mean()
            cost[i] = _plain_cost(pools, row.budgets, n_max)
        else:
            a, d = threshold_exact(pools, row.thresholds, row.budgets)
            acc[i], cost[i] = a.mean(), d.mean() / n_max
    return acc, cost


def _monte_carlo(
    pools: Pools, rows: list[_Row], n_max: int, trials: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Monte Carlo (accuracy, its standard error, normalised cost), each [R]; NaN if no trials.

    Rows without and with thresholds are two calls, each on the same seed.
    """
    mc_acc, mc_se, mc_cost = (np.full(len(rows), np.nan) for _ in range(3))
    if trials <= 0 or not rows:
        return mc_acc, mc_se, mc_cost
    plain = [i for i, r in enumerate(rows) if r.thresholds is None and r.accept is None]
    stop = [i for i, r in enumerate(rows) if r.thresholds is not None]
    calibrated = [i for i, r in enumerate(rows) if r.accept is not None]
    for idx, kind in ((plain, "plain"), (stop, "threshold"), (calibrated, "accept")):
        if not idx:
            continue
        out = monte_carlo(
            pools,
            np.stack([rows[i].budgets for i in idx]),
            np.stack([rows[i].thresholds for i in idx]) if kind == "threshold" else None,
            accept=np.stack([rows[i].accept for i in idx]) if kind == "accept" else None,
            trials=trials,
            seed=seed,
        )
        mc_acc[idx], mc_se[idx], mc_cost[idx] = (
            out["accuracy"],
            out["accuracy_se"],
            out["cost"] / n_max,
        )
    return mc_acc, mc_se, mc_cost


def run_sweeps(
    pools: Pools,
    estimates: Sequence[Estimate],
    *,
    n_max: int = N_MAX,
    mc_trials: int = MC_TRIALS,
    seed: int = 0,
    **grids,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All sweeps for all methods on one BoN set.

    Args:
        pools: the BoN set's candidate pools (Q questions).
        estimates: one :class:`Estimate` per method, rows aligned with ``pools``.
        n_max: the largest budget.
        mc_trials: Monte Carlo trials for ``accuracy_mc`` (0 skips it: NaN).
        seed: seed of the Monte Carlo.
        grids: ``c_grid``, ``tau_c``, ``beta_c``, ``beta_grid`` overrides for :func:`sweep_rows`.

    Returns:
        (summary, budgets): ``summary`` has ``SUMMARY_COLUMNS + EXTRA_COLUMNS`` (``accuracy``
        exact, ``cost`` = mean_i E[draws_i] / n_max, ``level`` NaN for the C sweep);
        ``budgets`` has ``BUDGET_COLUMNS`` (for the beta sweep ``n`` is the cap N_i).
    """
    for est in estimates:
        for arr in (est.p, est.q_mid):
            if arr is not None and len(arr) != len(pools):
                raise ValueError(f"{est.method}: {len(arr)} estimates for {len(pools)} questions")
    rows = sweep_rows(estimates, n_max=n_max, pools=pools, **grids)
    acc, cost = _exact(pools, rows, n_max)
    mc_acc, mc_se, mc_cost = _monte_carlo(pools, rows, n_max, mc_trials, seed)
    summary = pd.DataFrame(
        {
            "method": [r.method for r in rows],
            "allocation": [r.allocation for r in rows],
            "C": [r.C for r in rows],
            "level": [r.level for r in rows],
            "cost": cost,
            "accuracy": acc,
            "accuracy_mc": mc_acc,
            "rule": CONTRACT_RULE,
            "target_cost": np.nan,  # the sweeps have a knob, not a target cost
            "accuracy_mc_se": mc_se,
            "cost_mc": mc_cost,
            "n_questions": len(pools),
        }
    )
    q = len(pools)
    budgets = pd.DataFrame(
        {
            "question_id": np.tile(pools.question_id.astype(str), len(rows)),
            "method": np.repeat([r.method for r in rows], q),
            "allocation": np.repeat([r.allocation for r in rows], q),
            "C": np.repeat([r.C for r in rows], q),
            "level": np.repeat([r.level for r in rows], q),
            "n": np.concatenate([r.budgets for r in rows]).astype(np.int32)
            if rows
            else np.empty(0, np.int32),
        }
    )
    return summary, budgets


def uniform_curve(
    pools: Pools, n_values: Sequence[int] | None = None, n_max: int = N_MAX
) -> pd.DataFrame:
    """Reference: the same n for every question (plain best-of-n), exact.

    Args:
        pools: Q candidate pools.
        n_values: budgets to evaluate (default 1..n_max).
        n_max: the largest budget (cost is normalised by it).

    Returns:
        columns ``n, cost, accuracy``, one row per value of ``n_values``.
    """
    n_values = range(1, n_max + 1) if n_values is None else n_values
    table = exact_accuracy_table(pools, n_max)
    n = np.asarray(n_values, dtype=np.int64)
    return pd.DataFrame(
        {
            "n": n,
            "cost": [_plain_cost(pools, v, n_max) for v in n],
            "accuracy": table[:, n - 1].mean(axis=0),
        }
    )
