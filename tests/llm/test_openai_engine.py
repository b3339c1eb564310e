"""``--backend openai`` against a fake OpenAI-compatible server on 127.0.0.1 (tests/llm/fake_openai.py).

What is checked: the requests carry exactly the prompts and seeds the transformers backend
samples from (both stages, through the same stage code), every sampling setting, the context
budget; retries on 429 / 5xx / dropped connections with one line per failure naming the URL and
status, no retry on other 4xx; at most ``max_in_flight`` requests open; the API key sent and
never printed; a resumed stage never sends a request twice (finished parts and, inside a part,
the request journal); the CLI flags and their one-line errors.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dprm.config import ConfigError
from dprm.llm.generate import TransformersGenerator, load_generator
from dprm.llm.openai_engine import OpenAIGenerator, RetryPolicy, ServerError
from dprm.llm.rollout import (
    RolloutConfig,
    SamplingConfig,
    run_generation_stage,
    run_rollout_stage,
)

from .fake_openai import FakeOpenAIServer

SAMPLING = SamplingConfig(n=3, max_new_tokens=24, seed=5)


@pytest.fixture
def fake(lm_dir):
    with FakeOpenAIServer(str(lm_dir)) as server:
        yield server


def _served(fake, lm_dir, **options) -> OpenAIGenerator:
    options = {"backoff_s": 0.001, **options}
    return load_generator("openai", str(lm_dir), base_url=fake.base_url, **options)


class Recording:
    """Records what a backend's ``_sample`` is asked for (prompts, seeds, options)."""

    def __init__(self, monkeypatch, cls):
        self.calls: list[tuple[list[str], list[int], object]] = []
        inner = cls._sample

        def spy(backend, prompts, n, seeds, options):
            self.calls.append((list(prompts), list(seeds), options))
            return inner(backend, prompts, n, seeds, options)

        monkeypatch.setattr(cls, "_sample", spy)

    def prompts_and_seeds(self) -> list[tuple[str, int]]:
        return [
            (p, s) for prompts, seeds, _ in self.calls for p, s in zip(prompts, seeds, strict=True)
        ]


# ----------------------------------------------------------------------------- same requests
def test_requests_carry_the_transformers_backends_prompts_and_seeds(
    monkeypatch, generator, toy_questions, toy_trajectories, grading_pool, fake, lm_dir, tmp_path
):
    """Both stages: the served backend is asked for the very strings (chat template rendered
    here) and seeds the transformers backend samples from, prompt by prompt."""
    seen = Recording(monkeypatch, TransformersGenerator)
    served = _served(fake, lm_dir)
    config = RolloutConfig(max_steps=2)
    for name, backend in (("hf", generator), ("api", served)):
        run_generation_stage(
            toy_questions, backend, grading_pool, tmp_path / f"{name}-traj.parquet", SAMPLING,
            progress=False,
        )  # fmt: skip
        run_rollout_stage(
            toy_trajectories, backend, grading_pool, tmp_path / f"{name}-labels.parquet", config,
            SAMPLING, progress=False,
        )  # fmt: skip
    expected = seen.prompts_and_seeds()
    sent = [(b["prompt"], b["seed"]) for b in fake.bodies]
    assert len(expected) > len(toy_questions)  # first pass and rollout prompts
    assert sorted(sent) == sorted(expected)  # requests in flight arrive in any order
    assert any("<|im_start|>assistant\n" in p for p, _ in sent)  # rendered on our side
    # the transformers backend tokenises the same string the server gets
    for prompt, _ in expected[:3]:
        assert served.tokenizer(prompt).input_ids == generator.tokenizer(prompt).input_ids


