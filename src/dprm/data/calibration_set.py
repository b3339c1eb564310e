"""The calibration-set contract (docs/design.md §2): labelled prefixes with their hidden states.

A calibration set is a directory: ``records.parquet`` (one row per labelled prefix,
:data:`CALIBRATION_COLUMNS`), ``hidden_states.npy`` [N, D] row-aligned with it, and
``meta.json``. :func:`read_calibration_set` validates it and memory-maps the hidden states, so a
100k x 3584 set is never copied into RAM; :mod:`dprm.data.set_writer` writes one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from dprm.data.validation import (
    HIDDEN_FILE,
    Schema,
    check_columns,
    check_counts,
    check_meta,
    check_not_empty,
    check_unique,
    open_hidden,
    read_parquet,
)
from dprm.io import DataError, read_json

# column -> (pandas kind letters accepted, arrow type written)
CALIBRATION_COLUMNS: Schema = {
    "question_id": ("OSU", pa.string()),
    "response_id": ("iu", pa.int32()),
    "step": ("iu", pa.int32()),
    "prm_score": ("f", pa.float32()),
    "success_prob": ("f", pa.float32()),
    "n_rollouts": ("iu", pa.int32()),
}
CALIBRATION_OPTIONAL: Schema = {
    "question": ("OSU", pa.string()),
    "reasoning_prefix": ("OSU", pa.string()),
}


@dataclass
class CalibrationSet:
    """A calibration set: records [N] row-aligned with hidden states [N, D]."""

    records: pd.DataFrame
    hidden: np.ndarray
    meta: dict = field(default_factory=dict)
    path: Path | None = None

    def __len__(self) -> int:
        return len(self.records)

    @property
    def hidden_dim(self) -> int:
        return int(self.hidden.shape[1])

    @property
    def n_correct(self) -> np.ndarray:
        """Successful rollouts per record [N] (int64), recovered from success_prob x n_rollouts."""
        return np.rint(
            self.records["success_prob"].to_numpy(np.float64)
            * self.records["n_rollouts"].to_numpy()
        ).astype(np.int64)

    @property
    def has_truth(self) -> bool:
        return {"true_mu", "true_sigma"} <= set(self.records.columns)

    def subset(self, rows: np.ndarray) -> CalibrationSet:
        """Rows ``rows`` (sorted indices) as a new set; the hidden states stay memory-mapped."""
        rows = np.asarray(rows)
        return CalibrationSet(
            self.records.iloc[rows].reset_index(drop=True),
            _RowView(self.hidden, rows),
            self.meta,
            self.path,
        )


class _RowView:
    """A lazy row selection of a (memory-mapped) array: slicing reads only the rows asked for."""

    def __init__(self, base: np.ndarray, rows: np.ndarray):
        self.base, self.rows = base, rows
        self.shape = (len(rows), base.shape[1])
        self.dtype = base.dtype
        self.ndim = 2

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item):
        idx = self.rows[item]
        if isinstance(idx, np.ndarray):
            order = np.argsort(idx, kind="stable")
            out = np.empty((len(idx), self.shape[1]), dtype=self.dtype)
            out[order] = self.base[idx[order]]
            return out
        return self.base[idx]

    def __array__(self, dtype=None, copy=None):
        out = self[np.arange(len(self.rows))]
        return out if dtype is None else out.astype(dtype)


def read_calibration_set(path: str | os.PathLike, *, check_hidden: bool = True) -> CalibrationSet:
    """Load and validate a calibration set directory (hidden states memory-mapped)."""
    path = Path(path)
    if not path.is_dir():
        raise DataError(
            path,
            "not a directory (expected a calibration set: records.parquet, hidden_states.npy, meta.json)",
        )
    meta = check_meta(read_json(path / "meta.json"), path / "meta.json", "calibration")
    records_path = path / "records.parquet"
    records = read_parquet(records_path)
    check_columns(records, records_path, CALIBRATION_COLUMNS, CALIBRATION_OPTIONAL)
    check_counts(records, records_path)
    check_not_empty(records, records_path, "labelled prefix (an empty calibration set)")
    check_unique(
        records,
        records_path,
        ["question_id", "response_id", "step"],
        ["success_prob", "n_rollouts", "prm_score"],
    )
    hidden = open_hidden(
        path / HIDDEN_FILE,
        len(records),
        meta["hidden_dim"],
        records_path,
        check_finite=check_hidden,
    )
    return CalibrationSet(records, hidden, meta, path)
