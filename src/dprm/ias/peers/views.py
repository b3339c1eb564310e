"""What the adaptive best-of-N peers read of the draws: :class:`DrawView` (the pools gathered
along draw orders), :class:`TrainingScores` (the training pools' scores the fitted rules are set
from), the running vote counts of the two leading answers and the first stop of a threshold rule.
Its own module so that the peers' registry (:mod:`dprm.ias.peers.methods`) and the fitted
stopping rules (:mod:`dprm.ias.peers.reward_stopping`) both build on it, one way."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from dprm.ias.constants import N_MAX


def running_top2(answer_in_order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vote counts (a, b) of the two leading answers after each n = 1..K draws.

    Args:
        answer_in_order: int [..., K] answer codes in draw order (codes in 0..K-1; -1 padding,
            which adds no vote).

    Returns:
        (a, b) int64 [..., K].
    """
    shape = answer_in_order.shape
    flat = answer_in_order.reshape(-1, shape[-1])
    rows, k = flat.shape
    counts = np.zeros((rows, k + 1), dtype=np.int64)  # column k: the padding's bin
    a = np.zeros((rows, k), dtype=np.int64)
    b = np.zeros((rows, k), dtype=np.int64)
    idx = np.arange(rows)
    for n in range(k):
        code = flat[:, n]
        counts[idx, np.where(code >= 0, code, k)] += 1
        top2 = np.partition(counts[:, :k], k - 2, axis=1)[:, -2:] if k > 1 else counts[:, :k]
        a[:, n] = top2[:, -1]
        b[:, n] = top2[:, 0] if k > 1 else 0
    return a.reshape(shape), b.reshape(shape)


@dataclass
class DrawView:
    """What the peers may read of the draws, in draw order (one row per order and question).

    Attributes:
        answer: int64 [T, Q, K] answer codes (-1 padding).
        score: [T, Q, K] raw PRM scores (last step; -inf padding).
        calibrated: [T, Q, K] a calibrator's estimates on the candidates' own states, or None.
        cap: int64 [Q] the most draws per question (min(K_i, n_max)).
        n_max: the largest budget.
        train: the training pools' scores the fitted rules are set from (``beacon``,
            ``pandora``), or None.
    """

    answer: np.ndarray
    score: np.ndarray
    calibrated: np.ndarray | None
    cap: np.ndarray
    n_max: int = N_MAX
    train: TrainingScores | None = None

    @classmethod
    def from_pools(
        cls,
        answer: np.ndarray,
        score: np.ndarray,
        size: np.ndarray,
        orders: np.ndarray,
        calibrated: np.ndarray | None = None,
        n_max: int = N_MAX,
        train: TrainingScores | None = None,
    ) -> DrawView:
        """Gather candidate-order arrays [Q, K] along draw orders [T, Q, K]."""
        q_idx = np.arange(answer.shape[0])[None, :, None]
        return cls(
            answer[q_idx, orders],
            score[q_idx, orders],
            None if calibrated is None else calibrated[q_idx, orders],
            np.minimum(np.asarray(size, dtype=np.int64), n_max),
            n_max,
            train,
        )

    @functools.cached_property
    def top2(self) -> tuple[np.ndarray, np.ndarray]:
        return running_top2(self.answer)


def first_stop(signal: np.ndarray, level: float, cap: np.ndarray) -> np.ndarray:
    """The first n (1-based) with ``signal[..., n - 1] >= level`` within the cap, else the cap.

    Args:
        signal: [T, Q, K] the rule's statistic after each n draws (-inf: not a stop point).
        level: the threshold.
        cap: [Q].

    Returns:
        int64 [T, Q].
    """
    k = signal.shape[-1]
    inside = np.arange(k)[None, None, :] < cap[None, :, None]
    hit = (signal >= level) & inside
    first = np.where(hit.any(axis=2), hit.argmax(axis=2) + 1, k + 1)
    return np.minimum(first, cap[None, :]).astype(np.int64)


@dataclass
class TrainingScores:
    """The training pools' candidate scores the score thresholds and the fitted stopping rules
    are set from: ``raw`` [R], ``calibrated`` [R] or None and ``question`` [R] (each
    candidate's question index) or None (valid candidates only)."""

    raw: np.ndarray
    calibrated: np.ndarray | None = None
    question: np.ndarray | None = None