def test_request_body_holds_every_sampling_setting(fake, lm_dir):
    served = _served(fake, lm_dir)
    served.generate(
        ["p"], 2, temperature=0.3, top_p=0.9, max_new_tokens=17, seeds=[11], stop=["\n\n"],
        top_k=5, repetition_penalty=1.1,
    )  # fmt: skip
    body = fake.bodies[-1]
    assert body == {
        "model": str(lm_dir),
        "prompt": "p",
        "n": 2,
        "max_tokens": 17,
        "temperature": 0.3,
        "top_p": 0.9,
        "seed": 11,
        "logprobs": 0,
        "stop": ["\n\n"],
        "top_k": 5,
        "repetition_penalty": 1.1,
        "stop_token_ids": served.stop_ids,
    }
    assert served.stop_ids == TransformersGenerator(str(lm_dir), device="cpu").stop_ids
    served.generate(["p"], 1, seeds=[1])  # defaults: no top_k, no repetition penalty sent
    assert "top_k" not in fake.bodies[-1] and "repetition_penalty" not in fake.bodies[-1]


def test_completions_are_ordered_counted_and_carry_logprobs_when_asked(fake, lm_dir):
    served = _served(fake, lm_dir, logprobs=2)
    [outs] = served.generate(["q"], 4, seeds=[3], max_new_tokens=50)
    expected = fake.completion({"prompt": "q", "seed": 3, "n": 4, "max_tokens": 50, "logprobs": 2})
    by_index = sorted(expected["choices"], key=lambda c: c["index"])
    assert [o.text for o in outs] == [c["text"] for c in by_index]
    assert [o.n_tokens for o in outs] == [len(c["logprobs"]["tokens"]) for c in by_index]
    assert all(o.logprobs == (-0.5,) * o.n_tokens for o in outs)
    assert fake.bodies[-1]["logprobs"] == 2
    assert _served(fake, lm_dir).generate(["q"], 1, seeds=[3])[0][0].logprobs is None


def test_max_tokens_fit_the_served_context(lm_dir):
    with FakeOpenAIServer(str(lm_dir), max_model_len=40) as fake:
        served = _served(fake, lm_dir)
        assert served.max_model_len == 40
        short, long = "a b", "word " * 60
        outs = served.generate([short, long], 2, max_new_tokens=50, seeds=[1, 2])
        [body] = fake.bodies  # the prompt that fills the context is not sent
        assert body["max_tokens"] == 40 - len(served.tokenizer(short).input_ids)
        assert [(o.text, o.finish_reason) for o in outs[1]] == [("", "length")] * 2


def test_stop_strings_are_cut_if_the_server_returns_them(fake, lm_dir):
    served = _served(fake, lm_dir)
    [[first, *_]] = served.generate(["q"], 2, seeds=[1], stop=["sample"])
    assert first.text == "## Step 1: Add.\n\n" and first.stop_reason == "sample"
    assert first.finish_reason == "stop"


# ----------------------------------------------------------------------------- failures
def test_retries_429_5xx_and_dropped_connections_one_line_each(fake, lm_dir, capfd):
    served = _served(fake, lm_dir, max_in_flight=1)
    fake.faults.extend(["429", "500", "drop", "503"])
    [outs] = served.generate(["q"], 2, seeds=[1])
    assert len(outs) == 2 and len(fake.bodies) == 5 and len(fake.answered) == 1
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 4
    url = f"{fake.base_url}/completions"
    assert all(line.startswith(f"openai: POST {url}: ") for line in lines)
    for line, status in zip(
        lines, ["HTTP 429", "HTTP 500", "connection error", "HTTP 503"], strict=True
    ):
        assert status in line
    assert "attempt 1/6" in lines[0] and "attempt 4/6" in lines[3]


def test_gives_up_after_max_attempts_naming_url_and_status(fake, lm_dir):
    served = _served(fake, lm_dir, max_attempts=3)
    fake.faults.extend(["500"] * 3)
    with pytest.raises(ServerError) as err:
        served.generate(["q"], 1, seeds=[1])
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{fake.base_url}/completions: POST HTTP 500: injected 500")
    assert message.endswith("gave up after 3 attempts")
    assert len(fake.bodies) == 3


