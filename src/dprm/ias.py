"""Instance-adaptive best-of-N (IAS): budgets, exact and Monte Carlo accuracy, sweeps.

Implements DESIGN.md section 4 (the paper's section "Instance-Adaptive BoN").

Budget rules (both search n = 1..N_max directly; the closed form ``ceil(log(1-C)/log(1-p))``
is off by one on boundaries and is never used):

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
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dprm.io import DataError
from dprm.metrics import midpoint_levels

N_MAX = 64
P_CLIP = 1e-4
M_LEVELS = 100
DEFAULT_BETA = 0.1
MC_TRIALS = 100
#: the C sweep of DESIGN.md section 4
C_GRID = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.975, 0.99, 0.995, 0.999)
TAU_C = 0.99  # target of the tau sweep (paper Fig. 4)
BETA_C = 0.9  # target that sets the cap of beta-threshold early stopping (paper Fig. 3)
BETA_GRID = tuple(np.round(np.linspace(0.0, 1.0, 11), 10))
SUMMARY_COLUMNS = ["method", "sweep", "C", "level", "cost", "accuracy", "accuracy_mc"]
EXTRA_COLUMNS = ["accuracy_mc_se", "cost_mc", "n_questions"]
BUDGET_COLUMNS = ["question_id", "method", "sweep", "C", "level", "n"]


# ----------------------------------------------------------------------------- budget rules
def _fail_powers(x: np.ndarray, n_max: int) -> np.ndarray:
    """x^n for n = 1..n_max by repeated multiplication [..., n_max].

    A sequential product is bit-identical to the loop ``f *= x`` in plain Python (one correctly
    rounded multiply per step), so budgets do not depend on a platform's ``pow`` and the
    single-question API agrees exactly with the vectorised one.
    """
    return np.multiply.accumulate(np.broadcast_to(x[..., None], x.shape + (n_max,)), axis=-1)


def success_curve_point(p, n_max: int = N_MAX) -> np.ndarray:
    """P(at least one success in n draws) = 1 - (1 - p)^n for n = 1..n_max.

    Args:
        p: success probabilities [...], clipped to [1e-4, 1 - 1e-4].

    Returns:
        float64 [..., n_max].
    """
    p = np.clip(np.asarray(p, dtype=np.float64), P_CLIP, 1.0 - P_CLIP)
    return 1.0 - _fail_powers(1.0 - p, n_max)


def success_curve_mixture(quantiles, n_max: int = N_MAX) -> np.ndarray:
    """(1/M) sum_m [1 - (1 - q_m)^n] for n = 1..n_max (DESIGN.md section 4, OT rule).

    A row whose M quantiles are all equal is a point mass and gets exactly the point curve, so
    the two rules agree bit for bit there.

    Args:
        quantiles: [..., M] quantiles at the M mid-point levels, clipped like ``p``.

    Returns:
        float64 [..., n_max].
    """
    q = np.clip(np.asarray(quantiles, dtype=np.float64), P_CLIP, 1.0 - P_CLIP)
    if q.ndim == 0 or q.shape[-1] == 0:
        raise ValueError(f"quantiles must have shape [..., M] with M >= 1, got {q.shape}")
    curve = 1.0 - np.mean(_fail_powers(1.0 - q, n_max), axis=-2)
    point = q.max(axis=-1) == q.min(axis=-1)
    if point.any():
        curve = np.where(point[..., None], success_curve_point(q[..., 0], n_max), curve)
    return curve


def budget_from_curve(curve: np.ndarray, C) -> np.ndarray:
    """Smallest n (1-based) with curve[..., n - 1] >= C, or n_max = curve.shape[-1] if none.

    Args:
        curve: success curves [..., n_max], non-decreasing in n.
        C: targets broadcastable against ``curve[..., 0]``.

    Returns:
        int64 budgets with the broadcast shape of ``curve[..., 0]`` and ``C``.
    """
    C = np.asarray(C, dtype=np.float64)
    if not np.isfinite(C).all():
        raise ValueError("C must be finite")
    ok = curve >= C[..., None]
    first = np.argmax(ok, axis=-1) + 1
    return np.where(ok.any(axis=-1), first, curve.shape[-1]).astype(np.int64)


def budget_point(p, C, n_max: int = N_MAX) -> np.ndarray:
    """Point-rule budget N(p, C) = min{n in 1..n_max : 1 - (1 - p)^n >= C}, else n_max.

    Works for one question (scalars give a 0-d array) or many; ``p`` and ``C`` broadcast.
    """
    p, C = np.broadcast_arrays(np.asarray(p, dtype=np.float64), np.asarray(C, dtype=np.float64))
    return budget_from_curve(success_curve_point(p, n_max), C)


def budget_mixture(quantiles, C, n_max: int = N_MAX) -> np.ndarray:
    """Mixture-rule budget from quantiles [..., M] at the mid-point levels; ``C`` broadcasts
    against ``quantiles[..., 0]``. A single question is quantiles of shape [M]."""
    return budget_from_curve(success_curve_mixture(quantiles, n_max), C)


# ----------------------------------------------------------------------------- pools
@dataclass
class Pools:
    """Candidate pools, one row per question, sorted by PRM score (descending), padded.

    Attributes:
        question_id: [Q] ids.
        scores: float64 [Q, K] candidate PRM scores, -inf padding.
        correct: float64 [Q, K] 0/1 correctness in the same order, 0 padding.
        correct_tied: float64 [Q, K] correctness averaged within groups of equal score.
        size: int64 [Q] pool size K_i.
    """

    question_id: np.ndarray
    scores: np.ndarray
    correct: np.ndarray
    correct_tied: np.ndarray
    size: np.ndarray

    def __len__(self) -> int:
        return len(self.size)

    @classmethod
    def from_arrays(cls, scores: Sequence, correct: Sequence, question_id=None) -> Pools:
        """Pools from per-question score and correctness sequences (ragged allowed)."""
        sizes = np.array([len(s) for s in scores], dtype=np.int64)
        if len(correct) != len(scores) or any(
            len(c) != k for c, k in zip(correct, sizes, strict=True)
        ):
            raise ValueError("scores and correct must have the same ragged shape")
        if (sizes < 1).any():
            raise ValueError(f"question {int(np.flatnonzero(sizes < 1)[0])} has an empty pool")
        k = int(sizes.max())
        s = np.full((len(sizes), k), -np.inf)
        c = np.zeros((len(sizes), k))
        for i, (si, ci) in enumerate(zip(scores, correct, strict=True)):
            order = np.argsort(-np.asarray(si, dtype=np.float64), kind="stable")
            s[i, : sizes[i]] = np.asarray(si, dtype=np.float64)[order]
            c[i, : sizes[i]] = np.asarray(ci, dtype=np.float64)[order]
        qid = np.arange(len(sizes)).astype(str) if question_id is None else np.asarray(question_id)
        return cls(qid, s, c, _tie_average(s, c), sizes)

    @classmethod
    def from_bon(cls, bon) -> Pools:
        """Pools of a :class:`dprm.data.contract.BonSet`, rows in ``bon.questions`` order."""
        qid = bon.questions["question_id"].to_numpy()
        resp = bon.responses
        index = pd.Series(np.arange(len(qid)), index=qid)
        row = index.reindex(resp["question_id"].to_numpy()).to_numpy()
        sizes = np.bincount(row, minlength=len(qid))
        if (sizes == 0).any():
            bad = qid[np.flatnonzero(sizes == 0)[0]]
            path = None if bon.path is None else bon.path / "responses.parquet"
            raise DataError(path, f"question {bad!r} has no candidate responses")
        score = resp["prm_score"].to_numpy(np.float64)
        order = np.lexsort((-score, row))
        row, score = row[order], score[order]
        correct = resp["correct"].to_numpy().astype(np.float64)[order]
        pos = np.arange(len(row)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        s = np.full((len(qid), int(sizes.max())), -np.inf)
        c = np.zeros_like(s)
        s[row, pos], c[row, pos] = score, correct
        return cls(qid, s, c, _tie_average(s, c), sizes.astype(np.int64))


def _tie_average(scores: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Replace correctness by its mean within runs of equal score along each sorted row."""
    q, k = scores.shape
    new = np.ones((q, k), dtype=bool)
    new[:, 1:] = scores[:, 1:] != scores[:, :-1]
    if new.all():
        return correct.copy()
    group = np.cumsum(new.ravel()) - 1
    total = np.bincount(group, weights=correct.ravel())
    count = np.bincount(group)
    return (total / count)[group].reshape(q, k)


