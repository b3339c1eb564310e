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


# -- packaged sets and math500train (offline: a fake `datasets` module) -----------------------
class _FakeDatasets:
    """``load_dataset`` over in-memory splits; records the calls; ``fail`` ids raise."""

    def __init__(self, splits: dict, fail: tuple[str, ...] = ()):
        self.splits, self.fail, self.calls = splits, fail, []

    def load_dataset(self, hub_id, config=None, split=None):
        self.calls.append((hub_id, config, split))
        if hub_id in self.fail:
            raise ConnectionError(f"{hub_id} is gone")
        return self.splits[(hub_id, config, split)]


def _train_rows(prefix: str, n: int) -> list[dict]:
    return [{"problem": f"{prefix}-{i}", "solution": f"so $\\boxed{{{i}}}$"} for i in range(n)]


def test_packaged_sets_need_no_network(monkeypatch, tmp_path):
    import sys

    from dprm.cli import main

    monkeypatch.setitem(sys.modules, "datasets", None)  # importing it fails
    assert main(["questions", "math500", "--out", str(tmp_path / "q.jsonl")]) == 0
    frame = load_questions(tmp_path / "q.jsonl")
    assert len(frame) == 500 and frame["question_id"].iloc[0] == "test/precalculus/807.json"
    assert len(load_questions("math-park")) == 500 and len(load_questions("aime25")) == 30


def test_math500train_every_15th_of_the_train_split(monkeypatch):
    import sys

    fake = _FakeDatasets({("hendrycks/competition_math", None, "train"): _train_rows("p", 7500)})
    monkeypatch.setitem(sys.modules, "datasets", fake)
    frame = load_questions("math500train")
    assert len(frame) == 500 and fake.calls == [("hendrycks/competition_math", None, "train")]
    assert frame["question"].tolist() == [f"p-{i}" for i in range(0, 7500, 15)]
    assert frame["question_id"].iloc[:3].tolist() == [
        "math-train/0",
        "math-train/15",
        "math-train/30",
    ]
    assert frame["answer"].iloc[1] == "15"


def test_math500train_falls_back_to_subjects_in_alphabetical_order(monkeypatch):
    import sys

    from dprm.llm.questions import MATH_SUBJECTS

    sizes = [1071] * 6 + [7500 - 6 * 1071]
    splits = {("EleutherAI/hendrycks_math", s, "train"): _train_rows(s, n)
              for s, n in zip(MATH_SUBJECTS, sizes, strict=True)}  # fmt: skip
    fake = _FakeDatasets(splits, fail=("hendrycks/competition_math",))
    monkeypatch.setitem(sys.modules, "datasets", fake)
    frame = load_questions("math500train")
    subjects = [c[1] for c in fake.calls[1:]]
    assert subjects == sorted(subjects) == list(MATH_SUBJECTS)
    concatenated = [f"{s}-{i}" for s, n in zip(MATH_SUBJECTS, sizes, strict=True) for i in range(n)]
    assert frame["question"].tolist() == concatenated[::15]


def test_math500train_checks_the_row_count_and_says_what_to_do_offline(monkeypatch):
    import sys

    fake = _FakeDatasets({("hendrycks/competition_math", None, "train"): _train_rows("p", 7000)})
    monkeypatch.setitem(sys.modules, "datasets", fake)
    with pytest.raises(DataError, match="7000 rows; expected 7500"):
        load_questions("math500train")
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DataError, match="needs the 'datasets' package.*pass that file"):
        load_questions("math500train")
