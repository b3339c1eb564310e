"""The shift score of a calibration set against its training set (:mod:`dprm.ias.shift`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dprm.ias.allocation import SHIFT_AUC
from dprm.ias.shift import calibration_shift, question_states


class _Set:
    """The two attributes the shift score reads: records.question_id and hidden [N, D]."""

    def __init__(self, hidden: np.ndarray, per_question: int = 3):
        n = len(hidden)
        self.records = pd.DataFrame({"question_id": [f"q{i // per_question}" for i in range(n)]})
        self.hidden, self.hidden_dim = hidden, hidden.shape[1]


def test_question_states_are_the_mean_of_each_questions_records():
    hidden = np.arange(12, dtype=np.float64).reshape(6, 2)
    states = question_states(_Set(hidden))
    np.testing.assert_allclose(states, [[2.0, 3.0], [8.0, 9.0]])


def test_a_moved_set_is_flagged_and_a_fresh_draw_is_not():
    rng = np.random.default_rng(0)
    train = _Set(rng.normal(size=(600, 16)))
    same = calibration_shift(train, _Set(rng.normal(size=(600, 16))))
    moved = calibration_shift(train, _Set(rng.normal(size=(600, 16)) + 1.0))
    assert not same["shifted"] and same["shift_auc"] < SHIFT_AUC
    assert moved["shifted"] and moved["shift_auc"] > 0.95
