"""Question-grouped split: no leakage, the fraction counts questions, sklearn-identical."""

from __future__ import annotations

import numpy as np
import pytest

from dprm.data.splits import split_by_question
from dprm.io import DataError


def question_ids(n_questions: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 30, n_questions)  # very unequal questions
    ids = np.repeat([f"q{i:03d}" for i in range(n_questions)], sizes)
    return ids[rng.permutation(len(ids))]


def test_no_question_in_both_parts_and_rows_partitioned():
    ids = question_ids(57)
    train, val = split_by_question(ids)
    assert not set(ids[train]) & set(ids[val])
    assert np.array_equal(np.sort(np.concatenate([train, val])), np.arange(len(ids)))
    assert (np.diff(train) > 0).all() and (np.diff(val) > 0).all()


@pytest.mark.parametrize("n_questions", [2, 5, 10, 57, 500])
def test_fraction_counts_questions(n_questions):
    ids = question_ids(n_questions)
    _, val = split_by_question(ids, 0.2)
    assert len(set(ids[val])) == min(max(int(np.ceil(0.2 * n_questions)), 1), n_questions - 1)


def test_matches_sklearn_group_shuffle_split():
    from sklearn.model_selection import GroupShuffleSplit

    ids = question_ids(123, seed=4)
    expected_train, expected_val = next(
        GroupShuffleSplit(n_splits=1, test_size=0.2, random_state=42).split(ids, groups=ids)
    )
    train, val = split_by_question(ids, 0.2, 42)
    assert np.array_equal(train, np.sort(expected_train))
    assert np.array_equal(val, np.sort(expected_val))


def test_seed_changes_split_and_same_seed_repeats():
    ids = question_ids(80)
    a = split_by_question(ids, seed=42)[1]
    assert np.array_equal(a, split_by_question(ids, seed=42)[1])
    assert not np.array_equal(a, split_by_question(ids, seed=7)[1])


def test_bad_input():
    with pytest.raises(DataError, match="at least 2 distinct question_id"):
        split_by_question(np.array(["a", "a", "a"]))
    with pytest.raises(ValueError, match="val_fraction"):
        split_by_question(np.array(["a", "b"]), val_fraction=1.0)
