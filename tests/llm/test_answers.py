"""Canonical final answers of responses (dprm.llm.answers; BoN contract v2)."""

from __future__ import annotations

import pytest

from dprm.llm.answers import canonical_answer, normalise_answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("so the answer is \\boxed{\\dfrac{1}{2}}.", "\\frac{1}{2}"),
        ("\\boxed{x = 3} and later \\boxed{ 4 }", "4"),
        ("nested \\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{\\sqrt{2}}{2}"),
        ("The total is $1,000$.", "1000"),
        ("we get 12.0 apples", "12"),
        ("no answer here", ""),
        ("\\boxed{\\left( 1, 2 \\right)}", "(1,2)"),
    ],
)
def test_canonical_answer(text, answer):
    assert canonical_answer(text) == answer


def test_equal_answers_collide():
    assert normalise_answer(" \\tfrac{3}{4} ") == normalise_answer("\\frac{3}{4}")
    assert normalise_answer("\\text{(A)}") == "(A)"
