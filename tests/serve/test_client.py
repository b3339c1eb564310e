"""``dprm.client`` against a running ``dprm serve``, and the example best-of-N loop
(examples/serve_bon_loop.py) driven by a scripted sampler."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from dprm.llm.prompts import split_steps

ROOT = Path(__file__).resolve().parents[2]


def test_client_imports_without_torch():
    code = (
        "import sys, dprm.client; print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONPATH": str(ROOT / "src")},
    ).stdout  # fmt: skip
    assert out.strip() == "[]"


def test_client_scores_and_reports_refusals(live_server, arith_rows):
    from dprm.client import Client, ServeError

    client = Client(live_server.url)
    row = arith_rows[0]
    scored = client.score(row["question"], [split_steps(row["solution"])], levels=[0.5])
    assert scored["levels"] == [0.5] and len(scored["solutions"][0]["steps"]) == 4
    with pytest.raises(ServeError) as refused:
        client.score(row["question"], [[]])
    assert refused.value.status == 422 and "solutions[0]" in refused.value.message
    assert refused.value.request_id


def test_client_says_when_nothing_answers():
    import socket

    from dprm.client import Client, ServeError

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = Client(f"http://127.0.0.1:{port}", timeout=2, retries=1)
    assert not client.health()
    with pytest.raises(ServeError) as failed:
        client.info()
    assert failed.value.status == 0 and "127.0.0.1" in failed.value.message


def _example():
    spec = importlib.util.spec_from_file_location(
        "serve_bon_loop", ROOT / "examples" / "serve_bon_loop.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_loop_draws_the_budget_and_picks(live_server, arith_rows):
    """The example's loop with a sampler that writes one wrong and then right solutions: it
    draws exactly the budget the service gives, and the pick is a drawn candidate's answer."""
    from dprm.client import Client

    example = _example()
    row = arith_rows[2]
    wrong = row["solution"].replace(f"\\boxed{{{row['answer']}}}", "\\boxed{-1}")
    calls = []

    def sample(question, n):
        calls.append(n)
        return [wrong if len(calls) == 1 and i == 0 else row["solution"] for i in range(n)]

    client = Client(live_server.url)
    result = example.solve(client, sample, row["question"], "ias", max_draws=64)
    budget = client.allocate(row["question"])["questions"][0]["budget"]
    assert result["decision"] == "stop" and result["budget"] == budget
    assert len(result["texts"]) == budget == sum(calls)
    assert result["pick"]["answer"] in {row["answer"], "-1"}
    assert example.split_steps(row["solution"]) == split_steps(row["solution"])
    assert example.final_answer(row["solution"]) == row["answer"]
