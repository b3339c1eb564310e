"""Question loaders on the real question sets packaged with dprm."""

from __future__ import annotations

import json

import pytest

from dprm.io import DataError
from dprm.llm.questions import extract_boxed, load_questions, read_questions, write_questions


def test_math500_uses_answer_field_and_unique_id(question_sets):
    frame = load_questions(question_sets / "math500.jsonl.gz")
    assert len(frame) == 500
    assert list(frame.columns[:3]) == ["question_id", "question", "answer"]
    assert frame["question_id"].iloc[0] == "test/precalculus/807.json"
    assert frame["answer"].iloc[0] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert frame["question_id"].is_unique


def test_full_math_gold_comes_from_the_last_boxed(question_sets):
    frame = load_questions(question_sets / "math.jsonl.gz")
    assert len(frame) == 5000
    assert frame["question_id"].iloc[0] == "math/0"
    assert frame["answer"].iloc[0] == "2"  # "... has $\boxed{2}$ vertical asymptotes"
    # Where MATH-500 holds the same problem, its curated answer agrees with our extraction.
    math500 = load_questions(question_sets / "math500.jsonl.gz").set_index("question")["answer"]
    common = frame[frame["question"].isin(math500.index)]
    assert len(common) > 50
    same = (
        common["answer"].str.replace(" ", "")
        == common["question"].map(math500).str.replace(" ", "")
    ).mean()
    assert same > 0.95


def test_park_every_tenth_subset(question_sets):
    frame = load_questions(question_sets / "math.jsonl.gz", every=10)
    assert len(frame) == 500
    assert frame["question_id"].tolist()[:3] == ["math/0", "math/10", "math/20"]
    assert (
        load_questions(question_sets / "math.jsonl.gz", every=10, limit=7)["question_id"].iloc[-1]
        == "math/60"
    )


def test_aime_sets(question_sets):
    aime24 = load_questions(question_sets / "aime24.jsonl.gz")
    aime25 = load_questions(question_sets / "aime25.jsonl.gz")
    assert len(aime24) == 30 and len(aime25) == 30
    assert aime24["question_id"].iloc[0] == "aime24/60" and aime24["answer"].iloc[0] == "204"
    assert aime25["question_id"].tolist()[:2] == ["aime25/0", "aime25/1"]
    assert aime25["answer"].iloc[0] == "70"


def test_round_trip_jsonl_and_parquet(question_sets, tmp_path):
    frame = load_questions(question_sets / "aime25.jsonl.gz", limit=5)
    for name in ("q.jsonl", "q.parquet"):
        write_questions(tmp_path / name, frame)
        back = read_questions(tmp_path / name)
        assert back[["question_id", "question", "answer"]].equals(
            frame[["question_id", "question", "answer"]]
        )


def test_bad_rows_name_file_and_row(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"problem": "1+1?", "answer": "2"})
        + "\n"
        + json.dumps({"problem": "x?", "solution": "no box"})
        + "\n"
    )
    with pytest.raises(DataError, match=r"bad\.jsonl.*row 1.*boxed"):
        load_questions(path)
    path.write_text(json.dumps({"answer": "2"}) + "\n")
    with pytest.raises(DataError, match=r"row 0.*'problem' or 'question'"):
        load_questions(path)
    with pytest.raises(DataError, match="not found"):
        load_questions(tmp_path / "missing.jsonl")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $\\boxed{\\frac{1}{2}}$", "\\frac{1}{2}"),
        ("\\boxed{a} then \\boxed{b{c}}", "b{c}"),
        ("\\boxed 5$", "5"),
        ("\\fbox{x^{2}}", "x^{2}"),
        ("no answer", None),
        ("\\boxed{unclosed", None),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected
