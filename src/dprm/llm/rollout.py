"""Trajectories and Monte Carlo rollout labels (Park et al.'s steps 1-3, with counts kept).

**Trajectories** (``generate_trajectories``): ``n`` responses per question from Park's prompt,
graded against the gold answer. Columns: ``question_id, response_id, question, answer,
response, n_tokens, finish_reason, stop_reason, correct, grade_timeout``.

**Labels** (``rollout_labels``): for each trajectory split into steps on ``"\\n\\n"``
(n_steps pieces) and each k = 0..K (``max_steps``, default 20):

- ``k > n_steps``: no row.
- ``k == n_steps`` (*complete*): the prefix is the whole response; its label is its own
  correctness (``n_correct`` in {0, 1}, ``n_rollouts = 1``, ``label_source = "complete"``).
  No rollouts: nothing is left to sample.
- ``k < n_steps`` and the prefix (with its trailing ``"\\n\\n"``) already holds
  ``\\boxed{...}`` (*boxed*): no rollouts, as in the reference (the answer is committed).
  ``boxed_prefix="grade"`` (default) labels it with the correctness of that committed text
  (``n_rollouts = 1``, ``label_source = "boxed"``); ``"drop"`` leaves it out, as Park's released
  training rows do. (The reference's MC script would write 0.0 for it, an artefact of having no
  rollouts, which its trainer then drops.)
- otherwise: ``n`` rollouts continue from ``prompt + prefix + "\\n\\n"``; only the continuation
  is graded (as in the reference); ``n_correct`` of ``n_rollouts`` is stored and
  ``success_prob = n_correct / n_rollouts`` (``label_source = "rollouts"``).

The reference reads k = 0..19 (its MC script loops ``range(20)``); ``max_steps=19`` reproduces
that. Rollout seeds depend only on (seed, question_id, response_id, k), so shards, parts and
restarts give the same labels as one uninterrupted run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dprm.io import DataError
from dprm.llm.generate import Completion, Generator, boxed_first, derive_seed
from dprm.llm.generator_base import request_journal
from dprm.llm.grading import GradingPool
from dprm.llm.prompts import build_prompt, contains_boxed, join_steps, prefix_text, split_steps
from dprm.llm.shard import Shard, output_path, parts_dir, run_frame_stage

#: a served generator's answered requests, in the stage's work directory (gone when it finishes)
JOURNAL_FILE = "requests.jsonl"

TRAJECTORY_COLUMNS = ("question_id", "response_id", "question", "answer", "response")


@dataclass(frozen=True)
class SamplingConfig:
    """How completions are sampled (first pass and rollouts share it)."""

    n: int = 8
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 2048
    seed: int = 42
    top_k: int = 0  # 0: off (the reference's)
    repetition_penalty: float = 1.0  # never the checkpoint's generation_config.json
    boxed_first: bool = False  # Park: draw int(1.25 n), keep boxed ones first, then n
    template: str | None = None  # "qwen" | "llama3"; None: from the model name


@dataclass(frozen=True)
class RolloutConfig:
    """Which prefixes get labelled and how."""

    max_steps: int = 20
    boxed_prefix: str = "grade"  # "grade" | "drop"

    def __post_init__(self) -> None:
        if self.boxed_prefix not in ("grade", "drop"):
            raise ValueError(f"boxed_prefix={self.boxed_prefix!r}: expected 'grade' or 'drop'")
        if self.max_steps < 0:
            raise ValueError(f"max_steps={self.max_steps}: expected >= 0")


def sample(
    generator: Generator,
    prompts: list[str],
    seeds: list[int],
    sampling: SamplingConfig,
    chunk: int = 256,
) -> list[list[Completion]]:
    """``sampling.n`` completions per prompt (Park's boxed-first oversampling if enabled)."""
    draw = int(sampling.n * 1.25) if sampling.boxed_first else sampling.n
    out: list[list[Completion]] = []
    for start in range(0, len(prompts), chunk):
        out.extend(
            generator.generate(
                prompts[start : start + chunk],
                draw,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_new_tokens=sampling.max_new_tokens,
                seeds=seeds[start : start + chunk],
                top_k=sampling.top_k,
                repetition_penalty=sampling.repetition_penalty,
            )
        )
    if sampling.boxed_first:
        out = [boxed_first(c, sampling.n) for c in out]
    return out


def generate_trajectories(
    questions: pd.DataFrame, generator: Generator, pool: GradingPool, sampling: SamplingConfig
) -> pd.DataFrame:
    """First pass for some questions: ``sampling.n`` graded responses each."""
    prompts = [
        build_prompt(q, generator.model_name, template=sampling.template)
        for q in questions["question"]
    ]
    seeds = [derive_seed(sampling.seed, "first-pass", qid) for qid in questions["question_id"]]
    completions = sample(generator, prompts, seeds, sampling)
    rows = []
    for (_, q), outs in zip(questions.iterrows(), completions, strict=True):
        for rid, c in enumerate(outs):
            rows.append(
                {
                    "question_id": str(q["question_id"]),
                    "response_id": rid,
                    "question": q["question"],
                    "answer": q["answer"],
                    "response": c.text,
                    "n_tokens": c.n_tokens,
                    "finish_reason": c.finish_reason,
                    "stop_reason": None if c.stop_reason is None else str(c.stop_reason),
                }
            )
    columns = [*TRAJECTORY_COLUMNS, "n_tokens", "finish_reason", "stop_reason"]
    frame = pd.DataFrame(rows, columns=columns).astype({"stop_reason": "string"})
    graded = pool.grade(frame["answer"].tolist(), frame["response"].tolist())
    frame["correct"], frame["grade_timeout"] = graded.correct, graded.timed_out
    return frame.astype({"response_id": "int32", "n_tokens": "int32"})


@dataclass
class _Task:
    row: dict
    kind: str  # "rollouts" | "complete" | "boxed"
    prompt: str = ""
    seed: int = 0
    graded_text: str = ""


def plan_prefixes(
    trajectories: pd.DataFrame, model_name: str, config: RolloutConfig, sampling: SamplingConfig
) -> list[_Task]:
    """One task per (trajectory, k) that gets a label, in (question, response, k) order."""
    tasks = []
    for traj in trajectories.itertuples(index=False):
        steps = split_steps(traj.response)
        for k in range(min(config.max_steps, len(steps)) + 1):
            row = {
                "question_id": str(traj.question_id),
                "response_id": int(traj.response_id),
                "step": k,
                "question": traj.question,
                "reasoning_prefix": join_steps(steps[:k]),
                "n_steps": len(steps),
                "answer": traj.answer,
            }
            if k == len(steps):
                tasks.append(_Task(row, "complete", graded_text=traj.response))
            elif contains_boxed(prefix_text(steps[:k])):
                if config.boxed_prefix == "grade":
                    tasks.append(_Task(row, "boxed", graded_text=join_steps(steps[:k])))
            else:
                prompt = build_prompt(
                    traj.question, model_name, steps[:k], template=sampling.template
                )
                seed = derive_seed(
                    sampling.seed, "rollout", row["question_id"], row["response_id"], k
                )
                tasks.append(_Task(row, "rollouts", prompt=prompt, seed=seed))
    return tasks


LABEL_FRAME_COLUMNS = (
    "question_id", "response_id", "step", "question", "reasoning_prefix", "n_correct", "n_rollouts",
    "success_prob", "n_steps", "label_source", "n_grade_timeouts",
)  # fmt: skip


def rollout_labels(
    trajectories: pd.DataFrame,
    generator: Generator,
    pool: GradingPool,
    config: RolloutConfig,
    sampling: SamplingConfig,
) -> pd.DataFrame:
    """Labels with counts for every prefix of some trajectories (see the module docstring)."""
    tasks = plan_prefixes(trajectories, generator.model_name, config, sampling)
    roll = [i for i, t in enumerate(tasks) if t.kind == "rollouts"]
    completions = sample(
        generator, [tasks[i].prompt for i in roll], [tasks[i].seed for i in roll], sampling
    )
    golds, texts, owner = [], [], []
    for i, task in enumerate(tasks):
        if task.kind != "rollouts":
            golds.append(task.row["answer"])
            texts.append(task.graded_text)
            owner.append(i)
    for i, outs in zip(roll, completions, strict=True):
        for c in outs:
            golds.append(tasks[i].row["answer"])
            texts.append(c.text)  # only the continuation is graded, as in the reference
            owner.append(i)
    graded = pool.grade(golds, texts)
    owner_arr = np.asarray(owner, dtype=np.int64)
    n_correct = np.bincount(owner_arr, weights=graded.correct, minlength=len(tasks)).astype(
        np.int64
    )
    n_total = np.bincount(owner_arr, minlength=len(tasks)).astype(np.int64)
    n_timeout = np.bincount(owner_arr, weights=graded.timed_out, minlength=len(tasks)).astype(
        np.int64
    )
    rows = []
    for i, task in enumerate(tasks):
        if n_total[i] == 0:
            continue  # a rollout call that returned nothing (cannot label)
        row = {k: v for k, v in task.row.items() if k != "answer"}
        row.update(
            n_correct=int(n_correct[i]),
            n_rollouts=int(n_total[i]),
            success_prob=float(n_correct[i] / n_total[i]),
            label_source=task.kind,
            n_grade_timeouts=int(n_timeout[i]),
        )
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(LABEL_FRAME_COLUMNS))
    return frame.astype(
        {"response_id": "int32", "step": "int32", "n_correct": "int32", "n_rollouts": "int32",
         "success_prob": "float32", "n_steps": "int32", "n_grade_timeouts": "int32"}
    )  # fmt: skip


