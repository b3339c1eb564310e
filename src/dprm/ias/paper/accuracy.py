"""Accuracy of (early-stopped) best-of-n by PRM score: exact tables and a Monte Carlo check.

Candidates are drawn uniformly without replacement from a question's pool of K: on the pool
sorted by score (descending, rank j), P(rank j is picked | n) = C(K - j, n - 1) / C(K, n); tied
scores share their mean correctness (the pick among tied maxima is uniform).
:func:`exact_accuracy_table` evaluates this for every n = 1..N_max at once, so the accuracy of
any budget vector is a table lookup.

beta-threshold early stopping (paper Fig. 3), exact: with a = #candidates scoring >= the
threshold t, b = K - a and cap N, the first acceptable draw F satisfies
P(F > n) = C(b, n) / C(K, n). If F <= N the pick is that (uniformly random) acceptable
candidate; otherwise it is best-of-N within the b others. Hence
accuracy = (1 - P(F > N)) mean_A(correct) + P(F > N) bestofN_B(N) and
E[draws] = sum_{n=0}^{N-1} P(F > n).
"""

from __future__ import annotations

import functools

import numpy as np

from dprm.ias.constants import MC_TRIALS, N_MAX
from dprm.ias.paper.pools import Pools


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
        pools: Q candidate pools.
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


def threshold_mask_exact(
    pools: Pools, accept: np.ndarray, caps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Exact early stopping at the first *acceptable* candidate, any acceptable set.

    The paper's beta rule reads acceptability from each candidate's own calibrated estimate, so
    the acceptable set A is not the top of the score order. With a = |A|, b = K - a and cap N,
    P(F > n) = C(b, n) / C(K, n) as in :func:`threshold_exact`; if F <= N the pick is that
    (uniformly random) acceptable candidate, else the best-of-N by PRM score within the others.

    Args:
        pools: Q candidate pools (sorted by score).
        accept: bool [Q, K] in pool order (padding ignored).
        caps: [Q] budgets N_i.

    Returns:
        (expected accuracy [Q], expected number of draws [Q]).
    """
    q_count, k = pools.scores.shape
    size = pools.size
    valid = np.arange(k)[None, :] < size[:, None]
    accept = np.asarray(accept, dtype=bool) & valid
    cap = np.clip(np.asarray(caps, dtype=np.int64), 1, size)
    a = accept.sum(axis=1)
    b = size - a
    steps = np.arange(k)
    factor = np.clip(b[:, None] - steps, 0, None) / np.maximum(size[:, None] - steps, 1)
    survive = np.ones((q_count, k + 1))
    survive[:, 1:] = np.cumprod(factor, axis=1)
    draws = np.take_along_axis(np.cumsum(survive, axis=1), cap[:, None] - 1, axis=1)[:, 0]
    miss = np.take_along_axis(survive, cap[:, None], axis=1)[:, 0]
    mean_a = (pools.correct * accept).sum(axis=1) / np.maximum(a, 1)
    # the others, in score order (a stable sort puts the non-acceptable first, order kept)
    order = np.argsort(accept | ~valid, axis=1, kind="stable")
    s_b = np.take_along_axis(pools.scores, order, axis=1)
    c_b = np.take_along_axis(pools.correct, order, axis=1)
    s_b = np.where(steps[None, :] < b[:, None], s_b, -np.inf)
    c_b = np.where(steps[None, :] < b[:, None], c_b, 0.0)
    from dprm.ias.paper.pools import _tie_average

    acc_b = np.einsum(
        "qj,qj->q", pick_weights(k)[b, np.clip(cap, 1, k) - 1], _tie_average(s_b, c_b)
    )
    acc = np.where(a > 0, (1.0 - miss) * mean_a, 0.0) + miss * acc_b
    return acc, draws


def monte_carlo(
    pools: Pools,
    budgets: np.ndarray,
    thresholds: np.ndarray | None = None,
    *,
    accept: np.ndarray | None = None,
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
        pools: Q candidate pools.
        budgets: int [R, Q] budgets (caps) per row and question.
        thresholds: [R, Q] stopping thresholds, or None (no early stopping).
        accept: bool [R, Q, K] acceptable candidates in pool order (stop at the first drawn),
            instead of ``thresholds``.
        trials: number of random orders.
        seed: seed of the random orders.
        chunk: trials drawn per vectorised step (memory ~ chunk * R * Q * K).

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
        if accept is not None:  # [R, Q, K] acceptable candidates in pool order
            acc_in_order = np.broadcast_to(
                np.asarray(accept, dtype=bool)[None], (t,) + accept.shape
            )
            ok = np.take_along_axis(
                acc_in_order, np.broadcast_to(order[:, None], (t,) + accept.shape), axis=-1
            )
            first = np.where(ok.any(-1), np.argmax(ok, axis=-1) + 1, k)
            stopped = ok.any(-1) & (first <= n)  # the pick is the acceptable candidate itself
            n = np.minimum(n, first)
            c_t = np.broadcast_to(c[:, None], ok.shape)
            own = np.take_along_axis(c_t, (n - 1)[..., None], axis=-1)[..., 0]
            best = prefix[np.arange(t)[:, None, None], q_idx, n - 1]
            acc[start : start + t] = np.where(stopped, own, best).mean(axis=-1)
            draws[start : start + t] = n.mean(axis=-1)
            continue
        elif thresholds is not None:
            ok = s[:, None, :, :] >= np.asarray(thresholds, dtype=np.float64)[None, :, :, None]
            first = np.where(ok.any(-1), np.argmax(ok, axis=-1) + 1, k)  # [t, R, Q]
            n = np.minimum(n, first)
        picked = prefix[np.arange(t)[:, None, None], q_idx, n - 1]  # [t, R, Q]
        acc[start : start + t] = picked.mean(axis=-1)
        draws[start : start + t] = n.mean(axis=-1)
    se = acc.std(axis=0, ddof=1) / np.sqrt(trials) if trials > 1 else np.full(rows, np.nan)
    return {"accuracy": acc.mean(axis=0), "accuracy_se": se, "cost": draws.mean(axis=0)}
