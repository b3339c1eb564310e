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

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dprm.config import ConfigError
from dprm.io import DataError, atomic_path
from dprm.live.calibrated_prm import CalibratedPRM, States
from dprm.live.runlog import check_run_config, shard_suffix
from dprm.version import __version__

DEFAULT_C = {"bon": 0.9, "beam": 0.99}
#: selection rules a live best-of-N run can answer by (``dprm.ias.rules``): the ones that need
#: only what a live draw has, its final PRM score and its final answer
LIVE_RULES = ("highest-last", "weighted-last", "majority")


def _setting(default: Any = dataclasses.MISSING, *, help: str, fingerprint: bool = True, **flag):
    """A :class:`SolveConfig` field whose metadata describes its ``dprm solve`` flag.

    Args:
        default: the setting's default (also the flag's); MISSING for a required setting.
        help: the flag's help text.
        fingerprint: whether the setting decides a run's content (resuming with it changed is
            refused); see :data:`FINGERPRINT_KEYS`.
        **flag: ``flag`` (name, default ``--field-name``), ``choices``, ``metavar``,
            ``required``, ``group`` (help section) and ``type`` (``"unit_interval"``: a number
            in [0, 1]).
    """
    return dataclasses.field(
        default=default, metadata={"help": help, "fingerprint": fingerprint, **flag}
    )


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
        auto_cost: bon: the mean cost (mean draws / n_max) of the ``auto`` / ``auto-seq``
            allocation over the shard's questions (None: the C rule).
        train_bon: the training BoN set those allocations learn on.
        auto_seq: bon: the sequential ``auto-seq`` allocation (:mod:`dprm.live.bon_seq`).
        round_size: auto-seq: draws chosen together before their estimates are read (the
            vote-lead peer: draws per round).
        peer: bon: allocate by a calibrator-free adaptive peer (:mod:`dprm.live.bon_peers`).
        peer_level: the peer's knob (threshold or most draws; None: its default).
        rule: bon: how a question's answer is picked from its draws (:data:`LIVE_RULES`); the
            ``auto`` / ``auto-seq`` allocations are learnt for this rule.
        batch_questions: questions generated together (one part of the log).
    """

    mode: str = _setting(
        help="adaptive best-of-N or beam search", choices=["bon", "beam"], required=True
    )
    questions: str = _setting(
        help="question file (.jsonl/.json/.parquet with problem|question and answer) or a set "
        "name (math500, math, math-park, aime24, aime25; names need the hub). No gold answer: "
        "not graded",
        metavar="FILE_OR_NAME",
        required=True,
    )
    generator: str = _setting(
        help="generator model directory or hub id", metavar="MODEL", required=True
    )
    prm: str = _setting(
        help="PRM directory or hub id (the one the calibrator was fitted on)", required=True
    )
    calibrator: str = _setting(
        help="calibrator directory (dprm train output)", metavar="DIR", required=True
    )
    C: float | None = _setting(
        None,
        help="target P(at least one correct); default 0.9 (bon), 0.99 (beam)",
        flag="--C",
    )
    n_max: int = _setting(64, help="largest budget N_max; beam: samples per pruning step N")
    baseline_n: int | None = _setting(
        None,
        help="fixed baseline: bon = best of this many samples, beam = full-width search with "
        "N = this; default: --n-max; 0 = no baseline (only the adaptive run is paid for)",
    )
    beta: float = _setting(
        0.1, help="QR calibrators: level of the point rule, as dprm ias", type="unit_interval"
    )
    auto_cost: float | None = _setting(
        None,
        help="bon: allocate by dprm ias's 'auto' rule instead of the C rule, at this mean cost "
        "(mean draws / n_max) over the shard's questions; needs --train-bon",
        type="unit_interval",
    )
    train_bon: str | None = _setting(
        None,
        help="bon with --auto-cost: a training BoN set scored by the same PRM, where auto "
        "learns its selection-accuracy model and uniform share",
    )
    auto_seq: bool = _setting(
        False,
        help="bon with --auto-cost: allocate by dprm ias's sequential 'auto-seq' instead, live: "
        "after the uniform floor, draw in rounds, each draw going to the question of largest "
        "posterior-expected gain, the posteriors updated by every drawn candidate's calibrated "
        "estimate and final answer (agreement among a question's draws is evidence of a large "
        "success probability); needs --train-bon with candidate hidden states, BoN contract "
        "v2, unless the calibrator reads only the score",
    )
    round_size: int = _setting(
        16,
        help="bon with --auto-seq: draws chosen and generated together before their estimates "
        "are read (1: fully sequential; larger keeps a GPU busy)",
    )
    peer: str | None = _setting(
        None,
        help="bon: allocate by a calibrator-free adaptive peer instead: adaptive-consistency "
        "(stop when P(leading answer beats the runner-up) >= --peer-level, default 0.95), "
        "esc-4 / esc-8 (stop after a window whose answers agree; --peer-level: most draws), "
        "score-raw / score-calibrated (stop when the best drawn score clears --peer-level), "
        "vote-lead (one draw each, then each draw to the closest vote until --peer-level "
        "draws per question on average are spent)",
        choices=["adaptive-consistency", "esc-4", "esc-8", "score-raw", "score-calibrated",
                 "vote-lead"],
    )  # fmt: skip
    peer_level: float | None = _setting(
        None, help="bon with --peer: the peer's threshold or most draws (default: the peer's)"
    )
    rule: str = _setting(
        "highest-last",
        help="bon: how the answer is picked from a question's draws: the highest final PRM "
        "score (the paper's), weighted best-of-N (final scores summed per distinct final "
        "answer) or majority vote (ties: the answer holding the higher single score). --auto-cost "
        "learns its allocation for this rule; with majority, --auto-seq reads the vote's state "
        "(the race index of dprm ias). Voting needs --train-bon with final answers (BoN v2)",
        choices=list(LIVE_RULES),
    )
    temperature: float = _setting(0.7, help="sampling temperature", group="sampling")
    top_p: float = _setting(1.0, help="nucleus sampling", group="sampling")
    max_new_tokens: int = _setting(
        2048,
        help="token cap of one generation call: a response (bon) or a step (beam)",
        group="sampling",
    )
    seed: int = _setting(
        0, help="base seed; every prompt gets its own derived seed", group="sampling"
    )
    beam_width: int = _setting(
        8,
        help="M_MAX, samples per kept beam at full width (K_MAX = N / M_MAX)",
        group="beam search",
    )
    freq: int = _setting(5, help="prune and re-expand every this many steps", group="beam search")
    max_steps: int = _setting(100, help="stop a search after this many steps", group="beam search")
    max_beam_tokens: int = _setting(
        3072, help="a beam ends once its steps hold this many tokens", group="beam search"
    )
    lower_level: float = _setting(
        0.1,
        help="quantile level that sets K and M",
        group="beam search",
        type="unit_interval",
    )
    rank_by: str = _setting(
        "median", help="how beams are ranked", choices=["median", "mean"], group="beam search"
    )
    adaptive: str = _setting(
        "km",
        help="which rules adapt: IAS-of-K, IAS-of-M, both",
        choices=["km", "k", "m", "none"],
        group="beam search",
    )
    batch_questions: int = _setting(
        8,
        help="questions generated together (one resumable part)",
        group="sampling",
        fingerprint=False,
    )
    grade_timeout: float = _setting(
        5.0,
        help="seconds per math-verify grading call",
        group="models and grading",
        fingerprint=False,
    )
    grade_workers: int = _setting(
        2, help="grading worker processes", group="models and grading", fingerprint=False
    )
    limit: int | None = _setting(
        None, help="only the first K questions", metavar="K", fingerprint=False
    )
    shard: str = _setting(
        "0/1",
        help="run the i-th of n blocks of questions (0-based)",
        metavar="i/n",
        fingerprint=False,
    )

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
        if (self.auto_cost is None) != (self.train_bon is None):
            fail("--auto-cost and --train-bon go together (auto learns on the training set)")
        if self.auto_cost is not None and self.mode != "bon":
            fail("--auto-cost applies to --mode bon only")
        if self.auto_cost is not None and not 0.0 < float(self.auto_cost) <= 1.0:
            fail(f"--auto-cost {self.auto_cost}: expected a cost in (0, 1]")
        if self.auto_seq and self.auto_cost is None:
            fail("--auto-seq needs --auto-cost and --train-bon (its budget and training set)")
        if self.round_size < 1:
            fail(f"--round-size {self.round_size}: expected >= 1")
        if self.peer is not None:
            if self.mode != "bon" or self.auto_seq:
                fail(f"--peer {self.peer}: applies to --mode bon, without --auto-seq")
            if self.peer in ("vote-lead", "score-raw", "score-calibrated") and (
                self.peer_level is None
            ):
                fail(f"--peer {self.peer} needs --peer-level (its threshold or mean draws)")
            if self.peer == "vote-lead" and not 1 <= self.peer_level <= self.n_max:
                fail(f"--peer-level {self.peer_level}: vote-lead's mean draws, in [1, --n-max]")
        if self.rule not in LIVE_RULES:
            fail(f"--rule {self.rule!r}: expected one of {', '.join(LIVE_RULES)}")
        if self.mode == "beam" and self.rule != "highest-last":
            fail(f"--rule {self.rule}: applies to --mode bon only (beam search keeps its own "
                 "ranking, --rank-by)")  # fmt: skip
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


#: settings that decide a run's content; resuming with any of them changed is refused
FINGERPRINT_KEYS = tuple(
    f.name for f in dataclasses.fields(SolveConfig) if f.metadata["fingerprint"]
)


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
