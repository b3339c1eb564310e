"""The best-of-N set contract (docs/design.md §2): questions, their candidate pools, states.

A BoN set is a directory: ``questions.parquet`` (one row per question,
:data:`BON_QUESTION_COLUMNS`), ``hidden_states.npy`` [Q, D] (the question-only state of each
question), ``responses.parquet`` (the candidate pool, :data:`BON_RESPONSE_COLUMNS`) and
``meta.json``. Contract v2 adds per response its canonical final answer, optionally its per-step
scores, and ``response_hidden_states.npy`` [R, D]. :mod:`dprm.data.set_writer` writes one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from dprm.data.columns import refuse_first
from dprm.data.validation import (
    HIDDEN_FILE,
    Schema,
    check_columns,
    check_meta,
    check_not_empty,
    check_unique,
    open_hidden,
    read_parquet,
)
from dprm.io import DataError, read_json

BON_QUESTION_COLUMNS: Schema = {
    "question_id": ("OSU", pa.string()),
    "prm_score": ("f", pa.float32()),
}
BON_RESPONSE_COLUMNS: Schema = {
    "question_id": ("OSU", pa.string()),
    "response_id": ("iu", pa.int32()),
    "prm_score": ("f", pa.float32()),
    "correct": ("b", pa.bool_()),
}
#: BoN contract v2 (docs/design.md §2): per response its canonical final answer and, where the
#: PRM gives them, its per-step scores; a v2 set also carries RESPONSE_HIDDEN_FILE.
BON_RESPONSE_V2: Schema = {
    "answer": ("OSU", pa.string()),
}
BON_STEP_SCORES = "step_scores"  # optional list<float32> column of v2 sets
BON_VERSION = 2
RESPONSE_HIDDEN_FILE = "response_hidden_states.npy"


@dataclass
class BonSet:
    """A best-of-N set: questions [Q] with hidden states [Q, D] and a candidate pool per question."""

    questions: pd.DataFrame
    hidden: np.ndarray
    responses: pd.DataFrame
    meta: dict = field(default_factory=dict)
    path: Path | None = None
    #: [R, D] PRM hidden state of each complete response, row-aligned with ``responses``
    #: (contract v2); None for v1 sets
    response_hidden: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.questions)

    @property
    def version(self) -> int:
        """Contract version: 2 when ``responses`` has final answers, else 1."""
        return BON_VERSION if "answer" in self.responses.columns else 1

    @property
    def has_answers(self) -> bool:
        """Whether every response carries its canonical final answer (contract v2)."""
        return "answer" in self.responses.columns

    @property
    def hidden_dim(self) -> int:
        return int(self.hidden.shape[1])


def read_bon_set(path: str | os.PathLike, *, check_hidden: bool = True) -> BonSet:
    """Load and validate a best-of-N set directory."""
    path = Path(path)
    if not path.is_dir():
        raise DataError(
            path,
            "not a directory (expected a BoN set: questions.parquet, responses.parquet, hidden_states.npy, meta.json)",
        )
    meta = check_meta(read_json(path / "meta.json"), path / "meta.json", "bon")
    qpath, rpath = path / "questions.parquet", path / "responses.parquet"
    questions = read_parquet(qpath)
    check_columns(questions, qpath, BON_QUESTION_COLUMNS)
    check_not_empty(questions, qpath, "question (an empty BoN set)")
    refuse_first(
        qpath,
        questions["question_id"].duplicated(),
        lambda row: f"duplicate id {questions['question_id'].iloc[row]!r}",
        column="question_id",
    )
    responses = read_parquet(rpath)
    version = meta.get("bon_version", 1)
    if version not in (1, BON_VERSION):
        raise DataError(
            path / "meta.json", f"key 'bon_version': expected 1 or 2, found {version!r}"
        )
    if version == BON_VERSION and "answer" not in responses.columns:
        raise DataError(rpath, "missing column 'answer' (meta.json says bon_version 2)")
    check_columns(responses, rpath, BON_RESPONSE_COLUMNS, BON_RESPONSE_V2)
    check_step_scores(responses, rpath)
    check_not_empty(responses, rpath, "response (an empty BoN set)")
    check_unique(responses, rpath, ["question_id", "response_id"], ["correct", "prm_score"])
    refuse_first(
        rpath,
        ~responses["question_id"].isin(set(questions["question_id"])),
        lambda row: f"{responses['question_id'].iloc[row]!r} is not in questions.parquet",
        column="question_id",
    )
    dim = meta["hidden_dim"]
    hidden = open_hidden(path / HIDDEN_FILE, len(questions), dim, qpath, check_finite=check_hidden)
    response_hidden = None
    if (path / RESPONSE_HIDDEN_FILE).exists():
        response_hidden = open_hidden(
            path / RESPONSE_HIDDEN_FILE, len(responses), dim, rpath, check_finite=check_hidden
        )
    return BonSet(questions, hidden, responses, meta, path, response_hidden)


def check_step_scores(responses: pd.DataFrame, path: Path) -> None:
    """The optional ``step_scores`` column: a list of finite scores in [0, 1] per response."""
    if BON_STEP_SCORES not in responses.columns:
        return
    values = responses[BON_STEP_SCORES].tolist()
    try:  # fast path: one concatenation; the per-row walk below only names the bad row
        flat = np.concatenate([np.asarray(v, dtype=np.float64) for v in values if v is not None])
        if flat.ndim == 1 and np.isfinite(flat).all() and (flat >= 0).all() and (flat <= 1).all():
            return
    except (TypeError, ValueError):
        pass

    def out_of_contract(value: Any) -> bool:
        try:
            arr = np.asarray(value if value is not None else [], dtype=np.float64)
        except (TypeError, ValueError):  # not numbers ("abc", [0.1, "x"]): named, no traceback
            return True
        return arr.ndim != 1 or not np.isfinite(arr).all() or (arr < 0).any() or (arr > 1).any()

    refuse_first(
        path,
        np.array([out_of_contract(value) for value in values], dtype=bool),
        lambda row: f"expected a list of scores in [0, 1], found {values[row]!r}",
        column=BON_STEP_SCORES,
    )