# ----------------------------------------------------------------------------- exact accuracy
@functools.cache
def _comb(k_max: int) -> np.ndarray:
    """Binomial coefficients C(a, b) as float64 [k_max + 1, k_max + 1] (Pascal's triangle)."""
    c = np.zeros((k_max + 1, k_max + 1))
    c[:, 0] = 1.0
    for a in range(1, k_max + 1):
        c[a, 1 : a + 1] = c[a - 1, :a] + c[a - 1, 1 : a + 1]
    return c


@functools.cache
def pick_weights(k_max: int) -> np.ndarray:
    """W[K, n - 1, j - 1] = P(rank j is the best of n draws from a pool of K) [k_max + 1, k_max, k_max].

    C(K - j, n - 1) / C(K, n) for 1 <= n, j <= K; zero elsewhere. Read-only.
    """
    comb = _comb(k_max)
    big_k = np.arange(k_max + 1)[:, None, None]
    n = np.arange(1, k_max + 1)[None, :, None]
    j = np.arange(1, k_max + 1)[None, None, :]
    valid = (n <= big_k) & (j <= big_k)
    num = comb[np.clip(big_k - j, 0, k_max), np.clip(n - 1, 0, k_max)]
    den = comb[big_k, np.clip(n, 0, k_max)]
    w = np.where(valid, num / np.where(valid, den, 1.0), 0.0)
    w.setflags(write=False)
    return w


