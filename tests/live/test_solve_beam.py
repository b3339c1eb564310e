"""``dprm solve --mode beam``: IAS-of-K / IAS-of-M beam search and its fixed-width baseline."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

import numpy as np
import pytest


@dataclass(frozen=True)
class FakeCompletion:
    text: str
    n_tokens: int
    finish_reason: str
    stop_reason: str | None


class ScriptedGenerator:
    """Steps ``## Step k: ...`` that end at the separator; from step 3 on, half end the answer.

    Deterministic in the per-prompt seed, so both searches see reproducible trees. Reports the
    vLLM-style ``stop_reason`` (the separator, or None at the end of the answer).
    """

    backend, model_name = "scripted", "scripted-qwen"

    def generate(self, prompts, n, *, seeds, stop=None, **_):
        assert stop == ["\n\n"]
        out = []
        for prompt, seed in zip(prompts, seeds, strict=True):
            rng = random.Random(seed)
            k = prompt.rsplit("<|im_start|>assistant\n", 1)[-1].count("## Step") + 1
            row = []
            for _ in range(n):
                if k >= 3 and rng.random() < 0.5:
                    text = f"So the answer is $\\boxed{{{rng.choice([6, 7, 8])}}}$."
                    row.append(FakeCompletion(text, 9, "stop", None))
                else:
                    text = f"## Step {k}: " + " ".join(
                        rng.choice(["add", "3", "4", "7", "so"]) for _ in range(4)
                    )
                    row.append(FakeCompletion(text, 7, "stop", "\n\n"))
            out.append(row)
        return out


def _config(questions_file, model_dirs, calibrator, **changes):
    from dprm.live import SolveConfig

    settings = dict(
        mode="beam", questions=str(questions_file), generator=str(model_dirs["lm"]),
        prm=str(model_dirs["prm"]), calibrator=str(calibrator), C=0.9, n_max=4, beam_width=2,
        baseline_n=4, max_new_tokens=32, freq=1, max_steps=4, batch_questions=4,
    )  # fmt: skip
    settings.update(changes)
    return SolveConfig(**settings)


def _records(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def park_k(lower, C, m_max, k_max, rule):
    """The reference's determine_K loop, with the budget rule of docs/design.md §4 capped at N = K_MAX M_MAX."""
    k = 0
    for k, value in enumerate(sorted(lower, reverse=True), start=1):
        if k == k_max or k * m_max >= rule([value], C, k_max * m_max):
            break
    return k


def park_m(lower_kept, C, m_max, k_max, rule):
    return min(math.ceil(rule([min(lower_kept)], C, k_max * m_max) / k_max), m_max)


def check_search(search, *, n, m_max, C, adaptive, rule, max_steps):
    """Every logged step obeys the rules; returns the number of pruning steps."""
    k_max = n // m_max
    steps = search["steps"]
    assert steps[0]["step"] == 0 and steps[0]["M"] == n and steps[0]["beams"] == 1
    pruned = 0
    for entry in steps:
        assert entry["samples"] == entry["M"] * entry["beams"] and entry["beams"] >= 1
        assert entry["step"] < max_steps
        if entry["step"] == 0:
            continue
        if entry["K"] is None:
            assert entry["M"] == 1
            continue
        pruned += 1
        lower, rank = entry["lower"], entry["rank"]
        kept = list(np.argsort(-np.asarray(rank), kind="stable")[: entry["K"]])
        assert entry["kept"] == kept
        if adaptive:
            assert entry["K"] == park_k(lower, C, m_max, k_max, rule)
            assert entry["M"] == park_m([lower[i] for i in kept], C, m_max, k_max, rule)
        else:
            assert entry["K"] == min(k_max, len(lower)) and entry["M"] == m_max
    assert search["samples"] == sum(e["samples"] for e in steps)
    assert search["tokens"] == sum(e["tokens"] for e in steps)
    return pruned


def test_determine_k_and_m_by_hand():
    from dprm.live import determine_k, determine_m

    # N(0.9, 0.99) = 2: one beam of 8 samples covers it
    assert determine_k(np.array([0.1, 0.9, 0.5]), 0.99, 8, 8) == 1
    # N(0.05, 0.99) = 90 > 64: every k short of K_MAX fails, so K = K_MAX
    assert determine_k(np.full(10, 0.05), 0.99, 8, 8) == 8
    # fewer candidates than K_MAX and none enough: keep them all
    assert determine_k(np.array([0.05, 0.05]), 0.99, 8, 8) == 2
    # N(0.3, 0.99) = 13 -> ceil(13 / K_MAX = 8) = 2 samples per beam (K_MAX, not K)
    assert determine_m(np.array([0.3, 0.6]), 0.99, 8, 8) == 2
    assert determine_m(np.array([0.01]), 0.99, 8, 8) == 8  # capped at M_MAX
    # on the boundary 1 - 0.5^2 = 0.75 >= C: N = 2, so with K_MAX = 1 two samples per beam
    assert determine_m(np.array([0.5]), 0.75, 8, 1) == 2


