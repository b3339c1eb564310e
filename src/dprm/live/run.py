"""Shared set-up of a ``dprm solve`` run: config, questions, question states, BoN-set export.

Run directory (``--out OUT``; ``SFX`` is ``""`` or ``.shard-IIIII-of-NNNNN``)::

    OUT/run.json                      resolved config, package version, seed (first run writes it)
    OUT/{bon,beam}SFX.jsonl           one finished question per line (resumable log)
    OUT/question_statesSFX.parquet    question-only PRM state: question_id, prm_score, budget
    OUT/question_statesSFX.npy        its hidden states [Q, D] (float32), row-aligned
    OUT/bon_set/                      (bon mode) the run as a best-of-N set for ``dprm ias``
                                      (sharded: OUT/bon_set.shards/shard-IIIII-of-NNNNN/, which
                                      ``dprm merge OUT/bon_set`` joins)
    OUT/summary.json                  accuracy vs compute over every finished question
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dprm import __version__
from dprm.config import ConfigError
from dprm.io import DataError, atomic_path
from dprm.live.calibrated_prm import CalibratedPRM, States
from dprm.live.runlog import check_run_config, shard_suffix

#: settings that decide a run's content; resuming with any of them changed is refused
FINGERPRINT_KEYS = (
    "mode",
    "questions",
    "generator",
    "prm",
    "calibrator",
    "C",
    "n_max",
    "baseline_n",
    "beta",
    "temperature",
    "top_p",
    "max_new_tokens",
    "seed",
    "beam_width",
    "freq",
    "max_steps",
    "max_beam_tokens",
    "lower_level",
    "rank_by",
    "adaptive",
)
DEFAULT_C = {"bon": 0.9, "beam": 0.99}


@dataclass(frozen=True)
class SolveConfig:
    """Settings of a live run (every field is a ``dprm solve`` flag).

    Attributes:
        mode: ``bon`` (adaptive best-of-N) or ``beam`` (beam search with IAS-of-K / IAS-of-M).
        C: target probability of at least one correct candidate; None: 0.9 (bon), 0.99 (beam,
            Park's constant).
        n_max: N_max of the budget rules; in beam mode the samples N per pruning step.
        baseline_n: fixed-budget baseline (bon: N candidates; beam: N samples per pruning step
            at full width); None = ``n_max``; 0 = no baseline.
        beta: level of the point rule for fixed-level (QR) calibrators, as ``dprm ias --beta``.
        beam_width: M_MAX (K_MAX = N / M_MAX).
        freq: prune every ``freq`` steps.
        max_steps: stop a search after this many steps.
        max_beam_tokens: a beam is finished once its steps hold this many generated tokens (the
            reference stops a beam when its prompt reaches the 4096-token context).
        lower_level: the quantile level whose value sets the beam budget (K and M).
        rank_by: ``median`` (Q(0.5)) or ``mean`` (p_hat): how beams are ranked.
        adaptive: which beam rules adapt: ``km`` (both), ``k``, ``m`` or ``none``.
        batch_questions: questions generated together (one part of the log).
    """

    mode: str
    questions: str
    generator: str
    prm: str
    calibrator: str
    C: float | None = None
    n_max: int = 64
    baseline_n: int | None = None
    beta: float = 0.1
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 2048
    seed: int = 0
    beam_width: int = 8
    freq: int = 5
    max_steps: int = 100
    max_beam_tokens: int = 3072
    lower_level: float = 0.1
    rank_by: str = "median"
    adaptive: str = "km"
    batch_questions: int = 8
    grade_timeout: float = 5.0
    grade_workers: int = 2
    limit: int | None = None
    shard: str = "0/1"

    def __post_init__(self) -> None:
        def fail(what: str) -> None:
            raise ConfigError(what)

        if self.mode not in ("bon", "beam"):
            fail(f"--mode {self.mode!r}: expected 'bon' or 'beam'")
        if self.C is None:
            object.__setattr__(self, "C", DEFAULT_C[self.mode])
        if not 0.0 < float(self.C) < 1.0:
            fail(f"--C {self.C}: expected a target in (0, 1)")
        if self.baseline_n is None:
            object.__setattr__(self, "baseline_n", self.n_max)
        if self.n_max < 1 or self.baseline_n < 0:
            fail(f"--n-max {self.n_max} / --baseline-n {self.baseline_n}: expected >= 1 / >= 0")
        if self.rank_by not in ("median", "mean"):
            fail(f"--rank-by {self.rank_by!r}: expected 'median' or 'mean'")
        if self.adaptive not in ("km", "k", "m", "none"):
            fail(f"--adaptive {self.adaptive!r}: expected km, k, m or none")
        if not 0.0 <= self.lower_level <= 1.0:
            fail(f"--lower-level {self.lower_level}: expected a level in [0, 1]")
        if self.mode == "beam":
            for name, n in (("--n-max", self.n_max), ("--baseline-n", self.baseline_n)):
                if n and n % self.beam_width:
                    fail(
                        f"{name} {n} must be a multiple of --beam-width {self.beam_width} (K_MAX = N / M_MAX)"
                    )
            if self.freq < 1 or self.max_steps < 1:
                fail(f"--freq {self.freq} / --max-steps {self.max_steps}: expected >= 1")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
    record = {**config.to_dict(), "provenance": provenance, "dprm_version": __version__}
    check_run_config(out, record, FINGERPRINT_KEYS)


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
    (``correct`` is False where the question has no gold answer; ``graded`` says which).
    """
    from dprm.data.contract import write_bon_set

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
        }
        for qid in questions["question_id"]
        for i, c in enumerate(done[qid]["candidates"])
    ]
    frame = pd.DataFrame(responses).astype({"response_id": "int32", "prm_score": "float32"})
    path = out / "bon_set" if not suffix else out / "bon_set.shards" / suffix.lstrip(".")
    write_bon_set(
        path,
        questions[["question_id", "prm_score"]],
        np.asarray(hidden[rows], dtype=np.float32),
        frame,
        meta,
        dtype="float32",
    )
    return path
