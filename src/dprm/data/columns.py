"""Numeric columns as the readers hand them on: plain numpy values, each present and in range.

Parquet files written by other tools carry pandas' nullable dtypes (``Int64``, ``boolean``,
``Float64``) with missing values, or unsigned 64-bit integers beyond what the contract stores
(int32). :func:`plain_column` turns such a column into a numpy one or names the first bad row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dprm.io import DataError

#: the range every integer column is written in (int32: CALIBRATION_COLUMNS' arrow types)
INT_RANGE = (int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max))


def plain_column(col: pd.Series, name: str, path: Path, kinds: str) -> pd.Series:
    """A numeric column as a plain numpy column: no missing value (a nullable dtype's NA), no
    integer outside the int32 range (unsigned 64-bit values included); else a DataError."""
    missing = col.isna().to_numpy()
    if missing.any() and kinds != "f":  # float NaN: reported as "not finite" by the caller
        row = int(np.flatnonzero(missing)[0])
        raise DataError(
            path, f"column '{name}' row {row}: expected a value, found a missing value (NA)"
        )
    if isinstance(col.dtype, pd.api.extensions.ExtensionDtype):
        numpy_dtype = getattr(col.dtype, "numpy_dtype", None)
        if numpy_dtype is None:
            raise DataError(path, f"column '{name}': unsupported dtype {col.dtype}")
        na = np.nan if kinds == "f" else None
        col = pd.Series(col.to_numpy(dtype=numpy_dtype, na_value=na), index=col.index, name=name)
    if kinds == "iu":
        values = col.to_numpy()
        out = (values < INT_RANGE[0]) | (values > INT_RANGE[1])
        if out.any():
            row = int(np.flatnonzero(out)[0])
            raise DataError(
                path,
                f"column '{name}' row {row}: expected an integer in [{INT_RANGE[0]}, "
                f"{INT_RANGE[1]}], found {values[row].item()}",
            )
        if col.dtype.kind == "u":  # in range: signed, so differences cannot wrap around
            col = col.astype(np.int64)
    return col


def check_correct_counts(df: pd.DataFrame, path: Path) -> None:
    """Labels: ``0 <= n_correct <= n_rollouts`` on every row, else a DataError naming it."""
    correct, total = df["n_correct"].to_numpy(), df["n_rollouts"].to_numpy()
    bad = (correct < 0) | (correct > total)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(
            path,
            f"column 'n_correct' row {row}: expected 0 <= n_correct <= n_rollouts "
            f"({total[row].item()}), found {correct[row].item()}",
        )