def test_scripted_search_prunes_by_the_ias_rules(
    tmp_path, questions_file, model_dirs, calibrator_dirs, load_cprm, grading_pool, budget_rule
):
    from dprm.live import run_beam

    # budget from the median (the reference's lb_idx=1): the fixture calibrator's Q(0.1) of step
    # states is ~0, which would always ask for full width
    config = _config(questions_file, model_dirs, calibrator_dirs["mono"], C=0.8, n_max=8, beam_width=2,
                     baseline_n=8, freq=2, max_steps=6, lower_level=0.5)  # fmt: skip
    cprm = load_cprm(calibrator_dirs["mono"])
    summary = run_beam(
        config, cprm, ScriptedGenerator(), tmp_path, progress=False, pool=grading_pool
    )
    records = _records(tmp_path / "beam.jsonl")
    assert len(records) == 4
    pruned = ks = ms = 0
    for r in records:
        pruned += check_search(r, n=8, m_max=2, C=0.8, adaptive=True, rule=budget_rule, max_steps=6)
        check_search(
            r["baseline"], n=8, m_max=2, C=0.8, adaptive=False, rule=budget_rule, max_steps=6
        )
        ks += sum(e["K"] is not None and e["K"] < 4 for e in r["steps"])
        ms += sum(e["K"] is not None and e["M"] < 2 for e in r["steps"])
        assert r["chosen"]["text"].startswith("## Step 1:")
    assert pruned >= 4 and ks > 0 and ms > 0, (
        "the scripted trees should reach adaptive pruning steps"
    )
    assert summary["adaptive"]["samples"] == sum(r["samples"] for r in records)
    assert summary["baseline"]["samples"] == sum(r["baseline"]["samples"] for r in records)
    assert summary["adaptive"]["samples"] < summary["baseline"]["samples"]


def test_live_beam_search_on_the_tiny_lm(
    tmp_path,
    prm,
    questions_file,
    model_dirs,
    calibrator_dirs,
    load_cprm,
    generator,
    grading_pool,
    budget_rule,
):
    from dprm.live import run_beam
    from dprm.llm.grading import verify_answer
    from dprm.llm.prompts import split_steps
    from dprm.llm.questions import load_questions

    config = _config(questions_file, model_dirs, calibrator_dirs["qr"], rank_by="mean")
    cprm = load_cprm(calibrator_dirs["qr"])
    summary = run_beam(config, cprm, generator, tmp_path, progress=False, pool=grading_pool)
    records = _records(tmp_path / "beam.jsonl")
    questions = load_questions(questions_file).set_index("question_id")
    assert [r["question_id"] for r in records] == questions.index.tolist()
    for r in records:
        for search, adaptive in ((r, True), (r["baseline"], False)):
            check_search(
                search, n=4, m_max=2, C=0.9, adaptive=adaptive, rule=budget_rule, max_steps=4
            )
            chosen = search["chosen"]
            assert chosen["finish"] in ("boxed", "eos", "length", "max_tokens", None)
            # the logged values are the calibrated PRM's on the chosen trajectory
            steps = split_steps(chosen["text"])
            out = prm.score_steps(questions.loc[r["question_id"], "question"], [steps])[0]
            assert chosen["prm_score"] == pytest.approx(float(out.scores[-1]), abs=1e-6)
            hidden, score = out.hidden[-1:], out.scores[-1:]
            lower = cprm.calibrator.quantiles(hidden, [0.1], score)[0, 0]
            assert chosen["lower"] == pytest.approx(float(lower), abs=1e-6)
            mean = cprm.calibrator.point_estimate(hidden, score)[0]
            assert chosen["rank_score"] == pytest.approx(float(mean), abs=1e-6)
            gold = questions.loc[r["question_id"], "answer"]
            assert search["correct"] == verify_answer(gold, chosen["text"])
        assert r["budget"] == r["samples"]
    assert summary["adaptive"]["accuracy"] == pytest.approx(
        np.mean([r["correct"] for r in records])
    )
    assert summary["adaptive"]["tokens"] == sum(r["tokens"] for r in records)
    # every final pick graded (adaptive and baseline), no grader failure on this run
    assert all(s["grade_failed"] is False for r in records for s in (r, r["baseline"]))
    assert summary["grading"] == {"candidates": 2 * len(records), "failed": 0}
