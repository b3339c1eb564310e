"""The labelled-prefix contract (docs/design.md §2): text prefixes with their rollout counts.

What rollouts (or Park et al.'s JSON, :mod:`dprm.data.park`) produce and ``embed`` consumes: a
``labels.parquet`` of :data:`LABEL_COLUMNS`, one row per reasoning prefix, before any PRM has
read it (so no hidden states yet).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dprm.data.columns import check_correct_counts
from dprm.data.validation import Schema, check_columns, check_counts, read_parquet, to_table
from dprm.io import atomic_path

LABEL_COLUMNS: Schema = {
    "question_id": ("OSU", pa.string()),
    "response_id": ("iu", pa.int32()),
    "step": ("iu", pa.int32()),
    "question": ("OSU", pa.string()),
    "reasoning_prefix": ("OSU", pa.string()),
    "n_correct": ("iu", pa.int32()),
    "n_rollouts": ("iu", pa.int32()),
    "success_prob": ("f", pa.float32()),
}


def read_labels(path: str | os.PathLike) -> pd.DataFrame:
    """Load labelled text prefixes (``labels.parquet`` or a directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "labels.parquet"
    df = read_parquet(path)
    check_columns(df, path, LABEL_COLUMNS)
    check_counts(df, path)
    check_correct_counts(df, path)
    return df


def write_labels(path: str | os.PathLike, labels: pd.DataFrame) -> Path:
    """Write labelled text prefixes to a parquet file atomically (validated first)."""
    path = Path(path)
    check_columns(labels, path, LABEL_COLUMNS)
    check_counts(labels, path)
    with atomic_path(path) as tmp:
        pq.write_table(to_table(labels, LABEL_COLUMNS), tmp)
    return path
