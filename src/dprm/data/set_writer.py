"""Write calibration and best-of-N sets atomically (docs/design.md §2).

:class:`SetWriter` fills a memory-mapped ``hidden_states.npy`` chunk by chunk, so memory stays
at one on-disk copy, validates the tables as the readers would, and swaps the finished directory
in under its final name only once everything is written. :func:`write_calibration_set` and
:func:`write_bon_set` write sets already held in memory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from dprm.data.bon_set import (
    BON_QUESTION_COLUMNS,
    BON_RESPONSE_COLUMNS,
    BON_RESPONSE_V2,
    BON_VERSION,
    RESPONSE_HIDDEN_FILE,
    check_step_scores,
)
from dprm.data.calibration_set import CALIBRATION_COLUMNS, CALIBRATION_OPTIONAL
from dprm.data.validation import HIDDEN_FILE, check_columns, check_counts, to_table
from dprm.filesystem import reserved_memmap
from dprm.io import atomic_dir, write_json


class SetWriter:
    """Write a calibration or BoN set atomically, filling hidden states chunk by chunk.

    Example::

        with SetWriter(out, "calibration", n_rows=N, hidden_dim=D) as w:
            for start, block in chunks:
                w.hidden[start : start + len(block)] = block
            w.records = df
            w.meta.update(prm="Qwen/Qwen2.5-Math-PRM-7B")

    Memory stays at one on-disk copy of the hidden states (a memory map), and the directory
    only appears under its final name once everything is written and validated.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        kind: str,
        n_rows: int,
        hidden_dim: int,
        dtype: str | np.dtype = "float16",
        overwrite: bool = True,
    ):
        if kind not in ("calibration", "bon"):
            raise ValueError(f"kind must be 'calibration' or 'bon', got {kind!r}")
        self.path, self.kind = Path(path), kind
        self.n_rows, self.hidden_dim = int(n_rows), int(hidden_dim)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float16, np.float32):
            raise ValueError(f"hidden dtype must be float16 or float32, got {self.dtype}")
        self.overwrite = overwrite
        self.records: pd.DataFrame | None = None  # calibration records or BoN questions
        self.responses: pd.DataFrame | None = None  # BoN only
        self.response_hidden: np.ndarray | None = None  # BoN v2: see open_response_hidden
        self.meta: dict[str, Any] = {}

    def open_response_hidden(self, n_responses: int) -> np.ndarray:
        """A memory-mapped [R, D] array for the complete responses' hidden states (BoN v2)."""
        if self.kind != "bon":
            raise ValueError("response hidden states belong to BoN sets only")
        self.response_hidden = reserved_memmap(  # a full disk: OSError now, not SIGBUS
            self._tmp / RESPONSE_HIDDEN_FILE, self.dtype, (int(n_responses), self.hidden_dim)
        )
        return self.response_hidden

    def __enter__(self) -> SetWriter:
        self._ctx = atomic_dir(self.path, overwrite=self.overwrite)
        self._tmp = self._ctx.__enter__()
        try:  # blocks reserved first: a full disk is an OSError now, never a SIGBUS
            self.hidden = reserved_memmap(
                self._tmp / HIDDEN_FILE, self.dtype, (self.n_rows, self.hidden_dim)
            )
        except BaseException:
            self._ctx.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                self._finish()
        except BaseException:
            self._ctx.__exit__(*sys.exc_info())
            raise
        return bool(self._ctx.__exit__(exc_type, exc, tb))

    def _finish(self) -> None:
        self.hidden.flush()
        del self.hidden
        tmp = self._tmp
        meta = {"kind": self.kind, "hidden_dim": self.hidden_dim, "hidden_dtype": self.dtype.name}
        meta.update(self.meta)
        meta["kind"], meta["hidden_dim"] = self.kind, self.hidden_dim
        if self.records is None:
            raise ValueError("SetWriter: records (or BoN questions) were never set")
        if self.kind == "calibration":
            check_columns(
                self.records,
                self.path / "records.parquet",
                CALIBRATION_COLUMNS,
                CALIBRATION_OPTIONAL,
            )
            check_counts(self.records, self.path / "records.parquet")
            pq.write_table(
                to_table(self.records, {**CALIBRATION_COLUMNS, **CALIBRATION_OPTIONAL}),
                tmp / "records.parquet",
            )
        else:
            if self.responses is None:
                raise ValueError("SetWriter: BoN responses were never set")
            check_columns(self.records, self.path / "questions.parquet", BON_QUESTION_COLUMNS)
            rpath = self.path / "responses.parquet"
            check_columns(self.responses, rpath, BON_RESPONSE_COLUMNS, BON_RESPONSE_V2)
            check_step_scores(self.responses, rpath)
            if self.response_hidden is not None:
                self.response_hidden.flush()
                if len(self.response_hidden) != len(self.responses):
                    raise ValueError(
                        f"SetWriter: {len(self.responses)} responses but "
                        f"{len(self.response_hidden)} response hidden-state rows"
                    )
                self.response_hidden = None
            if "answer" in self.responses.columns:
                meta["bon_version"] = BON_VERSION
            pq.write_table(to_table(self.records, BON_QUESTION_COLUMNS), tmp / "questions.parquet")
            schema = {**BON_RESPONSE_COLUMNS, **BON_RESPONSE_V2}
            pq.write_table(to_table(self.responses, schema), tmp / "responses.parquet")
        if len(self.records) != self.n_rows:
            raise ValueError(
                f"SetWriter: {len(self.records)} records but {self.n_rows} hidden-state rows"
            )
        write_json(tmp / "meta.json", meta)


def _copy_rows(target: np.ndarray, source: np.ndarray, chunk_rows: int = 8192) -> None:
    """Copy ``source`` [N, D] (possibly memory-mapped) into ``target`` a chunk of rows at a time."""
    for start in range(0, source.shape[0], chunk_rows):
        target[start : start + chunk_rows] = np.asarray(source[start : start + chunk_rows])


def write_calibration_set(
    path: str | os.PathLike,
    records: pd.DataFrame,
    hidden: np.ndarray,
    meta: dict | None = None,
    *,
    dtype: str = "float16",
) -> Path:
    """Write a calibration set directory atomically (hidden states float16 by default)."""
    with SetWriter(path, "calibration", len(records), hidden.shape[1], dtype) as writer:
        _copy_rows(writer.hidden, hidden)
        writer.records = records
        writer.meta.update(meta or {})
    return Path(path)


def write_bon_set(
    path: str | os.PathLike,
    questions: pd.DataFrame,
    hidden: np.ndarray,
    responses: pd.DataFrame,
    meta: dict | None = None,
    *,
    dtype: str = "float16",
    response_hidden: np.ndarray | None = None,
) -> Path:
    """Write a best-of-N set directory atomically.

    ``response_hidden`` [R, D] (contract v2) is row-aligned with ``responses``.
    """
    with SetWriter(path, "bon", len(questions), hidden.shape[1], dtype) as writer:
        _copy_rows(writer.hidden, hidden)
        if response_hidden is not None:
            _copy_rows(writer.open_response_hidden(len(response_hidden)), response_hidden)
        writer.records = questions
        writer.responses = responses
        writer.meta.update(meta or {})
    return Path(path)
