"""math-verify grading in worker processes with real gold answers and hard timeouts."""

from __future__ import annotations

import os
import threading
import time

import pytest

from dprm.llm.grading import GradingPool, grade_many, grader_info
from dprm.llm.questions import load_questions

from . import tiny_models

SLEEPY = f"{tiny_models.sleepy_grade.__module__}:sleepy_grade"


def _boxed(answer: str) -> str:
    return f"## Step 3: Finish.\n\nTherefore, the final answer is: $\\boxed{{{answer}}}$. I hope it is correct."


def test_every_math500_gold_matches_itself(question_sets, grading_pool):
    golds = load_questions(question_sets / "math500.jsonl.gz")["answer"].tolist()[::10]
    result = grading_pool.grade(golds, [_boxed(g) for g in golds])
    assert result.correct.all(), [g for g, ok in zip(golds, result.correct, strict=True) if not ok]
    assert result.n_timeouts == 0


def test_equivalent_forms_accepted_wrong_answers_rejected(question_sets, grading_pool):
    math500 = load_questions(question_sets / "math500.jsonl.gz").set_index("question_id")["answer"]
    polar = math500["test/precalculus/807.json"]  # \left( 3, \frac{\pi}{2} \right)
    fraction = next(a for a in math500 if a == "\\frac{14}{3}")
    dollars = next(a for a in math500 if a == "\\$18.90")
    aime = load_questions(question_sets / "aime25.jsonl.gz")["answer"]
    cases = [
        (polar, _boxed("(3, \\pi/2)"), True),
        (polar, _boxed("(3, \\pi)"), False),
        (fraction, _boxed("\\dfrac{14}{3}"), True),
        (fraction, _boxed("14/3"), True),
        (fraction, _boxed("\\frac{3}{14}"), False),
        (dollars, _boxed("18.9"), True),
        (dollars, _boxed("19.80"), False),
        (aime.iloc[0], "So the sum of the bases is $70$.", True),
        (aime.iloc[0], _boxed("71"), False),
    ]
    golds, preds, expected = zip(*cases, strict=True)
    assert grading_pool.grade(list(golds), list(preds)).correct.tolist() == list(expected)


def test_integer_golds_reject_off_by_one(question_sets, grading_pool):
    golds = load_questions(question_sets / "aime24.jsonl.gz")["answer"].tolist()
    golds += load_questions(question_sets / "aime25.jsonl.gz")["answer"].tolist()
    assert grade_many(golds, [_boxed(str(int(g) + 1)) for g in golds], pool=grading_pool) == [
        False
    ] * len(golds)


def test_timeout_and_crash_never_hang_or_kill_the_caller():
    items = ["a", "hang", "b", "crash", "c"]
    with GradingPool(workers=2, timeout=1.0, grader=SLEEPY) as pool:
        start = time.monotonic()
        result = pool.grade(items, items)
        elapsed = time.monotonic() - start
        assert result.correct.tolist() == [True, False, True, False, True]
        assert result.timed_out.tolist() == [False, True, False, False, False]
        assert result.error.tolist() == [False, False, False, True, False]
        assert elapsed < 30
        # the pool keeps working after replacing the dead workers
        assert pool.grade(["x", "y"], ["x", "z"]).correct.tolist() == [True, False]
        assert pool.total_timeouts == 1 and pool.total_errors == 1
    assert os.getpid() > 0  # still here


def test_timeout_works_outside_the_main_thread():
    out = {}

    def run():
        with GradingPool(workers=1, timeout=1.0, grader=SLEEPY) as pool:
            out["result"] = pool.grade(["q", "q"], ["hang", "q"])

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert out["result"].correct.tolist() == [False, True]
    assert out["result"].n_timeouts == 1


def test_mismatched_lengths_and_bad_settings():
    with pytest.raises(ValueError, match="gold answers"):
        GradingPool(workers=1).grade(["1"], [])
    with pytest.raises(ValueError):
        GradingPool(workers=0)
    assert grader_info()["grader"] == "math-verify"
    assert grader_info()["grader_version"]
