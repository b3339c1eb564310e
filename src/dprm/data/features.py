"""What a calibrator reads at inference: the unlabelled rows of a calibration or BoN set.

``predict`` accepts either kind of set (docs/design.md §2) and never needs labels:
:func:`read_features` reads ``records.parquet`` of a calibration set (success_prob and
n_rollouts not required) or ``questions.parquet`` of a BoN set, and memory-maps the hidden
states row-aligned with them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dprm.data.bon_set import BON_QUESTION_COLUMNS
from dprm.data.calibration_set import CALIBRATION_COLUMNS, CALIBRATION_OPTIONAL
from dprm.data.validation import (
    HIDDEN_FILE,
    Schema,
    check_columns,
    check_meta,
    open_hidden,
    read_parquet,
)
from dprm.io import DataError, read_json

# Columns `predict` reads from an unlabelled calibration-set-like directory.
FEATURE_COLUMNS: Schema = {
    key: CALIBRATION_COLUMNS[key] for key in ("question_id", "response_id", "step", "prm_score")
}
#: meta.json's kind -> (the table read, its required columns)
_FEATURE_TABLES: dict[str, tuple[str, Schema]] = {
    "calibration": ("records.parquet", FEATURE_COLUMNS),
    "bon": ("questions.parquet", BON_QUESTION_COLUMNS),
}


@dataclass
class FeatureSet:
    """What a calibrator reads at inference: rows [N] row-aligned with hidden states [N, D].

    ``rows`` holds at least ``question_id`` and ``prm_score`` (plus ``response_id`` and ``step``
    for a calibration-set-like directory); labels are never needed.
    """

    rows: pd.DataFrame
    hidden: np.ndarray
    kind: str
    path: Path

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def hidden_dim(self) -> int:
        return int(self.hidden.shape[1])


def read_features(path: str | os.PathLike, *, check_hidden: bool = True) -> FeatureSet:
    """Load the inputs of inference from a calibration set (labels optional) or a BoN set.

    A directory whose meta.json says ``kind: calibration`` is read from records.parquet (columns
    question_id, response_id, step, prm_score; success_prob / n_rollouts are not required); one
    that says ``kind: bon`` is read from questions.parquet (question_id, prm_score: the
    question-only state of each question).

    Raises:
        DataError: naming the file, column or row, as the other readers.
    """
    path = Path(path)
    if not path.is_dir():
        raise DataError(
            path,
            "not a directory (expected a calibration set or a BoN set with meta.json, "
            "hidden_states.npy and records.parquet or questions.parquet)",
        )
    meta_path = path / "meta.json"
    raw = read_json(meta_path)
    kind = raw.get("kind") if isinstance(raw, dict) else None
    if kind not in _FEATURE_TABLES:
        raise DataError(meta_path, f"key 'kind': expected 'calibration' or 'bon', found {kind!r}")
    meta = check_meta(raw, meta_path, kind)
    name, columns = _FEATURE_TABLES[kind]
    rows_path = path / name
    rows = read_parquet(rows_path)
    check_columns(rows, rows_path, columns, CALIBRATION_OPTIONAL)
    hidden = open_hidden(
        path / HIDDEN_FILE, len(rows), meta["hidden_dim"], rows_path, check_finite=check_hidden
    )
    return FeatureSet(rows, hidden, kind, path)