def exact_accuracy_table(pools: Pools, n_max: int = N_MAX) -> np.ndarray:
    """Expected accuracy of best-of-n by PRM score for n = 1..n_max, per question [Q, n_max].

    For n beyond a question's pool size the whole pool is drawn (the value at n = K_i).
    """
    k = pools.scores.shape[1]
    w = pick_weights(k)  # [K + 1, K, K]
    acc = np.einsum("qj,qnj->qn", pools.correct_tied, w[pools.size])  # [Q, K]
    n = np.minimum(np.arange(1, n_max + 1), pools.size[:, None])
    return np.take_along_axis(acc, n - 1, axis=1)


def lookup(table: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    """Per-question values table[i, N_i - 1] for budgets [..., Q] -> [..., Q]."""
    budgets = np.asarray(budgets, dtype=np.int64)
    rows = np.arange(table.shape[0])
    return table[rows, np.clip(budgets, 1, table.shape[1]) - 1]


def threshold_exact(
    pools: Pools, thresholds: np.ndarray, caps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Exact beta-threshold early stopping per question (see the module docstring).

    Args:
        thresholds: [Q] score thresholds t_i (stop at the first candidate with score >= t_i).
        caps: [Q] budgets N_i (stop after N_i draws at most).

    Returns:
        (expected accuracy [Q], expected number of draws [Q]).
    """
    q_count, k = pools.scores.shape
    size = pools.size
    cap = np.clip(np.asarray(caps, dtype=np.int64), 1, size)
    a = (pools.scores >= np.asarray(thresholds, dtype=np.float64)[:, None]).sum(axis=1)
    b = size - a
    steps = np.arange(k)
    factor = np.clip(b[:, None] - steps, 0, None) / np.maximum(size[:, None] - steps, 1)
    survive = np.ones((q_count, k + 1))  # survive[:, n] = P(F > n) = C(b, n) / C(K, n)
    survive[:, 1:] = np.cumprod(factor, axis=1)
    draws = np.take_along_axis(np.cumsum(survive, axis=1), cap[:, None] - 1, axis=1)[:, 0]
    miss = np.take_along_axis(survive, cap[:, None], axis=1)[:, 0]
    csum = np.cumsum(pools.correct_tied, axis=1)
    mean_a = np.take_along_axis(csum, np.maximum(a, 1)[:, None] - 1, axis=1)[:, 0] / np.maximum(
        a, 1
    )
    shifted = np.take_along_axis(pools.correct_tied, np.clip(a[:, None] + steps, 0, k - 1), axis=1)
    acc_b = np.einsum("qj,qj->q", pick_weights(k)[b, cap - 1], shifted)
    acc = np.where(a > 0, (1.0 - miss) * mean_a, 0.0) + miss * acc_b
    return acc, draws


# ----------------------------------------------------------------------------- Monte Carlo
def monte_carlo(
    pools: Pools,
    budgets: np.ndarray,
    thresholds: np.ndarray | None = None,
    *,
    trials: int = MC_TRIALS,
    seed: int = 0,
    chunk: int = 8,
) -> dict[str, np.ndarray]:
    """Seeded Monte Carlo of (early-stopped) best-of-N, vectorised over rows and questions.

    Each trial draws one uniformly random order of every question's pool; every row of
    ``budgets`` is evaluated on the same orders (common random numbers). Drawing the first
    N_i candidates of the order is drawing N_i without replacement; the pick is the first
    maximum of the PRM score among the drawn ones (uniform among ties, as the order is random).
    With thresholds, drawing stops at the first candidate scoring >= t_i, or at N_i.

    Args:
        budgets: int [R, Q] budgets (caps) per row and question.
        thresholds: [R, Q] stopping thresholds, or None (no early stopping).

    Returns:
        ``accuracy``, ``accuracy_se`` (standard error over trials), ``cost`` (mean draws per
        question), each [R].
    """
    budgets = np.atleast_2d(np.asarray(budgets, dtype=np.int64))
    rows, q_count = budgets.shape
    k = pools.scores.shape[1]
    budgets = np.clip(budgets, 1, pools.size[None, :])
    rng = np.random.default_rng(seed)
    acc = np.empty((trials, rows))
    draws = np.empty((trials, rows))
    q_idx = np.arange(q_count)[None, None, :]
    pad = np.arange(k)[None, :] >= pools.size[:, None]
    for start in range(0, trials, chunk):
        t = min(chunk, trials - start)
        keys = rng.random((t, q_count, k))
        keys[:, pad] = np.inf
        order = np.argsort(keys, axis=-1)
        s = np.take_along_axis(np.broadcast_to(pools.scores, keys.shape), order, axis=-1)
        c = np.take_along_axis(np.broadcast_to(pools.correct, keys.shape), order, axis=-1)
        previous = np.full_like(s, -np.inf)
        previous[..., 1:] = np.maximum.accumulate(s, axis=-1)[..., :-1]
        best = np.maximum.accumulate(np.where(s > previous, np.arange(k), 0), axis=-1)
        prefix = np.take_along_axis(c, best, axis=-1)  # [t, Q, K]: pick's correctness after n
        n = np.broadcast_to(budgets[None], (t, rows, q_count))
        if thresholds is not None:
            ok = s[:, None, :, :] >= np.asarray(thresholds, dtype=np.float64)[None, :, :, None]
            first = np.where(ok.any(-1), np.argmax(ok, axis=-1) + 1, k)  # [t, R, Q]
            n = np.minimum(n, first)
        picked = prefix[np.arange(t)[:, None, None], q_idx, n - 1]  # [t, R, Q]
        acc[start : start + t] = picked.mean(axis=-1)
        draws[start : start + t] = n.mean(axis=-1)
    se = acc.std(axis=0, ddof=1) / np.sqrt(trials) if trials > 1 else np.full(rows, np.nan)
    return {"accuracy": acc.mean(axis=0), "accuracy_se": se, "cost": draws.mean(axis=0)}


# ----------------------------------------------------------------------------- estimates
@dataclass
class Estimate:
    """What the budget rules need from one calibrator on one BoN set.

    Attributes:
        method: display name.
        kind: ``point`` | ``levels`` | ``distribution`` (as :class:`dprm.models.base.Calibrator`).
        p: [Q] value for the point rule (point: p_hat; levels: Q(beta)); None for distributions.
        q_mid: [Q, M] quantiles at the M mid-point levels (distribution only).
        levels: [L] quantile levels available for the tau and beta sweeps (distribution: the
            M mid-points; levels: the trained levels; point: none).
        q_levels: [Q, L] quantiles at ``levels``.
        beta: the level behind ``p`` for ``levels`` calibrators.
    """

    method: str
    kind: str
    p: np.ndarray | None = None
    q_mid: np.ndarray | None = None
    levels: np.ndarray | None = None
    q_levels: np.ndarray | None = None
    beta: float | None = None

    def budgets(self, C, n_max: int = N_MAX) -> np.ndarray:
        """Budgets [len(C), Q] (or [Q] for scalar C) by the rule of this kind."""
        C = np.asarray(C, dtype=np.float64)
        if self.kind == "distribution":
            return budget_from_curve(
                success_curve_mixture(self.q_mid, n_max)[None], C.reshape(-1, 1)
            ).reshape(C.shape + (-1,))
        return budget_from_curve(
            success_curve_point(self.p, n_max)[None], C.reshape(-1, 1)
        ).reshape(C.shape + (-1,))

    def quantiles_at(self, levels: Sequence[float]) -> np.ndarray | None:
        """Quantiles [Q, len(levels)] at ``levels`` if all are available (to 1e-6), else None."""
        if self.levels is None:
            return None
        diff = np.abs(np.asarray(levels, dtype=np.float64)[:, None] - self.levels[None, :])
        if (diff.min(axis=1) > 1e-6).any():
            return None
        return self.q_levels[:, diff.argmin(axis=1)]


def estimate_from_model(
    model, bon, name: str | None = None, *, beta: float = DEFAULT_BETA, m: int = M_LEVELS
) -> Estimate:
    """Map any calibrator kind to the per-question estimate the rules need.

    point -> p_hat; levels -> Q(beta) (the largest trained level <= beta if beta is not one of
    them, else the smallest level); distribution -> Q at the M mid-points, plus Q at
    ``BETA_GRID`` for the beta-threshold sweep.
    """
    score = bon.questions["prm_score"].to_numpy(np.float32)
    hidden = bon.hidden if model.uses_hidden else None
    name = name or model.method
    if model.kind == "point":
        return Estimate(name, "point", p=model.point_estimate(hidden, score).astype(np.float64))
    if model.kind == "levels":
        levels = np.asarray(model.fixed_levels, dtype=np.float64)
        q = model.quantiles(hidden, levels, score).astype(np.float64)
        # Trained levels are stored in float32 (0.1 -> 0.10000000149): compare to 1e-6.
        below = np.flatnonzero(levels <= beta + 1e-6)
        col = int(below[np.argmax(levels[below])]) if len(below) else int(np.argmin(levels))
        return Estimate(
            name, "levels", p=q[:, col], levels=levels, q_levels=q, beta=float(levels[col])
        )
    mid = midpoint_levels(m)
    levels = np.concatenate([mid, BETA_GRID])
    q = model.quantiles(hidden, levels, score).astype(np.float64)
    return Estimate(name, "distribution", q_mid=q[:, :m], levels=levels, q_levels=q)


# ----------------------------------------------------------------------------- sweeps
@dataclass
class _Row:
    method: str
    sweep: str
    C: float
    level: float
    budgets: np.ndarray  # [Q]
    thresholds: np.ndarray | None = None  # [Q], beta sweep only


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
) -> list[_Row]:
    """The budgets of the three sweeps (DESIGN.md section 4) for every estimate.

    * ``C``: every method, every C in ``c_grid``.
    * ``tau``: C = ``tau_c``, N_i = N(Q(tau | h_i), C) at every available level (distribution
      and levels kinds).
    * ``beta``: cap N_i at ``beta_c`` by the method's rule (mixture for distributions, Q(beta)
      point rule for levels kinds), stop at the first candidate scoring >= Q(beta | h_i).
    """
    rows: list[_Row] = []
    for est in estimates:
        budgets = est.budgets(np.asarray(c_grid), n_max)
        rows += [_Row(est.method, "C", float(c), np.nan, budgets[i]) for i, c in enumerate(c_grid)]
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
            cap = est.budgets(beta_c, n_max)
            rows += [
                _Row(est.method, "beta", beta_c, float(b), cap, q_beta[:, i])
                for i, b in enumerate(beta_grid)
            ]
    return rows


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
        mc_trials: Monte Carlo trials for ``accuracy_mc`` (0 skips it: NaN).
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
    rows = sweep_rows(estimates, n_max=n_max, **grids)
    table = exact_accuracy_table(pools, n_max)
    acc = np.empty(len(rows))
    cost = np.empty(len(rows))
    for i, row in enumerate(rows):
        if row.thresholds is None:
            acc[i] = lookup(table, row.budgets).mean()
            cost[i] = np.minimum(row.budgets, pools.size).mean() / n_max
        else:
            a, d = threshold_exact(pools, row.thresholds, row.budgets)
            acc[i], cost[i] = a.mean(), d.mean() / n_max
    mc_acc, mc_se, mc_cost = (np.full(len(rows), np.nan) for _ in range(3))
    if mc_trials > 0 and rows:
        plain = [i for i, r in enumerate(rows) if r.thresholds is None]
        stop = [i for i, r in enumerate(rows) if r.thresholds is not None]
        for idx, thr in ((plain, False), (stop, True)):
            if not idx:
                continue
            out = monte_carlo(
                pools,
                np.stack([rows[i].budgets for i in idx]),
                np.stack([rows[i].thresholds for i in idx]) if thr else None,
                trials=mc_trials,
                seed=seed,
            )
            mc_acc[idx], mc_se[idx], mc_cost[idx] = (
                out["accuracy"],
                out["accuracy_se"],
                out["cost"] / n_max,
            )
    summary = pd.DataFrame(
        {
            "method": [r.method for r in rows],
            "sweep": [r.sweep for r in rows],
            "C": [r.C for r in rows],
            "level": [r.level for r in rows],
            "cost": cost,
            "accuracy": acc,
            "accuracy_mc": mc_acc,
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
            "sweep": np.repeat([r.sweep for r in rows], q),
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
        n_values: budgets to evaluate (default 1..n_max).

    Returns:
        columns ``n, cost, accuracy``.
    """
    n_values = range(1, n_max + 1) if n_values is None else n_values
    table = exact_accuracy_table(pools, n_max)
    n = np.asarray(n_values, dtype=np.int64)
    return pd.DataFrame(
        {
            "n": n,
            "cost": [np.minimum(v, pools.size).mean() / n_max for v in n],
            "accuracy": table[:, n - 1].mean(axis=0),
        }
    )


def run_ias(
    bon,
    models: dict | None = None,
    *,
    beta: float = DEFAULT_BETA,
    n_max: int = N_MAX,
    mc_trials: int = MC_TRIALS,
    seed: int = 0,
    include_base: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Base (unless ``include_base`` is False) and every named calibrator on a BoN set.

    Args:
        bon: a :class:`dprm.data.contract.BonSet`.
        models: display name -> calibrator.

    Returns:
        (summary, budgets) as :func:`run_sweeps`.
    """
    from dprm.models.base_prm import BaseCalibrator

    named = dict(models or {})
    if include_base and "base" not in named:
        named = {"base": BaseCalibrator(bon.hidden_dim), **named}
    estimates = [estimate_from_model(m, bon, name, beta=beta) for name, m in named.items()]
    return run_sweeps(Pools.from_bon(bon), estimates, n_max=n_max, mc_trials=mc_trials, seed=seed)


def truth_estimate(bon, m: int = M_LEVELS, name: str = "truth") -> Estimate | None:
    """The oracle of a synthetic BoN set: Q_true(tau) = sigmoid(mu + sigma Phi^-1(tau)).

    Uses the ``true_mu`` / ``true_sigma`` question columns; None when the set has no truth.
    A reference for what a perfectly calibrated distribution would allocate.
    """
    from dprm.metrics import true_quantiles

    cols = bon.questions.columns
    if "true_mu" not in cols or "true_sigma" not in cols:
        return None
    mu = bon.questions["true_mu"].to_numpy(np.float64)
    sigma = bon.questions["true_sigma"].to_numpy(np.float64)
    levels = np.concatenate([midpoint_levels(m), BETA_GRID])
    q = true_quantiles(mu, sigma, levels)
    return Estimate(name, "distribution", q_mid=q[:, :m], levels=levels, q_levels=q)
