"""The checks and file access every contract reader and writer shares (docs/design.md §2, §6).

Tables: column presence and kinds (:func:`check_columns`), rollout counts (:func:`check_counts`),
non-empty and unique-key tables; files: parquet reading and writing with the contract's arrow
types, ``meta.json``, and the memory-mapped hidden-state arrays. Every failure raises
:class:`dprm.io.DataError` naming the file, the column or row, and what was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dprm.data.columns import plain_column, refuse_first
from dprm.io import DataError

#: column -> (pandas kind letters accepted, arrow type written): the shape of every schema
Schema = dict[str, tuple[str, pa.DataType]]
#: columns whose values are probabilities
UNIT_INTERVAL = ("prm_score", "success_prob")
#: the hidden states of a calibration or BoN set, row-aligned with its rows
HIDDEN_FILE = "hidden_states.npy"
_KIND_NAMES = {"OSU": "string", "iu": "integer", "f": "float", "b": "bool"}


# ----------------------------------------------------------------------------- tables
def check_columns(
    df: pd.DataFrame, path: Path, required: Schema, optional: Schema | None = None
) -> None:
    """Every ``required`` column present and every present contract column of its kind.

    Numeric columns with pandas' nullable dtypes are replaced in ``df`` by plain numpy ones
    (:func:`dprm.data.columns.plain_column`); other columns are kept as they are.

    Raises:
        DataError: a missing column, a column of another kind, or its first bad row.
    """
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(
            path,
            f"missing column(s) {missing}; expected columns {list(required)} (have {list(df.columns)})",
        )
    for name, (kinds, _) in {**required, **(optional or {})}.items():
        if name in df.columns:
            col = df[name]
            checked = _check_column(col, name, path, kinds)
            if checked is not col:
                df[name] = checked


def _check_column(col: pd.Series, name: str, path: Path, kinds: str) -> pd.Series:
    """One present column against its kind letters: the column as the readers hand it on
    (:func:`plain_column`), or a DataError naming its first bad row."""
    if kinds == "OSU":
        if col.dtype.kind not in "OSU" and not isinstance(col.dtype, pd.StringDtype):
            raise DataError(path, f"column '{name}': expected strings, found dtype {col.dtype}")
        refuse_first(
            path,
            col.isna().to_numpy() | ~col.map(lambda v: isinstance(v, str)).to_numpy(),
            lambda row: f"expected a string, found {col.iloc[row]!r}",
            column=name,
        )
        return col
    if col.dtype.kind not in kinds:
        raise DataError(
            path,
            f"column '{name}': expected {_KIND_NAMES[kinds]} values, found dtype {col.dtype}",
        )
    col = plain_column(col, name, path, kinds)
    if kinds == "f":
        values = col.to_numpy(dtype=np.float64)
        refuse_first(
            path,
            ~np.isfinite(values),
            lambda row: f"expected a finite number, found {values[row]}",
            column=name,
        )
        if name in UNIT_INTERVAL:
            refuse_first(
                path,
                (values < 0) | (values > 1),
                lambda row: f"expected a value in [0, 1], found {values[row]}",
                column=name,
            )
    return col


def check_counts(df: pd.DataFrame, path: Path) -> None:
    """Labelled rows: ``n_rollouts >= 1``, ``step >= 0`` and ``success_prob`` a multiple of
    ``1 / n_rollouts`` on every row, else a DataError naming the first row that is not."""
    n = df["n_rollouts"].to_numpy()
    refuse_first(path, n < 1, lambda row: f"expected >= 1, found {n[row]}", column="n_rollouts")
    step = df["step"].to_numpy()
    refuse_first(path, step < 0, lambda row: f"expected >= 0, found {step[row]}", column="step")
    k = df["success_prob"].to_numpy(dtype=np.float64) * n
    refuse_first(
        path,
        np.abs(k - np.rint(k)) > 1e-3 * np.maximum(n, 1),
        lambda row: (
            f"success_prob={df['success_prob'].iloc[row]} is not n_correct/n_rollouts "
            f"for n_rollouts={n[row]} (expected a multiple of 1/{n[row]})"
        ),
    )


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value (messages say 3, not np.int64(3))."""
    return value.item() if isinstance(value, np.generic) else value


def check_not_empty(df: pd.DataFrame, path: Path, what: str) -> None:
    """At least one row, else a DataError saying it should hold at least one ``what``."""
    if len(df) == 0:
        raise DataError(path, f"has no rows; expected at least one {what}")