def check_trajectories(frame: pd.DataFrame, path: str | Path) -> None:
    """Fail fast on a trajectories table without the needed columns."""
    missing = [c for c in TRAJECTORY_COLUMNS if c not in frame.columns]
    if missing:
        raise DataError(
            path,
            f"missing column(s) {missing}; expected {list(TRAJECTORY_COLUMNS)} (from `dprm generate`)",
        )
    for col in ("question_id", "question", "answer", "response"):
        bad = frame[col].map(lambda v: not isinstance(v, str))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataError(
                path, f"column '{col}' row {row}: expected a string, found {frame[col].iloc[row]!r}"
            )


def label_stats(frame: pd.DataFrame) -> dict:
    """Counters recorded in the labels' provenance."""
    sources = frame["label_source"].value_counts().to_dict() if len(frame) else {}
    return {
        "rows": len(frame),
        "rows_rollouts": int(sources.get("rollouts", 0)),
        "rows_complete": int(sources.get("complete", 0)),
        "rows_boxed": int(sources.get("boxed", 0)),
        "rollouts": int(frame["n_rollouts"][frame["label_source"] == "rollouts"].sum())
        if len(frame)
        else 0,
        "grade_timeouts": int(frame["n_grade_timeouts"].sum()) if len(frame) else 0,
    }


