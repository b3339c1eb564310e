"""The column checks the contract readers share (:mod:`dprm.data.columns`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprm.data.columns import check_correct_counts, plain_column, refuse_first
from dprm.io import DataError

PATH = Path("cal/records.parquet")


def test_refuse_first_names_file_column_and_the_first_bad_row_only() -> None:
    asked: list[int] = []

    def message(row: int) -> str:
        asked.append(row)
        return f"expected >= 0, found {[-1, -2][row == 4]}"

    bad = np.array([False, False, True, False, True])
    with pytest.raises(DataError) as err:
        refuse_first(PATH, bad, message, column="step")
    assert str(err.value) == "cal/records.parquet: column 'step' row 2: expected >= 0, found -1"
    assert asked == [2]  # the message is built once, for the first bad row


def test_refuse_first_without_a_column_and_on_a_series() -> None:
    bad = pd.Series([False, True], index=[10, 11])  # positional rows, not the index labels
    with pytest.raises(DataError, match=r"^cal/records\.parquet: row 1: off$"):
        refuse_first(PATH, bad, lambda row: "off")


def test_refuse_first_returns_when_no_row_is_bad() -> None:
    def never(row: int) -> str:
        raise AssertionError("no bad row: no message")

    refuse_first(PATH, np.zeros(3, dtype=bool), never, column="step")
    refuse_first(PATH, np.zeros(0, dtype=bool), never)


def test_plain_column_names_missing_and_out_of_range_rows() -> None:
    missing = pd.Series([1, None, 3], dtype="Int64")
    with pytest.raises(DataError, match=r"column 'step' row 1: expected a value, found a missing"):
        plain_column(missing, "step", PATH, "iu")
    huge = pd.Series(np.array([1, 2**40], dtype=np.uint64))
    with pytest.raises(DataError, match=rf"column 'step' row 1: .* found {2**40}$"):
        plain_column(huge, "step", PATH, "iu")
    assert plain_column(pd.Series([1, 2], dtype="Int64"), "step", PATH, "iu").dtype == np.int64


def test_check_correct_counts_names_the_row() -> None:
    labels = pd.DataFrame({"n_correct": [1, 9, -1], "n_rollouts": [8, 8, 8]})
    with pytest.raises(DataError, match=r"column 'n_correct' row 1: .*\(8\), found 9$"):
        check_correct_counts(labels, PATH)
