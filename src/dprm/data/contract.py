"""Read, write and validate calibration sets, best-of-N sets and labelled prefixes.

The formats are a contract (docs/design.md §2). Readers memory-map ``hidden_states.npy`` so
a 100k x 3584 set is never copied into RAM; writers fill a memory-mapped file chunk by chunk and
swap the finished directory in atomically. Every validation failure raises
:class:`dprm.io.DataError` naming the file, the column or row, and what was expected.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dprm.data.columns import check_correct_counts, plain_column, refuse_first
from dprm.filesystem import reserved_memmap
from dprm.io import DataError, atomic_dir, atomic_path, read_json, write_json

# column -> (pandas kind letters accepted, arrow type written)
CALIBRATION_COLUMNS: dict[str, tuple[str, pa.DataType]] = {
    "question_id": ("OSU", pa.string()),
    "response_id": ("iu", pa.int32()),
    "step": ("iu", pa.int32()),
    "prm_score": ("f", pa.float32()),
    "success_prob": ("f", pa.float32()),
    "n_rollouts": ("iu", pa.int32()),
}
CALIBRATION_OPTIONAL: dict[str, tuple[str, pa.DataType]] = {
    "question": ("OSU", pa.string()),
    "reasoning_prefix": ("OSU", pa.string()),
}
BON_QUESTION_COLUMNS: dict[str, tuple[str, pa.DataType]] = {
    "question_id": ("OSU", pa.string()),
    "prm_score": ("f", pa.float32()),
}
BON_RESPONSE_COLUMNS: dict[str, tuple[str, pa.DataType]] = {
    "question_id": ("OSU", pa.string()),
    "response_id": ("iu", pa.int32()),
    "prm_score": ("f", pa.float32()),
    "correct": ("b", pa.bool_()),
}
#: BoN contract v2 (docs/design.md §2): per response its canonical final answer and, where the
#: PRM gives them, its per-step scores; a v2 set also carries RESPONSE_HIDDEN_FILE.
BON_RESPONSE_V2: dict[str, tuple[str, pa.DataType]] = {
    "answer": ("OSU", pa.string()),
}
BON_STEP_SCORES = "step_scores"  # optional list<float32> column of v2 sets
BON_VERSION = 2
RESPONSE_HIDDEN_FILE = "response_hidden_states.npy"
# Labelled text prefixes: what rollouts (or Park et al.'s JSON) produce and `embed` consumes.
LABEL_COLUMNS: dict[str, tuple[str, pa.DataType]] = {
    "question_id": ("OSU", pa.string()),
    "response_id": ("iu", pa.int32()),
    "step": ("iu", pa.int32()),
    "question": ("OSU", pa.string()),
    "reasoning_prefix": ("OSU", pa.string()),
    "n_correct": ("iu", pa.int32()),
    "n_rollouts": ("iu", pa.int32()),
    "success_prob": ("f", pa.float32()),
}
UNIT_INTERVAL = ("prm_score", "success_prob")
HIDDEN_FILE = "hidden_states.npy"
_KIND_NAMES = {"OSU": "string", "iu": "integer", "f": "float", "b": "bool"}


# ----------------------------------------------------------------------------- validation
def _check_columns(
    df: pd.DataFrame,
    path: Path,
    required: dict[str, tuple[str, pa.DataType]],
    optional: dict[str, tuple[str, pa.DataType]] | None = None,
) -> None:
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


def _check_counts(df: pd.DataFrame, path: Path) -> None:
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


def _check_not_empty(df: pd.DataFrame, path: Path, what: str) -> None:
    if len(df) == 0:
        raise DataError(path, f"has no rows; expected at least one {what}")


def _check_unique(
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


def _check_meta(meta: Any, path: Path, kind: str) -> dict:
    if not isinstance(meta, dict):
        raise DataError(path, "expected a JSON object")
    if meta.get("kind") != kind:
        raise DataError(path, f"key 'kind': expected {kind!r}, found {meta.get('kind')!r}")
    dim = meta.get("hidden_dim")
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
        raise DataError(path, f"key 'hidden_dim': expected a positive integer, found {dim!r}")
    return meta


def _open_hidden(path: Path, n_rows: int, dim: int, rows_from: Path) -> np.ndarray:
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


def _read_parquet(path: Path) -> pd.DataFrame:
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


def _to_table(df: pd.DataFrame, schema: dict[str, tuple[str, pa.DataType]]) -> pa.Table:
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


# ----------------------------------------------------------------------------- data classes
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


# ----------------------------------------------------------------------------- readers
def read_calibration_set(path: str | os.PathLike, *, check_hidden: bool = True) -> CalibrationSet:
    """Load and validate a calibration set directory (hidden states memory-mapped)."""
    path = Path(path)
    if not path.is_dir():
        raise DataError(
            path,
            "not a directory (expected a calibration set: records.parquet, hidden_states.npy, meta.json)",
        )
    meta = _check_meta(read_json(path / "meta.json"), path / "meta.json", "calibration")
    records_path = path / "records.parquet"
    records = _read_parquet(records_path)
    _check_columns(records, records_path, CALIBRATION_COLUMNS, CALIBRATION_OPTIONAL)
    _check_counts(records, records_path)
    _check_not_empty(records, records_path, "labelled prefix (an empty calibration set)")
    _check_unique(
        records,
        records_path,
        ["question_id", "response_id", "step"],
        ["success_prob", "n_rollouts", "prm_score"],
    )
    hidden = _open_hidden(path / HIDDEN_FILE, len(records), meta["hidden_dim"], records_path)
    if check_hidden:
        check_hidden_finite(hidden, path / HIDDEN_FILE)
    return CalibrationSet(records, hidden, meta, path)


def read_bon_set(path: str | os.PathLike, *, check_hidden: bool = True) -> BonSet:
    """Load and validate a best-of-N set directory."""
    path = Path(path)
    if not path.is_dir():
        raise DataError(
            path,
            "not a directory (expected a BoN set: questions.parquet, responses.parquet, hidden_states.npy, meta.json)",
        )
    meta = _check_meta(read_json(path / "meta.json"), path / "meta.json", "bon")
    qpath, rpath = path / "questions.parquet", path / "responses.parquet"
    questions = _read_parquet(qpath)
    _check_columns(questions, qpath, BON_QUESTION_COLUMNS)
    _check_not_empty(questions, qpath, "question (an empty BoN set)")
    refuse_first(
        qpath,
        questions["question_id"].duplicated(),
        lambda row: f"duplicate id {questions['question_id'].iloc[row]!r}",
        column="question_id",
    )
    responses = _read_parquet(rpath)
    version = meta.get("bon_version", 1)
    if version not in (1, BON_VERSION):
        raise DataError(
            path / "meta.json", f"key 'bon_version': expected 1 or 2, found {version!r}"
        )
    if version == BON_VERSION and "answer" not in responses.columns:
        raise DataError(rpath, "missing column 'answer' (meta.json says bon_version 2)")
    _check_columns(responses, rpath, BON_RESPONSE_COLUMNS, BON_RESPONSE_V2)
    _check_step_scores(responses, rpath)
    _check_not_empty(responses, rpath, "response (an empty BoN set)")
    _check_unique(responses, rpath, ["question_id", "response_id"], ["correct", "prm_score"])
    refuse_first(
        rpath,
        ~responses["question_id"].isin(set(questions["question_id"])),
        lambda row: f"{responses['question_id'].iloc[row]!r} is not in questions.parquet",
        column="question_id",
    )
    hidden = _open_hidden(path / HIDDEN_FILE, len(questions), meta["hidden_dim"], qpath)
    if check_hidden:
        check_hidden_finite(hidden, path / HIDDEN_FILE)
    response_hidden = None
    if (path / RESPONSE_HIDDEN_FILE).exists():
        response_hidden = _open_hidden(
            path / RESPONSE_HIDDEN_FILE, len(responses), meta["hidden_dim"], rpath
        )
        if check_hidden:
            check_hidden_finite(response_hidden, path / RESPONSE_HIDDEN_FILE)
    return BonSet(questions, hidden, responses, meta, path, response_hidden)


def _check_step_scores(responses: pd.DataFrame, path: Path) -> None:
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


# Columns `predict` reads from an unlabelled calibration-set-like directory.
FEATURE_COLUMNS: dict[str, tuple[str, pa.DataType]] = {
    key: CALIBRATION_COLUMNS[key] for key in ("question_id", "response_id", "step", "prm_score")
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
    tables = {
        "calibration": ("records.parquet", FEATURE_COLUMNS),
        "bon": (
            "questions.parquet",
            BON_QUESTION_COLUMNS,
        ),
    }
    if kind not in tables:
        raise DataError(meta_path, f"key 'kind': expected 'calibration' or 'bon', found {kind!r}")
    meta = _check_meta(raw, meta_path, kind)
    name, columns = tables[kind]
    rows_path = path / name
    rows = _read_parquet(rows_path)
    _check_columns(rows, rows_path, columns, CALIBRATION_OPTIONAL)
    hidden = _open_hidden(path / HIDDEN_FILE, len(rows), meta["hidden_dim"], rows_path)
    if check_hidden:
        check_hidden_finite(hidden, path / HIDDEN_FILE)
    return FeatureSet(rows, hidden, kind, path)


def read_labels(path: str | os.PathLike) -> pd.DataFrame:
    """Load labelled text prefixes (``labels.parquet`` or a directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "labels.parquet"
    df = _read_parquet(path)
    _check_columns(df, path, LABEL_COLUMNS)
    _check_counts(df, path)
    check_correct_counts(df, path)
    return df


# ----------------------------------------------------------------------------- writers
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
            _check_columns(
                self.records,
                self.path / "records.parquet",
                CALIBRATION_COLUMNS,
                CALIBRATION_OPTIONAL,
            )
            _check_counts(self.records, self.path / "records.parquet")
            pq.write_table(
                _to_table(self.records, {**CALIBRATION_COLUMNS, **CALIBRATION_OPTIONAL}),
                tmp / "records.parquet",
            )
        else:
            if self.responses is None:
                raise ValueError("SetWriter: BoN responses were never set")
            _check_columns(self.records, self.path / "questions.parquet", BON_QUESTION_COLUMNS)
            rpath = self.path / "responses.parquet"
            _check_columns(self.responses, rpath, BON_RESPONSE_COLUMNS, BON_RESPONSE_V2)
            _check_step_scores(self.responses, rpath)
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
            pq.write_table(_to_table(self.records, BON_QUESTION_COLUMNS), tmp / "questions.parquet")
            schema = {**BON_RESPONSE_COLUMNS, **BON_RESPONSE_V2}
            pq.write_table(_to_table(self.responses, schema), tmp / "responses.parquet")
        if len(self.records) != self.n_rows:
            raise ValueError(
                f"SetWriter: {len(self.records)} records but {self.n_rows} hidden-state rows"
            )
        write_json(tmp / "meta.json", meta)


def _copy_hidden(writer: SetWriter, hidden: np.ndarray, chunk_rows: int = 8192) -> None:
    for start in range(0, hidden.shape[0], chunk_rows):
        writer.hidden[start : start + chunk_rows] = np.asarray(hidden[start : start + chunk_rows])


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
        _copy_hidden(writer, hidden)
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
        _copy_hidden(writer, hidden)
        if response_hidden is not None:
            out = writer.open_response_hidden(len(response_hidden))
            for start in range(0, len(response_hidden), 8192):
                out[start : start + 8192] = np.asarray(response_hidden[start : start + 8192])
        writer.records = questions
        writer.responses = responses
        writer.meta.update(meta or {})
    return Path(path)


def write_labels(path: str | os.PathLike, labels: pd.DataFrame) -> Path:
    """Write labelled text prefixes to a parquet file atomically (validated first)."""
    path = Path(path)
    _check_columns(labels, path, LABEL_COLUMNS)
    _check_counts(labels, path)
    with atomic_path(path) as tmp:
        pq.write_table(_to_table(labels, LABEL_COLUMNS), tmp)
    return path