def config_dict(*configs: object) -> dict:
    """Merged dict of several config dataclasses (for fingerprints and provenance)."""
    out: dict = {}
    for config in configs:
        out.update(asdict(config))  # type: ignore[call-overload]
    return out


# ----------------------------------------------------------------------------- stages
def generation_fingerprint(inputs: dict | None, sampling: SamplingConfig) -> dict:
    """What decides a generation output: input identity + sampling settings."""
    return {"stage": "generate", **(inputs or {}), "sampling": asdict(sampling)}


def rollout_fingerprint(
    inputs: dict | None, config: RolloutConfig, sampling: SamplingConfig
) -> dict:
    """What decides a labels output: input identity + rollout and sampling settings."""
    return {
        "stage": "rollout",
        **(inputs or {}),
        **config_dict(config),
        "sampling": asdict(sampling),
    }


def run_generation_stage(
    questions: pd.DataFrame,
    generator: Generator,
    pool: GradingPool,
    out: str | Path,
    sampling: SamplingConfig,
    *,
    shard: Shard = Shard(),
    fingerprint: dict | None = None,
    meta: dict | None = None,
    per_part: int = 8,
    overwrite: bool = False,
    on_part_done: Callable[[int], None] | None = None,
    progress: bool = True,
) -> tuple[Path, bool]:
    """``dprm generate`` for one shard: resumable parts of ``per_part`` questions.

    Returns:
        (output path, True if it was already finished).
    """
    by_id = questions.set_index(questions["question_id"].astype(str), drop=False)
    fingerprint = generation_fingerprint(fingerprint, sampling)

    def finish(frame: pd.DataFrame) -> dict:
        stats = {
            "questions": int(frame["question_id"].nunique()),
            "responses": len(frame),
            "correct": int(frame["correct"].sum()),
            "grade_timeouts": int(frame["grade_timeout"].sum()),
            "finish_length": int((frame["finish_reason"] == "length").sum()),
        }
        return {**(meta or {}), "stats": stats}

    journal = parts_dir(output_path(out, shard)) / JOURNAL_FILE
    with request_journal(generator, journal):
        return run_frame_stage(
            list(by_id.index), out, shard, fingerprint,
            lambda ids: generate_trajectories(by_id.loc[ids].reset_index(drop=True), generator, pool, sampling),
            finish, per_part=per_part, overwrite=overwrite, on_part_done=on_part_done, progress=progress,
            desc="generate",
        )  # fmt: skip


def run_rollout_stage(
    trajectories: pd.DataFrame,
    generator: Generator,
    pool: GradingPool,
    out: str | Path,
    config: RolloutConfig,
    sampling: SamplingConfig,
    *,
    shard: Shard = Shard(),
    fingerprint: dict | None = None,
    meta: dict | None = None,
    per_part: int = 8,
    overwrite: bool = False,
    on_part_done: Callable[[int], None] | None = None,
    progress: bool = True,
) -> tuple[Path, bool]:
    """``dprm rollout`` for one shard: labels written with the contract's ``write_labels``."""
    from dprm.data.contract import write_labels

    qids = trajectories["question_id"].astype(str)
    fingerprint = rollout_fingerprint(fingerprint, config, sampling)
    journal = parts_dir(output_path(out, shard)) / JOURNAL_FILE
    with request_journal(generator, journal):
        return run_frame_stage(
            list(dict.fromkeys(qids)), out, shard, fingerprint,
            lambda ids: rollout_labels(trajectories[qids.isin(set(ids))], generator, pool, config, sampling),
            lambda frame: {**(meta or {}), "stats": label_stats(frame)},
            per_part=per_part, overwrite=overwrite, writer=write_labels, on_part_done=on_part_done,
            progress=progress, desc="rollout",
        )  # fmt: skip