def test_other_4xx_stop_at_once(fake, lm_dir):
    served = _served(fake, lm_dir)
    fake.faults.append("400")
    with pytest.raises(ServerError, match=r"/v1/completions: POST HTTP 400: injected 400$"):
        served.generate(["q"], 1, seeds=[1])
    assert len(fake.bodies) == 1


def test_backoff_doubles_with_full_jitter_and_honours_retry_after():
    import random

    policy = RetryPolicy(max_attempts=6, base_s=1.0, cap_s=5.0)
    rng = random.Random(0)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (6, 5.0)]:
        delays = [policy.delay(attempt, rng, None) for _ in range(200)]
        assert min(delays) >= 0.0 and max(delays) <= ceiling
        assert max(delays) > 0.8 * ceiling  # spread over the whole window (full jitter)
    assert policy.delay(1, rng, 2.5) == 2.5 and policy.delay(1, rng, 60.0) == 5.0


def test_requests_in_flight_are_bounded(lm_dir):
    with FakeOpenAIServer(str(lm_dir), delay_s=0.05) as fake:
        served = _served(fake, lm_dir, max_in_flight=3)
        outs = served.generate([f"q{i}" for i in range(12)], 1, seeds=list(range(12)))
        assert len(outs) == 12 and len(fake.answered) == 12
        assert fake.peak_open == 3  # overlapped, never more than three


def test_model_not_served_is_one_line(fake, lm_dir):
    with pytest.raises(ServerError, match=r"/v1/models: does not serve model 'other'; it serves"):
        load_generator("openai", "other", base_url=fake.base_url)


def test_unreachable_server_names_the_url(lm_dir):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ServerError, match=rf"127.0.0.1:{port}/v1/models: GET connection error"):
        load_generator(
            "openai", str(lm_dir), base_url=f"http://127.0.0.1:{port}/v1", max_attempts=2,
            backoff_s=0.001,
        )  # fmt: skip


