"""Columns as the readers hand them on, and the one way a reader refuses a bad row.

Parquet files written by other tools carry pandas' nullable dtypes (``Int64``, ``boolean``,
``Float64``) with missing values, or unsigned 64-bit integers beyond what the contract stores
(int32). :func:`plain_column` turns such a column into a numpy one or names the first bad row.
Every row check of the contract readers ends in :func:`refuse_first`, so each message has the
same shape: ``<file>: column '<name>' row <r>: expected ..., found ...``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from dprm.io import DataError

#: the range every integer column is written in (int32: CALIBRATION_COLUMNS' arrow types)
INT_RANGE = (int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max))


def refuse_first(
    path: Path,
    bad: np.ndarray | pd.Series,
    message: Callable[[int], str],
    *,
    column: str | None = None,
) -> None:
    """Raise a DataError naming the first row where ``bad`` holds; return if none does.

    Args:
        path: the file the rows were read from (named first in the message).
        bad: [N] bool, one flag per row (a numpy array or a pandas Series, positional).
        message: ``message(row)`` says what was expected and found at that row; it is called
            once, for the first bad row only.
        column: the column the check reads; the message then reads ``column 'NAME' row R: ...``,
            else ``row R: ...``.

    Raises:
        DataError: one line, ``<path>: column 'NAME' row R: <message(R)>``.
    """
    flags = np.asarray(bad, dtype=bool)
    if not flags.any():
        return
    row = int(np.flatnonzero(flags)[0])
    where = f"row {row}" if column is None else f"column '{column}' row {row}"
    raise DataError(path, f"{where}: {message(row)}")


def plain_column(col: pd.Series, name: str, path: Path, kinds: str) -> pd.Series:
    """A numeric column as a plain numpy column: no missing value (a nullable dtype's NA), no
    integer outside the int32 range (unsigned 64-bit values included); else a DataError."""
    if kinds != "f":  # float NaN: reported as "not finite" by the caller
        refuse_first(
            path,
            col.isna().to_numpy(),
            lambda _: "expected a value, found a missing value (NA)",
            column=name,
        )
    if isinstance(col.dtype, pd.api.extensions.ExtensionDtype):
        numpy_dtype = getattr(col.dtype, "numpy_dtype", None)
        if numpy_dtype is None:
            raise DataError(path, f"column '{name}': unsupported dtype {col.dtype}")
        na = np.nan if kinds == "f" else None
        col = pd.Series(col.to_numpy(dtype=numpy_dtype, na_value=na), index=col.index, name=name)
    if kinds == "iu":
        values = col.to_numpy()
        refuse_first(
            path,
            (values < INT_RANGE[0]) | (values > INT_RANGE[1]),
            lambda row: (
                f"expected an integer in [{INT_RANGE[0]}, {INT_RANGE[1]}], "
                f"found {values[row].item()}"
            ),
            column=name,
        )
        if col.dtype.kind == "u":  # in range: signed, so differences cannot wrap around
            col = col.astype(np.int64)
    return col


def check_correct_counts(df: pd.DataFrame, path: Path) -> None:
    """Labels: ``0 <= n_correct <= n_rollouts`` on every row, else a DataError naming it."""
    correct, total = df["n_correct"].to_numpy(), df["n_rollouts"].to_numpy()
    refuse_first(
        path,
        (correct < 0) | (correct > total),
        lambda row: (
            f"expected 0 <= n_correct <= n_rollouts ({total[row].item()}), "
            f"found {correct[row].item()}"
        ),
        column="n_correct",
    )
