"""``dprm serve`` on a real socket: concurrent clients share PRM forwards, every request is
answered with the numbers a lone request gets, and SIGTERM ends the process cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from dprm.llm.prompts import split_steps

ROOT = Path(__file__).resolve().parents[2]


def test_concurrent_clients_are_batched(live_server, arith_rows, prm):
    from dprm.client import Client

    client = Client(live_server.url, timeout=60)
    before = client.info()["batching"]
    jobs = [(r["question"], [split_steps(r["solution"])]) for r in arith_rows[:24]]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda job: client.score(*job), jobs))
    after = client.info()["batching"]
    assert after["batched_requests"] - before["batched_requests"] == len(jobs)
    batches = after["batches"] - before["batches"]
    assert after["largest_batch"] > 1 and batches < len(jobs), after
    # a request scored in a batch gets what the PRM gives it alone
    for (question, solutions), answer in zip(jobs, answers, strict=True):
        want = prm.score_steps(question, solutions)[0].scores
        got = [s["prm_score"] for s in answer["solutions"][0]["steps"]]
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_a_refused_request_in_a_batch_fails_alone(live_server, arith_rows):
    """A step holding the PRM's step tag (qwen-prm: ``<extra_0>``) cannot be scored: it fails
    its own request with a 422, not the batch it was scored in."""
    from dprm.client import Client, ServeError

    client = Client(live_server.url, timeout=60)
    good = [(r["question"], [split_steps(r["solution"])]) for r in arith_rows[:6]]

    def run(job):
        try:
            return client.score(*job)
        except ServeError as err:
            return err

    bad = ("q", [["a <extra_0> b"]])
    with ThreadPoolExecutor(7) as pool:
        results = list(pool.map(run, [*good[:3], bad, *good[3:]]))
    assert all(isinstance(r, dict) for i, r in enumerate(results) if i != 3)
    assert isinstance(results[3], ServeError) and results[3].status == 422, results[3]


def test_sigterm_ends_the_server_cleanly(arith_prm_dir, calibrator_dir, tmp_path):
    from dprm.client import Client

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dprm.cli", "serve", "--prm", str(arith_prm_dir),
         "--calibrator", str(calibrator_dir), "--port", "0", "--prm-device", "cpu",
         "--threads", "1"],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        line = ""
        while "listening on" not in line:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "server exited before listening"
        url = line.split("listening on ")[1].strip()
        client = Client(url)
        client.wait_ready(60)
        scored = client.score("What is 1 + 1?", [["1 + 1 = 2", "\\boxed{2}"]])
        assert len(scored["solutions"][0]["steps"]) == 2
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "stopped" in err, err
    assert not client.health()
