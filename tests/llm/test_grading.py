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


def _without_math_verify(monkeypatch):
    """Make math-verify look uninstalled (find_spec says so, as on a machine without it)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "math_verify" else real(name, *a),
    )


def test_a_missing_grader_fails_in_one_line_instead_of_grading_everything_wrong(monkeypatch):
    """Without math-verify the worker would turn every item into False; grading refuses."""
    from dprm.config import ConfigError

    _without_math_verify(monkeypatch)
    with GradingPool(workers=1, timeout=5.0) as pool:
        assert len(pool.grade([], []).correct) == 0  # nothing to grade: nothing needed
        with pytest.raises(ConfigError, match="math-verify") as err:
            pool.grade(["1"], ["$1$"])
        assert "\n" not in str(err.value)


def test_solve_refuses_graded_questions_without_the_grader(tmp_path, monkeypatch, capsys):
    """dprm solve on questions with gold answers: one line, before --out is claimed or any model
    loads (the model directories here are empty)."""
    from dprm.cli import main

    questions = tmp_path / "q.jsonl"
    questions.write_text('{"problem": "1 + 1?", "answer": "2"}\n', encoding="utf-8")
    _without_math_verify(monkeypatch)
    out = tmp_path / "out"
    argv = ["solve", "--mode", "bon", "--questions", str(questions), "--generator",
            str(tmp_path / "no-lm"), "--prm", str(tmp_path / "no-prm"), "--calibrator",
            str(tmp_path / "no-cal"), "--out", str(out), "--quiet"]  # fmt: skip
    for name in ("no-lm", "no-prm", "no-cal"):  # local inputs exist; nothing is loaded
        (tmp_path / name).mkdir()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "math-verify" in err and "\n" not in err, err
    assert not out.exists()