def test_api_key_is_sent_and_never_printed(fake, lm_dir, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_KEY", "sk-secret-123")
    served = _served(fake, lm_dir, api_key_env="FAKE_KEY")
    fake.faults.append("500")
    served.generate(["q"], 1, seeds=[1])
    assert {h.get("Authorization") for h in fake.headers} == {"Bearer sk-secret-123"}
    printed = capfd.readouterr()
    assert "sk-secret" not in printed.err + printed.out
    monkeypatch.delenv("FAKE_KEY")
    with pytest.raises(ConfigError, match="--api-key-env FAKE_KEY: that environment variable"):
        _served(fake, lm_dir, api_key_env="FAKE_KEY")


# ----------------------------------------------------------------------------- resume
class Killed(RuntimeError):
    pass


def test_resumed_stage_never_sends_a_request_twice(grading_pool, fake, lm_dir, tmp_path):
    """Killed after a finished part, then mid-part (the server fails): the rerun sends only the
    requests never answered, and writes what an uninterrupted run writes."""
    toy_questions = pd.DataFrame(
        {
            "question_id": [f"toy/{i}" for i in range(5)],
            "question": [f"What is {i} + 4?" for i in range(5)],
            "answer": [str(i + 4) for i in range(5)],
        }
    )
    served = _served(fake, lm_dir, max_in_flight=1, max_attempts=1)
    reference, _ = run_generation_stage(
        toy_questions, served, grading_pool, tmp_path / "ref.parquet", SAMPLING, per_part=2,
        progress=False,
    )  # fmt: skip
    n_requests = len(fake.answered)
    assert n_requests == len(toy_questions) == 5
    fake.bodies.clear(), fake.answered.clear()

    out = tmp_path / "traj.parquet"

    def kill(index):
        raise Killed(index)

    with pytest.raises(Killed):  # part 0 finished, then killed
        run_generation_stage(
            toy_questions, served, grading_pool, out, SAMPLING, per_part=2, progress=False,
            on_part_done=kill,
        )  # fmt: skip
    assert len(fake.answered) == 2
    fake.faults.extend(["ok", "500"])  # the 2nd request of part 1 fails: killed mid-part
    with pytest.raises(ServerError, match="HTTP 500"):
        run_generation_stage(
            toy_questions, served, grading_pool, out, SAMPLING, per_part=2, progress=False
        )
    assert len(fake.answered) == 3  # part 0 (2) + the first request of part 1
    journal = tmp_path / ".traj.parquet.parts" / "requests.jsonl"
    assert len(journal.read_text().splitlines()) == 3  # every answer so far, part 0's too
    path, _ = run_generation_stage(
        toy_questions, served, grading_pool, out, SAMPLING, per_part=2, progress=False
    )
    answered = [json.dumps(b, sort_keys=True) for b in fake.answered]
    assert len(answered) == n_requests == len(set(answered))  # each request paid for once
    pd.testing.assert_frame_equal(pd.read_parquet(path), pd.read_parquet(reference))
    assert not journal.parent.exists()  # the work directory (and journal) is gone when done


# ----------------------------------------------------------------------------- CLI
def _cli(argv):
    from dprm.cli import main

    return main(argv)


def _generate_args(fake, lm_dir, questions, out, *extra):
    return [
        "generate", "--questions", str(questions), "--model", str(lm_dir), "--out", str(out),
        "--backend", "openai", "--base-url", fake.base_url, "--n", "2", "--max-new-tokens", "16",
        "--grader-workers", "1", "--no-progress", "--quiet", *extra,
    ]  # fmt: skip


@pytest.fixture
def questions_file(toy_questions, tmp_path):
    path = tmp_path / "questions.jsonl"
    toy_questions[["question_id", "question", "answer"]].to_json(path, orient="records", lines=True)
    return path


def test_cli_generate_with_a_served_model(fake, lm_dir, questions_file, tmp_path):
    out = tmp_path / "traj.parquet"
    argv = _generate_args(fake, lm_dir, questions_file, out, "--max-in-flight", "2")
    assert _cli(argv) == 0
    frame = pd.read_parquet(out)
    meta = json.loads((tmp_path / "traj.parquet.meta.json").read_text())
    assert meta["backend"] == "openai" and meta["generator"] == str(lm_dir)
    assert len(frame) == 2 * len(fake.answered) and frame["n_tokens"].gt(0).all()
    assert frame["correct"].any()  # the fake's boxed answers are graded
    sent = len(fake.bodies)
    assert _cli(argv) == 0 and len(fake.bodies) == sent  # finished: skipped, nothing sent


def test_cli_server_failure_is_one_line_exit_2(fake, lm_dir, questions_file, tmp_path, capsys):
    fake.faults.extend(["400"])
    argv = _generate_args(fake, lm_dir, questions_file, tmp_path / "t.parquet")
    assert _cli(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"dprm generate: error: {fake.base_url}/completions: POST HTTP 400: injected 400"
    ]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--backend", "openai"], "--backend openai needs --base-url URL"),
        (["--backend", "openai", "--base-url", "localhost:8000"], "expected an http(s) URL"),
        (["--base-url", "http://127.0.0.1:1/v1"], "--base-url: only --backend openai reads"),
        (["--backend", "openai", "--base-url", "http://x/v1", "--max-in-flight", "0"],
         "--max-in-flight 0: expected >= 1"),
        (["--backend", "openai", "--base-url", "http://x/v1", "--api-key-env", "NO_SUCH_KEY_VAR"],
         "--api-key-env NO_SUCH_KEY_VAR: that environment variable is not set"),
    ],
)  # fmt: skip
def test_cli_flag_errors_are_one_line(extra, message, lm_dir, questions_file, tmp_path, capsys):
    out = tmp_path / "t.parquet"
    argv = ["generate", "--questions", str(questions_file), "--model", str(lm_dir),
            "--out", str(out), "--quiet", *extra]  # fmt: skip
    assert _cli(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert message in line
    assert not out.exists() and not (tmp_path / ".t.parquet.parts").exists()
