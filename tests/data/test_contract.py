"""Tests for the on-disk data contract (:mod:`dprm.data.contract`, docs/design.md §2 and §6).

Sets written by dprm and sets written by hand in the contract format must both load; every bad
input of docs/design.md §6 must fail with a :class:`DataError` whose message names the file,
the column or row, and what was expected; and a failed write must never damage what is already
on disk nor leave temporary directories behind.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprm.data.contract import (
    SetWriter,
    read_bon_set,
    read_calibration_set,
    read_labels,
    write_bon_set,
    write_calibration_set,
    write_labels,
)
from dprm.io import DataError, atomic_dir, atomic_path

N, D = 6, 3


# ----------------------------------------------------------------------------- fixtures
def make_records(n: int = N) -> pd.DataFrame:
    """Calibration records with plain int64 / float64 / str columns, as pandas makes them."""
    k = np.arange(n) % 9
    return pd.DataFrame(
        {
            "question_id": [f"q{i // 3}" for i in range(n)],
            "response_id": np.arange(n) % 3,
            "step": np.arange(n) // 2,
            "prm_score": np.linspace(0.05, 0.95, n),
            "success_prob": k / 8.0,
            "n_rollouts": np.full(n, 8),
        }
    )


def make_hidden(n: int = N, d: int = D, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)


def make_bon(q: int = 3) -> tuple[pd.DataFrame, pd.DataFrame]:
    questions = pd.DataFrame(
        {"question_id": [f"q{i}" for i in range(q)], "prm_score": np.linspace(0.1, 0.9, q)}
    )
    responses = pd.DataFrame(
        {
            "question_id": [f"q{i}" for i in range(q) for _ in range(4)],
            "response_id": [j for _ in range(q) for j in range(4)],
            "prm_score": np.linspace(0.0, 1.0, 4 * q),
            "correct": [bool(j % 2) for _ in range(q) for j in range(4)],
        }
    )
    return questions, responses


def write_calibration_by_hand(
    path: Path,
    records: pd.DataFrame | None = None,
    hidden: np.ndarray | None = None,
    meta: dict | None = None,
) -> Path:
    """The contract format written without dprm: pandas to_parquet, np.save, a handmade JSON."""
    records = make_records() if records is None else records
    hidden = make_hidden(len(records)) if hidden is None else hidden
    meta = {"kind": "calibration", "hidden_dim": int(hidden.shape[-1])} if meta is None else meta
    path.mkdir(parents=True, exist_ok=True)
    records.to_parquet(path / "records.parquet", index=False)
    np.save(path / "hidden_states.npy", hidden)
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def write_bon_by_hand(
    path: Path,
    questions: pd.DataFrame | None = None,
    responses: pd.DataFrame | None = None,
    hidden: np.ndarray | None = None,
    meta: dict | None = None,
) -> Path:
    q_default, r_default = make_bon()
    questions = q_default if questions is None else questions
    responses = r_default if responses is None else responses
    hidden = make_hidden(len(questions)) if hidden is None else hidden
    meta = {"kind": "bon", "hidden_dim": int(hidden.shape[-1])} if meta is None else meta
    path.mkdir(parents=True, exist_ok=True)
    questions.to_parquet(path / "questions.parquet", index=False)
    responses.to_parquet(path / "responses.parquet", index=False)
    np.save(path / "hidden_states.npy", hidden)
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def leftovers(parent: Path, keep: set[str]) -> list[str]:
    """Entries in ``parent`` other than ``keep`` (temporary files and directories)."""
    return sorted(p.name for p in parent.iterdir() if p.name not in keep)


# ----------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_calibration_set_round_trip(tmp_path: Path, dtype: str) -> None:
    records, hidden = make_records(), make_hidden()
    records["question"] = [f"What is {i}?" for i in range(N)]
    records["true_p"] = np.linspace(0, 1, N)
    out = write_calibration_set(
        tmp_path / "cal", records, hidden, {"prm": "tiny", "seed": 1}, dtype=dtype
    )
    data = read_calibration_set(out)
    assert isinstance(data.hidden, np.memmap)
    assert data.hidden.dtype == np.dtype(dtype)
    expected_hidden = hidden.astype(dtype)
    np.testing.assert_array_equal(np.asarray(data.hidden), expected_hidden)
    if dtype == "float32":
        np.testing.assert_array_equal(np.asarray(data.hidden), hidden)
    assert len(data) == N and data.hidden_dim == D
    assert data.meta["kind"] == "calibration" and data.meta["hidden_dim"] == D
    assert data.meta["hidden_dtype"] == dtype
    assert data.meta["prm"] == "tiny" and data.meta["seed"] == 1
    # contract dtypes on disk, values unchanged
    assert data.records["response_id"].dtype == np.int32
    assert data.records["step"].dtype == np.int32
    assert data.records["n_rollouts"].dtype == np.int32
    assert data.records["prm_score"].dtype == np.float32
    assert data.records["success_prob"].dtype == np.float32
    assert list(data.records["question_id"]) == list(records["question_id"])
    assert list(data.records["question"]) == list(records["question"])
    for col in ("response_id", "step", "n_rollouts"):
        np.testing.assert_array_equal(data.records[col].to_numpy(), records[col].to_numpy())
    for col in ("prm_score", "success_prob", "true_p"):
        np.testing.assert_allclose(data.records[col].to_numpy(), records[col].to_numpy(), rtol=1e-6)
    np.testing.assert_array_equal(data.n_correct, np.arange(N) % 9)
    assert leftovers(tmp_path, {"cal"}) == []


def test_set_writer_chunked(tmp_path: Path) -> None:
    hidden = make_hidden(10, 4)
    records = make_records(10)
    with SetWriter(tmp_path / "cal", "calibration", n_rows=10, hidden_dim=4, dtype="float32") as w:
        for start in range(0, 10, 3):
            w.hidden[start : start + 3] = hidden[start : start + 3]
        w.records = records
        w.meta.update(
            layer=-1, kind="ignored", hidden_dim=999
        )  # kind/hidden_dim are not overridable
    data = read_calibration_set(tmp_path / "cal")
    np.testing.assert_array_equal(np.asarray(data.hidden), hidden)
    assert (
        data.meta["kind"] == "calibration"
        and data.meta["hidden_dim"] == 4
        and data.meta["layer"] == -1
    )


def test_subset_reads_only_selected_rows(tmp_path: Path) -> None:
    hidden = make_hidden()
    data = read_calibration_set(
        write_calibration_set(tmp_path / "cal", make_records(), hidden, dtype="float32")
    )
    sub = data.subset(np.array([1, 4, 5]))
    assert len(sub) == 3 and sub.hidden.shape == (3, D)
    np.testing.assert_array_equal(np.asarray(sub.hidden), hidden[[1, 4, 5]])
    np.testing.assert_array_equal(sub.hidden[np.array([2, 0])], hidden[[5, 1]])
    np.testing.assert_array_equal(sub.hidden[1], hidden[4])
    assert list(sub.records["step"]) == list(make_records()["step"].iloc[[1, 4, 5]])


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_bon_set_round_trip(tmp_path: Path, dtype: str) -> None:
    questions, responses = make_bon()
    hidden = make_hidden(len(questions))
    out = write_bon_set(
        tmp_path / "bon", questions, hidden, responses, {"prm": "tiny"}, dtype=dtype
    )
    data = read_bon_set(out)
    assert isinstance(data.hidden, np.memmap) and data.hidden.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(data.hidden), hidden.astype(dtype))
    assert len(data) == 3 and data.hidden_dim == D
    assert data.meta["kind"] == "bon" and data.meta["prm"] == "tiny"
    assert list(data.questions["question_id"]) == list(questions["question_id"])
    assert data.questions["prm_score"].dtype == np.float32
    assert data.responses["response_id"].dtype == np.int32
    assert data.responses["correct"].dtype == np.bool_
    assert list(data.responses["correct"]) == list(responses["correct"])
    np.testing.assert_allclose(data.responses["prm_score"], responses["prm_score"], rtol=1e-6)
    assert leftovers(tmp_path, {"bon"}) == []


def test_handwritten_calibration_set_loads(tmp_path: Path) -> None:
    records, hidden = make_records(), make_hidden()
    assert records["response_id"].dtype == np.int64 and records["prm_score"].dtype == np.float64
    write_calibration_by_hand(tmp_path / "cal", records, hidden)
    data = read_calibration_set(tmp_path / "cal")
    assert isinstance(data.hidden, np.memmap) and data.hidden.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(data.hidden), hidden)
    np.testing.assert_array_equal(
        data.records["prm_score"].to_numpy(), records["prm_score"].to_numpy()
    )
    np.testing.assert_array_equal(data.n_correct, np.arange(N) % 9)


def test_handwritten_bon_set_loads(tmp_path: Path) -> None:
    questions, responses = make_bon()
    write_bon_by_hand(tmp_path / "bon", questions, responses, make_hidden(3).astype(np.float16))
    data = read_bon_set(tmp_path / "bon")
    assert data.hidden.dtype == np.float16 and data.hidden.shape == (3, D)
    assert list(data.responses["question_id"]) == list(responses["question_id"])


def test_labels_round_trip(tmp_path: Path) -> None:
    labels = make_records().drop(columns=["prm_score"])
    labels["question"] = "What?"
    labels["reasoning_prefix"] = ""
    labels["n_correct"] = np.rint(labels["success_prob"] * 8).astype(int)
    write_labels(tmp_path / "labels.parquet", labels)
    back = read_labels(tmp_path)
    assert back["n_correct"].dtype == np.int32
    np.testing.assert_array_equal(back["n_correct"], labels["n_correct"])
    with pytest.raises(DataError, match=r"bad\.parquet: missing column\(s\) \['n_correct'\]"):
        write_labels(tmp_path / "bad.parquet", labels.drop(columns=["n_correct"]))
    assert not (tmp_path / "bad.parquet").exists()


# ----------------------------------------------------------------------------- bad calibration sets
Mutation = Callable[[Path], None]


def _records_with(**changes: object) -> Callable[[Path], None]:
    """Rewrite records.parquet after applying ``column=function(df)`` (None drops the column)."""

    def mutate(path: Path) -> None:
        df = make_records()
        for col, fn in changes.items():
            if fn is None:
                df = df.drop(columns=[col])
            else:
                df[col] = fn(df)  # type: ignore[operator]
        df.to_parquet(path / "records.parquet", index=False)

    return mutate


def _set_value(col: str, row: int, value: object) -> Callable[[pd.DataFrame], pd.Series]:
    def fn(df: pd.DataFrame) -> pd.Series:
        s = df[col].astype(object if isinstance(value, str | type(None)) else df[col].dtype).copy()
        s.iloc[row] = value
        return s

    return fn


def _hidden(array: np.ndarray) -> Mutation:
    def mutate(path: Path) -> None:
        np.save(path / "hidden_states.npy", array)

    return mutate


def _meta(meta: object) -> Mutation:
    def mutate(path: Path) -> None:
        (path / "meta.json").write_text(json.dumps(meta))

    return mutate


def _remove(name: str) -> Mutation:
    def mutate(path: Path) -> None:
        (path / name).unlink()

    return mutate


def _write_text(name: str, text: str) -> Mutation:
    def mutate(path: Path) -> None:
        (path / name).write_text(text)

    return mutate


def _hidden_with_nan() -> np.ndarray:
    h = make_hidden()
    h[2, 1] = np.nan
    return h


BAD_CALIBRATION: dict[str, tuple[Mutation, str]] = {
    "missing column": (
        _records_with(prm_score=None),
        r"records\.parquet: missing column\(s\) \['prm_score'\]; expected columns \[.*'prm_score'",
    ),
    "two missing columns": (
        _records_with(step=None, n_rollouts=None),
        r"records\.parquet: missing column\(s\) \['step', 'n_rollouts'\]",
    ),
    "prm_score as strings": (
        _records_with(prm_score=lambda df: df["prm_score"].map(str)),
        r"records\.parquet: column 'prm_score': expected float values, found dtype",
    ),
    "success_prob as integers": (
        _records_with(success_prob=lambda df: np.zeros(len(df), dtype=np.int64)),
        r"records\.parquet: column 'success_prob': expected float values, found dtype int64",
    ),
    "step as floats": (
        _records_with(step=lambda df: df["step"].astype(float)),
        r"records\.parquet: column 'step': expected integer values, found dtype float64",
    ),
    "question_id as integers": (
        _records_with(question_id=lambda df: np.arange(len(df))),
        r"records\.parquet: column 'question_id': expected strings, found dtype int64",
    ),
    "null question_id": (
        _records_with(question_id=_set_value("question_id", 4, None)),
        r"records\.parquet: column 'question_id' row 4: expected a string, found (None|nan)",
    ),
    "NaN prm_score": (
        _records_with(prm_score=_set_value("prm_score", 3, np.nan)),
        r"records\.parquet: column 'prm_score' row 3: expected a finite number, found nan",
    ),
    "inf prm_score": (
        _records_with(prm_score=_set_value("prm_score", 5, np.inf)),
        r"records\.parquet: column 'prm_score' row 5: expected a finite number, found inf",
    ),
    "-inf success_prob": (
        _records_with(success_prob=_set_value("success_prob", 0, -np.inf)),
        r"records\.parquet: column 'success_prob' row 0: expected a finite number, found -inf",
    ),
    "prm_score above 1": (
        _records_with(prm_score=_set_value("prm_score", 1, 1.5)),
        r"records\.parquet: column 'prm_score' row 1: expected a value in \[0, 1\], found 1\.5",
    ),
    "success_prob above 1": (
        _records_with(success_prob=_set_value("success_prob", 2, 1.125)),
        r"records\.parquet: column 'success_prob' row 2: expected a value in \[0, 1\], found 1\.125",
    ),
    "success_prob below 0": (
        _records_with(success_prob=_set_value("success_prob", 4, -0.125)),
        r"records\.parquet: column 'success_prob' row 4: expected a value in \[0, 1\], found -0\.125",
    ),
    "success_prob not k/n": (
        _records_with(success_prob=_set_value("success_prob", 1, 0.3)),
        r"records\.parquet: row 1: success_prob=0\.3 is not n_correct/n_rollouts for n_rollouts=8 "
        r"\(expected a multiple of 1/8\)",
    ),
    "n_rollouts zero": (
        _records_with(n_rollouts=_set_value("n_rollouts", 3, 0)),
        r"records\.parquet: column 'n_rollouts' row 3: expected >= 1, found 0",
    ),
    "negative step": (
        _records_with(step=_set_value("step", 2, -1)),
        r"records\.parquet: column 'step' row 2: expected >= 0, found -1",
    ),
    "fewer hidden rows": (
        _hidden(make_hidden(N - 1)),
        rf"hidden_states\.npy: has {N - 1} rows but records\.parquet has {N}; they must be row-aligned",
    ),
    "more hidden rows": (
        _hidden(make_hidden(N + 2)),
        rf"hidden_states\.npy: has {N + 2} rows but records\.parquet has {N}",
    ),
    "hidden_dim mismatch": (
        _hidden(make_hidden(N, D + 1)),
        rf"hidden_states\.npy: has {D + 1} columns but meta\.json says hidden_dim={D}",
    ),
    "NaN in hidden states": (
        _hidden(_hidden_with_nan()),
        r"hidden_states\.npy: row 2, column 1: expected a finite number, found nan",
    ),
    "hidden states float64": (
        _hidden(make_hidden().astype(np.float64)),
        r"hidden_states\.npy: expected dtype float16 or float32, found float64",
    ),
    "hidden states 1-D": (
        _hidden(np.zeros(N, dtype=np.float32)),
        r"hidden_states\.npy: expected a 2-D array \[rows, hidden_dim\], found shape \(6,\)",
    ),
    "hidden states not npy": (
        _write_text("hidden_states.npy", "not an array"),
        r"hidden_states\.npy: not a readable \.npy array",
    ),
    "missing records": (_remove("records.parquet"), r"records\.parquet: file not found"),
    "missing hidden states": (_remove("hidden_states.npy"), r"hidden_states\.npy: file not found"),
    "missing meta": (_remove("meta.json"), r"meta\.json: file not found"),
    "records not parquet": (
        _write_text("records.parquet", "question_id,step\n"),
        r"records\.parquet: not a readable parquet file",
    ),
    "meta not JSON": (
        _write_text("meta.json", "{kind: calibration"),
        r"meta\.json: not valid JSON",
    ),
    "meta not an object": (_meta(["calibration"]), r"meta\.json: expected a JSON object"),
    "wrong meta kind": (
        _meta({"kind": "bon", "hidden_dim": D}),
        r"meta\.json: key 'kind': expected 'calibration', found 'bon'",
    ),
    "meta without kind": (
        _meta({"hidden_dim": D}),
        r"meta\.json: key 'kind': expected 'calibration', found None",
    ),
    "meta without hidden_dim": (
        _meta({"kind": "calibration"}),
        r"meta\.json: key 'hidden_dim': expected a positive integer, found None",
    ),
    "meta hidden_dim as string": (
        _meta({"kind": "calibration", "hidden_dim": "3"}),
        r"meta\.json: key 'hidden_dim': expected a positive integer, found '3'",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CALIBRATION), ids=list(BAD_CALIBRATION))
def test_bad_calibration_set_is_rejected(tmp_path: Path, case: str) -> None:
    mutate, message = BAD_CALIBRATION[case]
    path = write_calibration_by_hand(tmp_path / "cal")
    read_calibration_set(path)  # the unmutated set is fine
    mutate(path)
    with pytest.raises(DataError, match=message) as info:
        read_calibration_set(path)
    # the message starts with the full path of the offending file
    assert str(info.value).startswith(str(path))
    assert info.value.path is not None and info.value.path.parent == path


def test_calibration_set_path_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nowhere: not a directory \(expected a calibration set"):
        read_calibration_set(tmp_path / "nowhere")
    with pytest.raises(DataError, match=r"nowhere: not a directory \(expected a BoN set"):
        read_bon_set(tmp_path / "nowhere")


def test_nan_hidden_check_can_be_skipped_and_finds_late_rows(tmp_path: Path) -> None:
    hidden = make_hidden(20_000, 2)
    hidden[17_000, 1] = np.inf  # beyond the first scan chunk
    records = make_records(20_000)  # one row per (question_id, response_id, step)
    write_calibration_by_hand(tmp_path / "cal", records, hidden)
    with pytest.raises(
        DataError,
        match=r"hidden_states\.npy: row 17000, column 1: expected a finite number, found inf",
    ):
        read_calibration_set(tmp_path / "cal")
    assert len(read_calibration_set(tmp_path / "cal", check_hidden=False)) == 20_000


# ----------------------------------------------------------------------------- bad BoN sets
def _bon_frames(mutate_q=None, mutate_r=None) -> Mutation:
    def mutate(path: Path) -> None:
        questions, responses = make_bon()
        if mutate_q is not None:
            questions = mutate_q(questions)
        if mutate_r is not None:
            responses = mutate_r(responses)
        questions.to_parquet(path / "questions.parquet", index=False)
        responses.to_parquet(path / "responses.parquet", index=False)

    return mutate


def _rename_question(df: pd.DataFrame, row: int, qid: str) -> pd.DataFrame:
    df = df.copy()
    df.loc[row, "question_id"] = qid
    return df


BAD_BON: dict[str, tuple[Mutation, str]] = {
    "unknown question in responses": (
        _bon_frames(mutate_r=lambda r: _rename_question(r, 5, "q9")),
        r"responses\.parquet: column 'question_id' row 5: 'q9' is not in questions\.parquet",
    ),
    "duplicate question id": (
        _bon_frames(mutate_q=lambda q: _rename_question(q, 2, "q0")),
        r"questions\.parquet: column 'question_id' row 2: duplicate id 'q0'",
    ),
    "correct as integers": (
        _bon_frames(mutate_r=lambda r: r.assign(correct=r["correct"].astype(int))),
        r"responses\.parquet: column 'correct': expected bool values, found dtype int64",
    ),
    "missing correct": (
        _bon_frames(mutate_r=lambda r: r.drop(columns=["correct"])),
        r"responses\.parquet: missing column\(s\) \['correct'\]",
    ),
    "question prm_score NaN": (
        _bon_frames(mutate_q=lambda q: q.assign(prm_score=[0.1, np.nan, 0.3])),
        r"questions\.parquet: column 'prm_score' row 1: expected a finite number, found nan",
    ),
    "response prm_score above 1": (
        _bon_frames(mutate_r=lambda r: r.assign(prm_score=r["prm_score"] * 2)),
        r"responses\.parquet: column 'prm_score' row \d+: expected a value in \[0, 1\]",
    ),
    "hidden rows mismatch": (
        _hidden(make_hidden(4)),
        r"hidden_states\.npy: has 4 rows but questions\.parquet has 3",
    ),
    "hidden_dim mismatch": (
        _hidden(make_hidden(3, D + 2)),
        rf"hidden_states\.npy: has {D + 2} columns but meta\.json says hidden_dim={D}",
    ),
    "NaN in hidden states": (
        _hidden(np.where(np.eye(3, D, k=1) > 0, np.nan, 0.0).astype(np.float16)),
        r"hidden_states\.npy: row 0, column 1: expected a finite number, found nan",
    ),
    "wrong meta kind": (
        _meta({"kind": "calibration", "hidden_dim": D}),
        r"meta\.json: key 'kind': expected 'bon', found 'calibration'",
    ),
    "missing responses": (_remove("responses.parquet"), r"responses\.parquet: file not found"),
    "missing questions": (_remove("questions.parquet"), r"questions\.parquet: file not found"),
    "missing hidden states": (_remove("hidden_states.npy"), r"hidden_states\.npy: file not found"),
}


@pytest.mark.parametrize("case", list(BAD_BON), ids=list(BAD_BON))
def test_bad_bon_set_is_rejected(tmp_path: Path, case: str) -> None:
    mutate, message = BAD_BON[case]
    path = write_bon_by_hand(tmp_path / "bon")
    read_bon_set(path)
    mutate(path)
    with pytest.raises(DataError, match=message) as info:
        read_bon_set(path)
    assert str(info.value).startswith(str(path))


# ----------------------------------------------------------------------------- writers validate
def test_writer_rejects_bad_records_and_names_the_target(tmp_path: Path) -> None:
    records = make_records()
    records.loc[2, "success_prob"] = 0.3
    with pytest.raises(DataError, match=r"cal/records\.parquet: row 2: success_prob=0\.3"):
        write_calibration_set(tmp_path / "cal", records, make_hidden())
    assert leftovers(tmp_path, set()) == []


def test_writer_rejects_bad_bon_responses(tmp_path: Path) -> None:
    questions, responses = make_bon()
    responses["correct"] = responses["correct"].astype(int)
    with pytest.raises(DataError, match=r"bon/responses\.parquet: column 'correct': expected bool"):
        write_bon_set(tmp_path / "bon", questions, make_hidden(3), responses)
    assert leftovers(tmp_path, set()) == []


# ----------------------------------------------------------------------------- atomicity
def _existing_set(tmp_path: Path) -> tuple[Path, pd.DataFrame, np.ndarray]:
    records, hidden = make_records(), make_hidden(seed=5)
    path = write_calibration_set(
        tmp_path / "cal", records, hidden, {"version": "old"}, dtype="float32"
    )
    return path, records, hidden


def _assert_unchanged(path: Path, hidden: np.ndarray) -> None:
    data = read_calibration_set(path)
    assert data.meta["version"] == "old"
    np.testing.assert_array_equal(np.asarray(data.hidden), hidden)
    assert sorted(p.name for p in path.iterdir()) == [
        "hidden_states.npy",
        "meta.json",
        "records.parquet",
    ]


def test_failed_write_keeps_existing_set(tmp_path: Path) -> None:
    path, records, hidden = _existing_set(tmp_path)
    bad = records.copy()
    bad.loc[0, "prm_score"] = np.nan
    with pytest.raises(DataError, match=r"column 'prm_score' row 0"):
        write_calibration_set(path, bad, make_hidden(seed=9), {"version": "new"})
    _assert_unchanged(path, hidden)
    assert leftovers(tmp_path, {"cal"}) == []


def test_set_writer_interrupted_part_way_keeps_existing_set(tmp_path: Path) -> None:
    path, records, hidden = _existing_set(tmp_path)
    with pytest.raises(KeyboardInterrupt), SetWriter(path, "calibration", N, D) as w:
        w.hidden[:3] = make_hidden(seed=9)[:3]
        # the half-written set lives in a temporary sibling, not under the final name
        assert Path(w.hidden.filename).parent != path
        raise KeyboardInterrupt
    _assert_unchanged(path, hidden)
    assert leftovers(tmp_path, {"cal"}) == []


@pytest.mark.parametrize("problem", ["no records", "no responses", "row mismatch"])
def test_set_writer_incomplete_fails_cleanly(tmp_path: Path, problem: str) -> None:
    path, records, hidden = _existing_set(tmp_path)
    kind = "bon" if problem == "no responses" else "calibration"
    messages = {
        "no records": "records .* were never set",
        "no responses": "BoN responses were never set",
        "row mismatch": f"{N - 1} records but {N} hidden-state rows",
    }
    with pytest.raises(ValueError, match=messages[problem]), SetWriter(path, kind, N, D) as w:
        if problem == "no responses":
            w.records = make_bon(N)[0]
        elif problem == "row mismatch":
            w.records = records.iloc[: N - 1]
    _assert_unchanged(path, hidden)
    assert leftovers(tmp_path, {"cal"}) == []


def test_set_writer_without_overwrite_refuses(tmp_path: Path) -> None:
    path, records, hidden = _existing_set(tmp_path)
    with pytest.raises(FileExistsError, match="overwrite"):
        write_calibration_set_no_overwrite(path, records)
    _assert_unchanged(path, hidden)
    assert leftovers(tmp_path, {"cal"}) == []


def write_calibration_set_no_overwrite(path: Path, records: pd.DataFrame) -> None:
    with SetWriter(path, "calibration", N, D, overwrite=False) as w:
        w.records = records


def test_successful_rewrite_replaces_whole_directory(tmp_path: Path) -> None:
    path, records, _ = _existing_set(tmp_path)
    (path / "stale.txt").write_text("from the old set")
    new_hidden = make_hidden(seed=11)
    write_calibration_set(path, records, new_hidden, {"version": "new"}, dtype="float32")
    data = read_calibration_set(path)
    assert data.meta["version"] == "new"
    np.testing.assert_array_equal(np.asarray(data.hidden), new_hidden)
    assert not (path / "stale.txt").exists()
    assert leftovers(tmp_path, {"cal"}) == []


def test_set_writer_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind must be"):
        SetWriter(tmp_path / "x", "labels", 1, 1)
    with pytest.raises(ValueError, match="float16 or float32"):
        SetWriter(tmp_path / "x", "calibration", 1, 1, dtype="float64")
    assert leftovers(tmp_path, set()) == []


def test_atomic_dir_keeps_existing_on_failure(tmp_path: Path) -> None:
    final = tmp_path / "out"
    final.mkdir()
    (final / "a.txt").write_text("old")
    with pytest.raises(RuntimeError, match="boom"), atomic_dir(final) as tmp:
        (tmp / "a.txt").write_text("new")
        (tmp / "b.txt").write_text("new")
        raise RuntimeError("boom")
    assert sorted(p.name for p in final.iterdir()) == ["a.txt"]
    assert (final / "a.txt").read_text() == "old"
    assert leftovers(tmp_path, {"out"}) == []
    with atomic_dir(final) as tmp:
        (tmp / "b.txt").write_text("new")
    assert sorted(p.name for p in final.iterdir()) == ["b.txt"]
    assert leftovers(tmp_path, {"out"}) == []


def test_atomic_path_keeps_existing_on_failure(tmp_path: Path) -> None:
    final = tmp_path / "x.json"
    final.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(final) as tmp:
        tmp.write_text("half")
        raise RuntimeError
    assert final.read_text() == "old"
    assert leftovers(tmp_path, {"x.json"}) == []
    with atomic_path(final) as tmp:
        tmp.write_text("new")
    assert final.read_text() == "new"
    assert leftovers(tmp_path, {"x.json"}) == []


def test_data_error_message_format(tmp_path: Path) -> None:
    err = DataError(tmp_path / "f.parquet", "column 'x' row 1: expected y")
    assert str(err) == f"{tmp_path / 'f.parquet'}: column 'x' row 1: expected y"
    assert isinstance(err, ValueError)
    assert str(DataError(None, "no file")) == "no file"
    assert re.search("no file", str(DataError(None, "no file")))


# ----------------------------------------------------------------------------- keys and emptiness
def test_repeated_calibration_rows_are_named(tmp_path: Path) -> None:
    records = make_records()
    records = pd.concat([records, records.iloc[[4]]], ignore_index=True)
    write_calibration_by_hand(tmp_path / "cal", records)
    with pytest.raises(DataError, match=rf"rows 4 and {len(records) - 1}: repeated key"):
        read_calibration_set(tmp_path / "cal")


def test_conflicting_calibration_labels_are_named(tmp_path: Path) -> None:
    records = make_records()
    records = pd.concat([records, records.iloc[[4]]], ignore_index=True)
    records.loc[len(records) - 1, "success_prob"] = 1.0 if records.loc[4, "success_prob"] < 1 else 0
    write_calibration_by_hand(tmp_path / "cal", records)
    with pytest.raises(DataError, match=r"conflicting key \(question_id='q1', response_id=1"):
        read_calibration_set(tmp_path / "cal")


def test_repeated_bon_responses_are_named(tmp_path: Path) -> None:
    questions, responses = make_bon()
    responses = pd.concat([responses, responses.iloc[[2]]], ignore_index=True)
    write_bon_by_hand(tmp_path / "bon", questions, responses)
    with pytest.raises(DataError, match=r"responses\.parquet: rows 2 and 12: repeated key"):
        read_bon_set(tmp_path / "bon")


def test_empty_sets_are_refused_with_their_file(tmp_path: Path) -> None:
    write_calibration_by_hand(tmp_path / "cal", make_records().iloc[:0], make_hidden(0))
    with pytest.raises(DataError, match=r"cal/records\.parquet: has no rows"):
        read_calibration_set(tmp_path / "cal")
    questions, responses = make_bon()
    write_bon_by_hand(tmp_path / "bon", questions.iloc[:0], responses.iloc[:0], make_hidden(0))
    with pytest.raises(DataError, match=r"bon/questions\.parquet: has no rows"):
        read_bon_set(tmp_path / "bon")


@pytest.mark.parametrize(
    ("bad", "row"),
    [
        (np.array([0.2, np.nan]), 2),
        (np.array([[0.1, 0.2]]), 1),  # a nested list: not one score per step
        (np.float64(0.5), 3),  # a scalar, not a list
        (np.array([-0.1]), 0),
        (["0.5", "x"], 2),  # not numbers: named like the others, not a ValueError traceback
        ("abc", 1),
    ],
)
def test_step_scores_checked_row_named(bad, row: int) -> None:
    from dprm.data.bon_set import check_step_scores

    values = [np.array([0.1, 0.9]), np.array([1.0]), None, np.array([0.0, 0.5, 0.7])]
    good = pd.DataFrame({"step_scores": values})
    check_step_scores(good, Path("bon/responses.parquet"))  # the fast path accepts it
    values[row] = bad
    with pytest.raises(DataError, match=rf"'step_scores' row {row}: expected a list of scores"):
        check_step_scores(pd.DataFrame({"step_scores": values}), Path("bon/responses.parquet"))


def test_contract_names_stay_importable_from_their_old_home() -> None:
    """dprm.data.contract gathers the names its split modules define (the same objects)."""
    import dprm.data
    import dprm.data.contract as contract
    from dprm.data import bon_set, calibration_set, features, labels, set_writer, validation

    homes = (bon_set, calibration_set, features, labels, set_writer, validation)
    for name in contract.__all__:
        owners = [m for m in homes if getattr(m, name, None) is getattr(contract, name)]
        assert owners, f"{name} is not defined by any contract module"
    for name in dprm.data.__all__:
        assert getattr(dprm.data, name) is getattr(contract, name)
    assert {"read_features", "SetWriter", "RESPONSE_HIDDEN_FILE"} <= set(contract.__all__)
