"""Candidate pools of a BoN set: scores and correctness per question, sorted and padded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dprm.io import DataError


def response_rows(bon) -> tuple[np.ndarray, np.ndarray]:
    """Each response's question row and each question's pool size, of a BoN set.

    Args:
        bon: a :class:`dprm.data.contract.BonSet`.

    Returns:
        (row [R]: index into ``bon.questions`` of each response, sizes [Q]: responses per
        question).

    Raises:
        DataError: a question has no candidate responses.
    """
    qid = bon.questions["question_id"].to_numpy()
    index = pd.Series(np.arange(len(qid)), index=qid)
    row = index.reindex(bon.responses["question_id"].to_numpy()).to_numpy()
    sizes = np.bincount(row, minlength=len(qid))
    if (sizes == 0).any():
        bad = qid[np.flatnonzero(sizes == 0)[0]]
        path = None if bon.path is None else bon.path / "responses.parquet"
        raise DataError(path, f"question {bad!r} has no candidate responses")
    return row, sizes


@dataclass
class Pools:
    """Candidate pools, one row per question, sorted by PRM score (descending), padded.

    Attributes:
        question_id: [Q] ids.
        scores: float64 [Q, K] candidate PRM scores, -inf padding.
        correct: float64 [Q, K] 0/1 correctness in the same order, 0 padding.
        correct_tied: float64 [Q, K] correctness averaged within groups of equal score.
        size: int64 [Q] pool size K_i.
        row: int64 [Q, K] row of each candidate in ``bon.responses`` (-1 padding), or None.
    """

    question_id: np.ndarray
    scores: np.ndarray
    correct: np.ndarray
    correct_tied: np.ndarray
    size: np.ndarray
    row: np.ndarray | None = None

    def gather(self, values: np.ndarray, fill: float = -np.inf) -> np.ndarray:
        """Per-response values [R] (``bon.responses`` order) as [Q, K] in pool (score) order."""
        if self.row is None:
            raise ValueError("these pools were not built from a BoN set (no response rows)")
        values = np.asarray(values, dtype=np.float64)
        return np.where(self.row >= 0, values[np.clip(self.row, 0, None)], fill)

    def __len__(self) -> int:
        return len(self.size)

    @classmethod
    def _sorted(
        cls, question_id: np.ndarray, scores: np.ndarray, correct: np.ndarray, size: np.ndarray
    ) -> Pools:
        """Pools from rows already sorted by score [Q, K], with tied correctness filled in."""
        return cls(question_id, scores, correct, _tie_average(scores, correct), size)

    @classmethod
    def from_arrays(cls, scores: Sequence, correct: Sequence, question_id=None) -> Pools:
        """Pools from per-question score and correctness sequences (ragged allowed).

        Args:
            scores: Q sequences of candidate PRM scores [K_i].
            correct: Q sequences of 0/1 correctness [K_i], aligned with ``scores``.
            question_id: [Q] ids (default ``"0", "1", ...``).

        Returns:
            the pools, rows in input order.
        """
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
        return cls._sorted(qid, s, c, sizes)

    @classmethod
    def from_bon(cls, bon) -> Pools:
        """Pools of a :class:`dprm.data.contract.BonSet`, rows in ``bon.questions`` order.

        Raises:
            DataError: a question has no candidate responses.
        """
        qid = bon.questions["question_id"].to_numpy()
        resp = bon.responses
        row, sizes = response_rows(bon)
        score = resp["prm_score"].to_numpy(np.float64)
        order = np.lexsort((-score, row))
        row, score = row[order], score[order]
        correct = resp["correct"].to_numpy().astype(np.float64)[order]
        pos = np.arange(len(row)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        s = np.full((len(qid), int(sizes.max())), -np.inf)
        c = np.zeros_like(s)
        s[row, pos], c[row, pos] = score, correct
        rows = np.full(s.shape, -1, dtype=np.int64)
        rows[row, pos] = order
        pools = cls._sorted(qid, s, c, sizes.astype(np.int64))
        pools.row = rows
        return pools


def _tie_average(scores: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Replace correctness by its mean within runs of equal score along each sorted row.

    Args:
        scores: [Q, K] scores, each row sorted (equal scores adjacent).
        correct: [Q, K] correctness in the same order.

    Returns:
        float64 [Q, K] (a copy when there are no ties).
    """
    q, k = scores.shape
    new = np.ones((q, k), dtype=bool)
    new[:, 1:] = scores[:, 1:] != scores[:, :-1]
    if new.all():
        return correct.copy()
    group = np.cumsum(new.ravel()) - 1
    total = np.bincount(group, weights=correct.ravel())
    count = np.bincount(group)
    return (total / count)[group].reshape(q, k)
