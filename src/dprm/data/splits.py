"""Question-grouped train / validation split (paper appendix: GroupShuffleSplit, seed 42)."""

from __future__ import annotations

import math

import numpy as np

from dprm.io import DataError


def split_by_question(
    question_ids, val_fraction: float = 0.2, seed: int = 42
) -> tuple[np.ndarray, np.ndarray]:
    """Split records so that no question appears in both parts.

    Same semantics as scikit-learn's ``GroupShuffleSplit(n_splits=1, test_size=val_fraction,
    random_state=seed)``: the fraction counts *questions* (ceil(fraction x questions) go to
    validation), the groups are the sorted unique ids, and they are shuffled by
    ``np.random.RandomState(seed).permutation``, so the split is the one sklearn would give.

    Args:
        question_ids: [N] question id per record.
        val_fraction: share of questions held out, in (0, 1).
        seed: split seed; fixed by the paper at 42, independent of the training seed.

    Returns:
        (train_rows, val_rows): sorted int64 record indices.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
    ids = np.asarray(question_ids)
    groups, group_of_row = np.unique(ids, return_inverse=True)
    n_groups = len(groups)
    if n_groups < 2:
        raise DataError(
            None,
            f"a question-grouped split needs at least 2 distinct question_id values, found {n_groups}",
        )
    n_val = min(max(math.ceil(val_fraction * n_groups), 1), n_groups - 1)
    permutation = np.random.RandomState(seed).permutation(n_groups)
    is_val_group = np.zeros(n_groups, dtype=bool)
    is_val_group[permutation[:n_val]] = True
    is_val_row = is_val_group[group_of_row]
    return np.flatnonzero(~is_val_row), np.flatnonzero(is_val_row)
