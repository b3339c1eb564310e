"""Draw orders and what a selection rule picks along them: how ``auto-seq`` and the peers are
scored (a seeded Monte Carlo over uniformly random draw orders per question, the same orders for
every method)."""

from __future__ import annotations

import numpy as np

from dprm.ias.selection.rules import Candidates, parse_rule, vote_in_order


def draw_orders(size: np.ndarray, trials: int, seed: int) -> np.ndarray:
    """Uniformly random draw orders int64 [T, Q, K] (positions >= K_i of a question are its
    padding, placed last); question i's orders from ``default_rng([seed, i, 41])``."""
    q_count, k = len(size), int(size.max())
    out = np.empty((trials, q_count, k), dtype=np.int64)
    for q in range(q_count):
        rng = np.random.default_rng([seed, q, 41])
        n = int(size[q])
        out[:, q, :n] = np.argsort(rng.random((trials, n)), axis=1)
        out[:, q, n:] = np.arange(n, k)
    return out


def order_outcomes(weight: np.ndarray, correct: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Correctness of the ``highest`` pick after each n = 1..K draws of each order.

    Args:
        weight: [Q, K] the rule's candidate weights (-inf padding).
        correct: [Q, K] 0/1.
        orders: [T, Q, K] draw orders (:func:`draw_orders`).

    Returns:
        float32 [T, Q, K]: the pick is the first-drawn candidate of the largest weight among the
        first n (beyond K_i: the whole pool's pick).
    """
    q_idx = np.arange(weight.shape[0])[None, :, None]
    w = weight[q_idx, orders]  # [T, Q, K] weights in draw order
    c = correct[q_idx, orders]
    best = np.maximum.accumulate(w, axis=2)
    # position of the running maximum: the last position where w reached the running max first
    is_new = np.concatenate([np.ones_like(w[..., :1], dtype=bool), w[..., 1:] > best[..., :-1]], 2)
    pos = np.where(is_new, np.arange(w.shape[2])[None, None, :], 0)
    pos = np.maximum.accumulate(pos, axis=2)
    return np.take_along_axis(c, pos, axis=2).astype(np.float32)


def vote_order_outcomes(
    answer: np.ndarray,
    weight: np.ndarray,
    group_correct: np.ndarray,
    size: np.ndarray,
    orders: np.ndarray,
    seed: int,
) -> np.ndarray:
    """Correctness of an answer-level vote (``weighted-*``, ``majority``) after each n = 1..K
    draws of each order, as :func:`order_outcomes` for the ``highest-*`` rules.

    Args:
        answer: int [Q, K] answer-group codes (-1 padding).
        weight: [Q, K] vote weights (1 for majority; padding ignored).
        group_correct: [Q, K] correctness of each answer group
            (:meth:`dprm.ias.selection.rules.Candidates.answer_correct`).
        size: [Q] pool sizes.
        orders: [T, Q, K] draw orders (:func:`draw_orders`).
        seed: seed of the uniform tie-break (question q: ``default_rng([seed, q, 43])``).

    Returns:
        float32 [T, Q, K] (beyond K_i: the whole pool's pick).
    """
    t_count, q_count, k_max = orders.shape
    out = np.zeros((t_count, q_count, k_max), dtype=np.float32)
    for q in range(q_count):
        k = int(size[q])
        rng = np.random.default_rng([seed, q, 43])
        won = vote_in_order(answer[q, :k], weight[q, :k], group_correct[q], orders[:, q, :k], rng)
        out[:, q, :k] = won
        out[:, q, k:] = won[:, k - 1 : k]
    return out


def outcome_accuracy(outcomes: np.ndarray, budgets: np.ndarray) -> tuple[float, float, np.ndarray]:
    """(mean accuracy, standard error over orders, per-order accuracy [T]) of budgets [T, Q] or
    [Q] on :func:`order_outcomes` [T, Q, K] (budgets above K_i read the whole pool)."""
    t_count, q_count, k = outcomes.shape
    b = np.broadcast_to(np.asarray(budgets, dtype=np.int64), (t_count, q_count))
    n = np.clip(b, 1, k) - 1
    per = outcomes[np.arange(t_count)[:, None], np.arange(q_count)[None, :], n].mean(axis=1)
    per = per.astype(np.float64)
    se = per.std(ddof=1) / np.sqrt(t_count) if t_count > 1 else float("nan")
    return float(per.mean()), float(se), per


def rule_outcomes(
    cands: Candidates, weight: np.ndarray, orders: np.ndarray, vote: bool, seed: int
) -> np.ndarray:
    """The rule's pick correctness after each n draws of each order [T, Q, K]: an answer-level
    vote (``vote``) or the ``highest`` pick by ``weight`` [Q, K]."""
    if vote:
        votes = np.where(np.isfinite(weight), weight, 0.0)
        group_correct = cands.answer_correct()
        return vote_order_outcomes(cands.answer, votes, group_correct, cands.size, orders, seed)
    return order_outcomes(weight, cands.correct, orders)


def table_weight(cands: Candidates, rule: str, calibrated: np.ndarray | None) -> np.ndarray:
    """The candidate weights [Q, K] a rule ranks (``highest-*``) or votes (``weighted-*``:
    the weight; ``majority``: 1) by, -inf padding."""
    weight_name = parse_rule(rule)[1]
    if weight_name == "calibrated":
        return np.where(cands.row >= 0, calibrated, -np.inf)
    if weight_name == "one":
        return np.where(cands.row >= 0, 1.0, -np.inf)
    return cands.weights[weight_name]
