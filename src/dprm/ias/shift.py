"""The covariate-shift score of a calibration set against the one a calibrator trained on.

The same label-free score ``auto`` uses to fall back to uniform best-of-N
(:func:`dprm.ias.allocation.shift_auc`, threshold :data:`~dprm.ias.allocation.SHIFT_AUC`),
on question states of calibration sets: the mean hidden state of each question's records.
``dprm evaluate`` and the report flag a split whose score is above the threshold: the
calibrator's inputs there look unlike its training data, so its training-time validation
says little about it.
"""

from __future__ import annotations

import numpy as np

from dprm.data.contract import CalibrationSet
from dprm.ias.allocation import SHIFT_AUC, shift_auc

#: at most this many questions per set enter the score (a seeded sample)
MAX_QUESTIONS = 1000


def question_states(
    data: CalibrationSet, max_questions: int = MAX_QUESTIONS, seed: int = 0
) -> np.ndarray:
    """[Q, D] mean hidden state of each question's records (at most ``max_questions``)."""
    ids = data.records["question_id"].to_numpy()
    questions = np.unique(ids)
    if len(questions) > max_questions:
        questions = np.sort(
            np.random.default_rng(seed).choice(questions, max_questions, replace=False)
        )
    states = np.empty((len(questions), data.hidden_dim), dtype=np.float64)
    for i, q in enumerate(questions):
        rows = np.flatnonzero(ids == q)
        states[i] = np.asarray(data.hidden[rows], dtype=np.float64).mean(axis=0)
    return states


def calibration_shift(train: CalibrationSet, test: CalibrationSet, seed: int = 0) -> dict:
    """``{"shift_auc", "shifted"}`` of ``test`` against ``train`` (question states).

    Fewer than 4 questions on either side: the score is undefined (NaN, not shifted).
    """
    a, b = question_states(train, seed=seed), question_states(test, seed=seed)
    if min(len(a), len(b)) < 4:
        return {"shift_auc": float("nan"), "shifted": False}
    auc = float(shift_auc(a, b, seed))
    return {"shift_auc": auc, "shifted": bool(auc > SHIFT_AUC)}


__all__ = ["MAX_QUESTIONS", "calibration_shift", "question_states"]
