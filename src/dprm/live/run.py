"""Shared set-up of a ``dprm solve`` run: config, questions, question states, BoN-set export.

Run directory (``--out OUT``; ``SFX`` is ``""`` or ``.shard-IIIII-of-NNNNN``)::

    OUT/run.json                      resolved config, package version, seed (first run writes it)
    OUT/{bon,beam}SFX.jsonl           one finished question per line (resumable log)
    OUT/question_statesSFX.parquet    question-only PRM state: question_id, prm_score, budget
    OUT/question_statesSFX.npy        its hidden states [Q, D] (float32), row-aligned
    OUT/seq_drawsSFX.jsonl            (bon --auto-seq) one line per drawn candidate (resumable)
    OUT/bon_set/                      (bon mode) the run as a best-of-N set for ``dprm ias``
                                      (sharded: OUT/bon_set.shards/shard-IIIII-of-NNNNN/, which
                                      ``dprm merge OUT/bon_set`` joins)
    OUT/summary.json                  accuracy vs compute over every finished question
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dprm.config import ConfigError
from dprm.digests import model_digest
from dprm.io import DataError, atomic_path
from dprm.live.calibrated_prm import CalibratedPRM, States
from dprm.live.runlog import INPUT_DIGESTS, check_run_config, check_run_inputs, shard_suffix
from dprm.live.solve_config import (  # noqa: F401 (re-exported)
    DEFAULT_C,
    FINGERPRINT_KEYS,
    LIVE_RULES,
    SolveConfig,
)
from dprm.version import __version__


def load_run_questions(config: SolveConfig) -> tuple[pd.DataFrame, str]:
    """This shard's questions (after ``--limit``) and the shard's file-name suffix.

    A local file may hold questions without a gold answer (no ``answer`` and no boxed
    ``solution``): they are solved but not graded (``answer`` is ``""``).
    """
    from dprm.llm.questions import extract_boxed, load_questions, normalise, read_records
    from dprm.llm.shard import parse_shard

    try:
        shard = parse_shard(config.shard)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    try:
        frame = load_questions(config.questions, limit=config.limit)
    except DataError as err:
        if "no 'answer' field" not in str(err) or not Path(config.questions).is_file():
            raise
        rows = read_records(config.questions)
        for row in rows:
            if not isinstance(row, dict) or row.get("answer", row.get("gold_answer")) is not None:
                continue
            solution = row.get("solution")
            if not (isinstance(solution, str) and extract_boxed(solution) is not None):
                row["answer"] = ""
        frame = normalise(rows, config.questions)
        frame = frame.iloc[: config.limit] if config.limit is not None else frame
    frame = frame.iloc[list(shard.select(len(frame)))].reset_index(drop=True)
    frame["answer"] = frame["answer"].fillna("").astype(str)
    return frame, shard_suffix(shard.index, shard.count)


def start_run(out: Path, config: SolveConfig, provenance: dict[str, Any]) -> None:
    """Create ``out`` and record (or check, on resume) the run's config."""
    out.mkdir(parents=True, exist_ok=True)
    digests = input_digests(config)
    record = {**config.to_dict(), "provenance": provenance, "dprm_version": __version__}
    record[INPUT_DIGESTS] = digests
    check_run_config(out, record, FINGERPRINT_KEYS)
    check_run_inputs(out, digests)


#: the settings that name what a run reads (files, folders, models, hub ids)
INPUT_KEYS = ("questions", "generator", "prm", "calibrator", "train_bon")


def input_digests(config: SolveConfig) -> dict[str, str]:
    """Content digest of every input of a run (local paths by content, hub ids by revision)."""
    values = {k: getattr(config, k) for k in INPUT_KEYS}
    return {k: model_digest(v) for k, v in values.items() if v is not None and str(v)}