def check_unique(
    df: pd.DataFrame, path: Path, key: list[str], labels: list[str] | None = None
) -> None:
    """Refuse repeated ``key`` rows, naming the first two; rows that repeat a key with other
    ``labels`` are called conflicting (two answers for one prefix)."""
    repeated = df.duplicated(key, keep=False).to_numpy()
    if not repeated.any():
        return
    rows = np.flatnonzero(repeated)
    first = df.iloc[rows[0]]
    same = (df[key].iloc[rows] == first[key]).all(axis=1).to_numpy()
    pair = rows[same][:2]
    shown = ", ".join(f"{k}={_plain(first[k])!r}" for k in key)
    kind = "repeated"
    if labels and not (df[labels].iloc[pair[0]] == df[labels].iloc[pair[1]]).all():
        kind = "conflicting"
        a, b = (", ".join(f"{c}={_plain(df[c].iloc[r])!r}" for c in labels) for r in pair)
        shown += f" ({a} vs {b})"
    raise DataError(
        path,
        f"rows {int(pair[0])} and {int(pair[1])}: {kind} key ({shown}); expected one row per "
        f"({', '.join(key)}) ({int(repeated.sum())} rows share a key)",
    )


# ----------------------------------------------------------------------------- files
def check_meta(meta: Any, path: Path, kind: str) -> dict:
    """A set's ``meta.json``: an object with ``kind`` and a positive integer ``hidden_dim``."""
    if not isinstance(meta, dict):
        raise DataError(path, "expected a JSON object")
    if meta.get("kind") != kind:
        raise DataError(path, f"key 'kind': expected {kind!r}, found {meta.get('kind')!r}")
    dim = meta.get("hidden_dim")
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
        raise DataError(path, f"key 'hidden_dim': expected a positive integer, found {dim!r}")
    return meta


def open_hidden(
    path: Path, n_rows: int, dim: int, rows_from: Path, *, check_finite: bool
) -> np.ndarray:
    """Memory-map a hidden-state array [n_rows, dim] (float16 or float32) row-aligned with
    the table ``rows_from``; with ``check_finite`` every value is scanned for NaN/inf
    (:func:`check_hidden_finite`), else no value is read."""
    if not path.exists():
        raise DataError(path, "file not found (expected the hidden states as a .npy array)")
    try:
        hidden = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as err:
        raise DataError(path, f"not a readable .npy array ({err})") from err
    if hidden.dtype not in (np.float16, np.float32):
        raise DataError(path, f"expected dtype float16 or float32, found {hidden.dtype}")
    if hidden.ndim != 2:
        raise DataError(
            path, f"expected a 2-D array [rows, hidden_dim], found shape {hidden.shape}"
        )
    if hidden.shape[0] != n_rows:
        raise DataError(
            path,
            f"has {hidden.shape[0]} rows but {rows_from.name} has {n_rows}; they must be row-aligned",
        )
    if hidden.shape[1] != dim:
        raise DataError(path, f"has {hidden.shape[1]} columns but meta.json says hidden_dim={dim}")
    if check_finite:
        check_hidden_finite(hidden, path)
    return hidden


def check_hidden_finite(hidden: np.ndarray, path: Path, chunk_rows: int = 8192) -> None:
    """Scan a (memory-mapped) hidden-state array in chunks for NaN/inf."""
    for start in range(0, hidden.shape[0], chunk_rows):
        block = np.asarray(hidden[start : start + chunk_rows])
        bad = ~np.isfinite(block)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise DataError(
                path, f"row {start + r}, column {c}: expected a finite number, found {block[r, c]}"
            )


def read_parquet(path: Path) -> pd.DataFrame:
    """A parquet file as a DataFrame; a missing, unreadable or repeated-column file refused."""
    if not path.exists():
        raise DataError(path, "file not found")
    try:
        names = pq.read_schema(path).names
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise DataError(
                path,
                f"column {repeated[0]!r} appears {names.count(repeated[0])} times (columns "
                f"{names}); expected each column once",
            )
        return pq.read_table(path).to_pandas()
    except (pa.ArrowInvalid, OSError) as err:
        raise DataError(path, f"not a readable parquet file ({err})") from err


def to_table(df: pd.DataFrame, schema: Schema) -> pa.Table:
    """Cast the contract columns to their arrow types; keep any extra columns as they are."""
    arrays, names = [], []
    for name in df.columns:
        col = df[name]
        if name in schema:
            arrays.append(
                pa.array(
                    col.to_numpy() if schema[name][1] != pa.string() else col.astype(str).tolist(),
                    type=schema[name][1],
                )
            )
        else:
            arrays.append(pa.array(col))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)
