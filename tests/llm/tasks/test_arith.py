"""The arithmetic task: deterministic draws, difficulty knobs, exact step checks, grading."""

from __future__ import annotations

import pytest

from dprm.llm.prompts import split_steps
from dprm.llm.questions import extract_boxed, load_questions, packaged_path
from dprm.llm.tasks.arith import (
    SPLIT_SPECS,
    ArithSpec,
    check_steps,
    make_problem,
    make_set,
    parse_step,
    step_values,
)
from dprm.llm.tasks.arith_sets import SET_SIZES, set_bytes


def test_same_seed_same_problems_and_index_independent_of_count():
    spec = SPLIT_SPECS["id"]
    assert make_set(spec, 5, seed=3, prefix="a") == make_set(spec, 5, seed=3, prefix="a")
    assert make_set(spec, 8, seed=3, prefix="a")[:5] == make_set(spec, 5, seed=3, prefix="a")
    assert make_set(spec, 5, seed=3, prefix="a") != make_set(spec, 5, seed=4, prefix="a")


@pytest.mark.parametrize(
    "spec",
    [
        ArithSpec(min_steps=1, max_steps=1, digits=1, operations=("+",)),
        ArithSpec(min_steps=4, max_steps=5, digits=3, operations=("+", "-", "*")),
        ArithSpec(min_steps=2, max_steps=2, digits=2, operations=("-", "*")),
    ],
)
def test_knobs_bound_steps_digits_and_operations(spec):
    for index in range(60):
        problem = make_problem(spec, 0, index)
        assert spec.min_steps <= len(problem.ops) <= spec.max_steps
        assert len(str(problem.start)) == spec.digits
        for op, x in problem.ops:
            assert op in spec.operations
            if op == "*":
                assert 2 <= x <= 9
            else:
                assert len(str(x)) <= spec.digits
        assert all(v >= 0 for v in step_values(problem.start, problem.ops))


def test_bad_knobs_fail():
    with pytest.raises(ValueError, match="steps"):
        ArithSpec(min_steps=3, max_steps=2)
    with pytest.raises(ValueError, match="operations"):
        ArithSpec(operations=("/",))
    with pytest.raises(ValueError, match="operations"):
        ArithSpec(operations=("-",))


def test_solution_steps_parse_and_check_and_box_the_answer():
    problem = make_problem(SPLIT_SPECS["ood"], 1, 7)
    steps = split_steps(problem.solution())
    assert len(steps) == len(problem.ops) + 1
    assert check_steps(problem.start, problem.ops, steps) == [True] * len(steps)
    assert extract_boxed(steps[-1]) == str(problem.answer)
    a, op, x, result = parse_step(steps[0])
    assert (a, op, x) == (problem.start, *problem.ops[0])
    # a dropped carry in step 1 makes every later step off-track, even if later arithmetic is right
    wrong = list(steps)
    wrong[0] = steps[0].rsplit("=", 1)[0] + f"= {result + 10}"
    assert check_steps(problem.start, problem.ops, wrong) == [False] * len(steps)
    # a wrong final answer only fails the last step; a missing step fails from there on
    last = list(steps)
    last[-1] = last[-1].replace(f"{{{problem.answer}}}", f"{{{problem.answer + 1}}}")
    assert check_steps(problem.start, problem.ops, last) == [True] * (len(steps) - 1) + [False]
    assert check_steps(problem.start, problem.ops, [steps[0], steps[-1]])[-1] is False


def test_packaged_sets_equal_a_fresh_draw_and_load_by_name():
    for split, size in SET_SIZES.items():
        assert packaged_path(f"arith-{split}").read_bytes() == set_bytes(split)
        frame = load_questions(f"arith-{split}")
        assert len(frame) == size
        assert frame["question_id"].is_unique


def test_answers_grade_through_math_verify():
    pytest.importorskip("math_verify")
    from dprm.llm.grading import verify_answer

    frame = load_questions("arith-id", limit=20)
    for row in frame.itertuples():
        problem_answer = int(row.answer)
        right = (
            f"Therefore, the final answer is: $\\boxed{{{problem_answer}}}$. I hope it is correct."
        )
        wrong = right.replace(f"{{{problem_answer}}}", f"{{{problem_answer + 1}}}")
        assert verify_answer(row.answer, right)
        assert not verify_answer(row.answer, wrong)


def test_packaged_splits_share_no_question_and_id_mixes_easy_and_hard():
    from dprm.llm.tasks.arith_sets import packaged_questions, set_rows

    questions = {split: {r["question"] for r in set_rows(split)} for split in SET_SIZES}
    assert sum(map(len, questions.values())) == sum(SET_SIZES.values())  # no repeats anywhere
    assert len(packaged_questions()) == sum(SET_SIZES.values())
    assert SET_SIZES["id"] >= 400 and SET_SIZES["ood"] >= 200
    starts = [r["start"] for r in set_rows("id")]
    one_digit = sum(s < 10 for s in starts) / len(starts)
    assert 0.3 < one_digit < 0.7  # per question one or two digits, about half each
    ood_steps = {len(r["ops"]) for r in set_rows("ood")}
    assert min(ood_steps) > max(len(r["ops"]) for r in set_rows("id"))


def test_max_digits_draws_once_per_question_and_leaves_fixed_streams_alone():
    mixed = ArithSpec(min_steps=3, max_steps=3, digits=1, max_digits=2)
    for index in range(30):
        problem = make_problem(mixed, 5, index)
        operands = [problem.start] + [x for op, x in problem.ops if op == "+"]
        digits = {len(str(x)) for x in operands}
        assert len(digits) == 1, problem  # one digit count for the whole question
    fixed = ArithSpec(min_steps=2, max_steps=3, digits=1)
    # a spec without max_digits draws as before the knob existed (the former ID set's first
    # question, seed 20261127 + 1_000_000)
    assert make_problem(fixed, 21261127, 0).question == (
        "Eva has 2 stamps. Eva gives away 2. Eva finds 4 more. Eva gets 2 more. "
        "How many stamps does Eva have now?"
    )
    with pytest.raises(ValueError, match="max_digits"):
        ArithSpec(digits=2, max_digits=1)
