"""Budget rules: success curves and the smallest budget that reaches a target C.

Both rules search n = 1..N_max directly, exactly: the curve is evaluated in float64 and every
comparison with C that float64 cannot settle (within :data:`NEAR_TIE`) is re-decided in exact
rational arithmetic on the float64 inputs (:func:`exact_budget`). So the budget is the exact
minimum of the defining inequality for the given p (or quantiles) and C, also on knife-edge
inputs where C lies on a boundary 1 - (1 - p)^k; neither a plain float64 search nor the closed
form ``ceil(log(1-C)/log(1-p))`` is exact there (on such inputs the float64 search was measured
wrong more often than the closed form; for float32 scores neither ever matters):

* point rule (Base, QR, any point calibrator): N(p, C) = min{n : 1 - (1 - p)^n >= C};
* mixture rule (any full-distribution calibrator, e.g. OT):
  N = min{n : (1/M) sum_m [1 - (1 - Q(beta_m | h))^n] >= C}, beta_m = (m - 0.5)/M;

with N = N_max when no n qualifies and every p (or quantile) clipped to [1e-4, 1 - 1e-4].
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dprm.ias.constants import N_MAX, P_CLIP

#: |curve - C| within this is re-decided exactly (float64 curve error is < 1e-13 for n <= 1000)
NEAR_TIE = 1e-12


def clipped(p) -> np.ndarray:
    """Success probabilities as the rules use them: float64, clipped to [P_CLIP, 1 - P_CLIP]."""
    return np.clip(np.asarray(p, dtype=np.float64), P_CLIP, 1.0 - P_CLIP)


def _fail_powers(x: np.ndarray, n_max: int) -> np.ndarray:
    """x^n for n = 1..n_max by repeated multiplication [..., n_max].

    A sequential product is bit-identical to the loop ``f *= x`` in plain Python (one correctly
    rounded multiply per step), so budgets do not depend on a platform's ``pow`` and the
    single-question API agrees exactly with the vectorised one.

    Args:
        x: per-draw failure probabilities [...].
        n_max: the largest power.

    Returns:
        float64 [..., n_max].
    """
    return np.multiply.accumulate(np.broadcast_to(x[..., None], x.shape + (n_max,)), axis=-1)


def success_curve_point(p, n_max: int = N_MAX) -> np.ndarray:
    """P(at least one success in n draws) = 1 - (1 - p)^n for n = 1..n_max.

    Args:
        p: success probabilities [...], clipped to [1e-4, 1 - 1e-4].
        n_max: the largest budget.

    Returns:
        float64 [..., n_max].
    """
    return 1.0 - _fail_powers(1.0 - clipped(p), n_max)


def success_curve_mixture(quantiles, n_max: int = N_MAX) -> np.ndarray:
    """(1/M) sum_m [1 - (1 - q_m)^n] for n = 1..n_max (docs/design.md §4, OT rule).

    A row whose M quantiles are all equal is a point mass and gets exactly the point curve, so
    the two rules agree bit for bit there.

    Args:
        quantiles: [..., M] quantiles at the M mid-point levels, clipped like ``p``.
        n_max: the largest budget.

    Returns:
        float64 [..., n_max].
    """
    q = clipped(quantiles)
    if q.ndim == 0 or q.shape[-1] == 0:
        raise ValueError(f"quantiles must have shape [..., M] with M >= 1, got {q.shape}")
    curve = 1.0 - np.mean(_fail_powers(1.0 - q, n_max), axis=-2)
    point = q.max(axis=-1) == q.min(axis=-1)
    if point.any():
        curve = np.where(point[..., None], success_curve_point(q[..., 0], n_max), curve)
    return curve


def exact_budget(probs, C: float, n_max: int) -> int:
    """min{n : (1/M) sum_m [1 - (1 - p_m)^n] >= C}, else n_max, in exact rational arithmetic.

    Args:
        probs: per-component success probabilities [M] (already clipped), float64 values taken
            as the exact rationals they are.
        C: the target (float64, exact).
        n_max: the largest budget.
    """
    fails = [1 - Fraction(float(p)) for p in np.ravel(probs)]
    bound = (1 - Fraction(float(C))) * len(fails)  # mean(fail^n) <= 1 - C
    powers = [Fraction(1)] * len(fails)
    for n in range(1, n_max + 1):
        powers = [power * fail for power, fail in zip(powers, fails, strict=True)]
        if sum(powers) <= bound:
            return n
    return n_max


def budget_from_curve(curve: np.ndarray, C, probs: np.ndarray | None = None) -> np.ndarray:
    """Smallest n (1-based) with curve[..., n - 1] >= C, or n_max = curve.shape[-1] if none.

    Args:
        curve: success curves [..., n_max], non-decreasing in n.
        C: targets broadcastable against ``curve[..., 0]``.
        probs: the clipped success probabilities behind ``curve`` [..., M] (M = 1 for the point
            rule). When given, a comparison within :data:`NEAR_TIE` of C is re-decided exactly
            (:func:`exact_budget`); without it the float64 comparison stands.

    Returns:
        int64 budgets with the broadcast shape of ``curve[..., 0]`` and ``C``.
    """
    C = np.asarray(C, dtype=np.float64)
    if not np.isfinite(C).all():
        raise ValueError("C must be finite")
    gap = curve - C[..., None]
    ok = gap >= 0.0
    first = np.argmax(ok, axis=-1) + 1
    budgets = np.where(ok.any(axis=-1), first, curve.shape[-1]).astype(np.int64)
    if probs is None:
        return budgets
    near = (np.abs(gap) <= NEAR_TIE).any(axis=-1)
    if near.any():
        shape = budgets.shape
        probs = np.broadcast_to(probs, shape + probs.shape[-1:])
        targets = np.broadcast_to(C, shape)
        for index in np.argwhere(np.atleast_1d(near)):
            index = tuple(index[len(index) - len(shape) :])  # () for a single question
            budgets[index] = exact_budget(probs[index], targets[index], curve.shape[-1])
    return budgets


def budget_point(p, C, n_max: int = N_MAX) -> np.ndarray:
    """Point-rule budget N(p, C) = min{n in 1..n_max : 1 - (1 - p)^n >= C}, else n_max.

    Exact (see the module docstring). Works for one question (scalars give a 0-d array) or
    many; ``p`` and ``C`` broadcast.

    Args:
        p: success probabilities [...].
        C: targets, broadcast against ``p``.
        n_max: the largest budget.

    Returns:
        int64 budgets with the broadcast shape of ``p`` and ``C``.
    """
    p, C = np.broadcast_arrays(np.asarray(p, dtype=np.float64), np.asarray(C, dtype=np.float64))
    return budget_from_curve(success_curve_point(p, n_max), C, clipped(p)[..., None])


def budget_mixture(quantiles, C, n_max: int = N_MAX) -> np.ndarray:
    """Mixture-rule budget from quantiles at the mid-point levels (exact, as the point rule).

    Args:
        quantiles: [..., M] quantiles; a single question is shape [M].
        C: targets broadcastable against ``quantiles[..., 0]``.
        n_max: the largest budget.

    Returns:
        int64 budgets with the broadcast shape of ``quantiles[..., 0]`` and ``C``.
    """
    return budget_from_curve(success_curve_mixture(quantiles, n_max), C, clipped(quantiles))


def budget_greedy(curve: np.ndarray, mean_budget: float) -> np.ndarray:
    """Budgets that maximise the summed success curves under a total budget (not in docs/design.md).

    The C rules give every question the n that reaches C *for that question*; that is not the
    allocation that maximises accuracy at a given mean cost. Success curves (point or mixture)
    are concave in n, so taking the largest marginal gains curve[i, n] - curve[i, n - 1] across
    all questions until the total is round(mean_budget x Q) is optimal for
    sum_i curve[i, N_i] (every question gets at least one draw). Ties go to the lower question
    index and the lower n.

    Args:
        curve: success curves [Q, n_max], non-decreasing and concave in n.
        mean_budget: the mean draws per question, in [1, n_max].

    Returns:
        int64 budgets [Q] in 1..n_max with sum = round(mean_budget x Q).
    """
    curve = np.asarray(curve, dtype=np.float64)
    if curve.ndim != 2:
        raise ValueError(f"curve must be [Q, n_max], got shape {curve.shape}")
    n_questions, n_max = curve.shape
    if not 1.0 <= mean_budget <= n_max:
        raise ValueError(f"mean_budget must be in [1, {n_max}], got {mean_budget}")
    gains = np.diff(curve, axis=1)  # [Q, n_max - 1]: gain of the (n + 1)-th draw
    extra = int(round((mean_budget - 1.0) * n_questions))
    chosen = np.argsort(-gains, axis=None, kind="stable")[:extra]
    budgets = np.ones(n_questions, dtype=np.int64)
    np.add.at(budgets, np.unravel_index(chosen, gains.shape)[0], 1)
    return budgets