def question_states(
    out: Path, suffix: str, questions: pd.DataFrame, cprm: CalibratedPRM, C: float
) -> tuple[States, np.ndarray]:
    """Question-only states and budgets of this shard, computed once and cached in ``out``.

    All the shard's questions go through the calibrator in one batch, as ``dprm ias`` does on
    the exported BoN set, so both compute the same numbers. A rerun reads the cache.

    Returns:
        (states [Q], budgets [Q] int64), rows in ``questions`` order.
    """
    table_path = out / f"question_states{suffix}.parquet"
    hidden_path = out / f"question_states{suffix}.npy"
    ids = questions["question_id"].astype(str).tolist()
    if table_path.exists() and hidden_path.exists():
        table = pd.read_parquet(table_path)
        hidden = np.load(hidden_path, allow_pickle=False)
        if table["question_id"].tolist() == ids and hidden.shape == (len(ids), cprm.prm.hidden_dim):
            states = States(
                table["prm_score"].to_numpy(np.float32), hidden, np.zeros(len(ids), bool)
            )
            return states, table["budget"].to_numpy(np.int64)
    states = cprm.question_states(questions["question"].tolist())
    budgets = cprm.budgets(states, C)
    with atomic_path(hidden_path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, states.hidden.astype(np.float32), allow_pickle=False)
    frame = pd.DataFrame(
        {
            "question_id": ids,
            "prm_score": states.scores.astype(np.float32),
            "budget": budgets.astype(np.int32),
        }
    )
    with atomic_path(table_path) as tmp:
        frame.to_parquet(tmp, index=False)
    return states, budgets


def write_bon_export(
    out: Path, suffix: str, records: list[dict], meta: dict[str, Any]
) -> Path | None:
    """Write the finished bon-mode questions as a BoN set (``OUT/bon_set``) for ``dprm ias``.

    ``questions.parquet`` holds each question's question-only PRM score and
    ``hidden_states.npy`` its state (float32, exactly what the live budget was computed from);
    ``responses.parquet`` holds every generated candidate with its PRM score and grade
    (``correct`` is False where the question has no gold answer; ``graded`` says which) and
    its canonical final answer (BoN contract v2's ``answer``, so vote rules run on the export;
    candidate states are not kept live). Extra columns (the contract keeps them): the questions'
    ``live_budget`` (the draws the live allocation gave it: its first ``live_budget``
    responses); with ``--auto-seq`` the responses' ``draw_round`` (0: the floor; -1: a baseline
    top-up), ``draw_order`` (place in the shard's sequence of draws; -1: top-up) and
    ``live_estimate`` (the calibrated estimate the policy read).
    """
    from dprm.data.contract import write_bon_set
    from dprm.llm.answers import canonical_answer

    table_path = out / f"question_states{suffix}.parquet"
    if not records or not table_path.exists():
        return None
    table = pd.read_parquet(table_path)
    hidden = np.load(out / f"question_states{suffix}.npy", mmap_mode="r", allow_pickle=False)
    done = {r["question_id"]: r for r in records}
    rows = np.flatnonzero(table["question_id"].isin(list(done)).to_numpy())
    questions = table.iloc[rows].reset_index(drop=True)
    responses = [
        {
            "question_id": qid,
            "response_id": i,
            "prm_score": c["prm_score"],
            "correct": bool(c.get("correct") or False),
            "graded": c.get("correct") is not None,
            "n_tokens": c["n_tokens"],
            "answer": canonical_answer(str(c.get("text") or "")),  # BoN v2: vote rules
        }
        for qid in questions["question_id"]
        for i, c in enumerate(done[qid]["candidates"])
    ]
    frame = pd.DataFrame(responses).astype({"response_id": "int32", "prm_score": "float32"})
    live = questions[["question_id", "prm_score"]].assign(
        live_budget=[int(done[q]["budget"]) for q in questions["question_id"]]
    )  # the draws the live allocation gave each question (the first live_budget responses)
    if any("round" in c for q in questions["question_id"] for c in done[q]["candidates"]):
        # auto-seq: when each candidate was drawn (-1: a baseline top-up the policy never read)
        cands = [c for q in questions["question_id"] for c in done[q]["candidates"]]
        for column, field in (("draw_round", "round"), ("draw_order", "order")):
            frame[column] = np.array(
                [-1 if c[field] is None else c[field] for c in cands], np.int32
            )
        frame["live_estimate"] = np.array([c["estimate"] for c in cands], np.float32)
    path = out / "bon_set" if not suffix else out / "bon_set.shards" / suffix.lstrip(".")
    write_bon_set(
        path,
        live,
        np.asarray(hidden[rows], dtype=np.float32),
        frame,
        meta,
        dtype="float32",
    )
    return path
