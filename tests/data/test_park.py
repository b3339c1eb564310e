"""Tests for the import of Park et al.'s calibration JSON (:mod:`dprm.data.park`)."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprm.data.contract import LABEL_COLUMNS, read_labels
from dprm.data.park import assign_responses, import_park, park_to_labels, question_id, split_steps
from dprm.io import DataError

Q1 = "What is $2 + 3$?"
Q2 = "Find $x$ if $2x = 6$."

# Three first-pass responses per question, as step lists. Q1: r0 and r1 share their first step;
# r2 has a single step, so only its empty prefix was labelled. Q2: r3's labelled prefixes are all
# prefixes of r4's (a response contained in another); r5 is separate from the start.
RESPONSES: dict[str, list[list[str]]] = {
    Q1: [
        ["Add the numbers.", "2 + 3 = 5.", "So the answer is $\\boxed{5}$."],
        ["Add the numbers.", "Two plus three is five.", "Check: 5 - 3 = 2.", "$\\boxed{5}$"],
        ["$\\boxed{6}$"],
    ],
    Q2: [
        ["Divide by 2.", "x = 3.", "Answer: $\\boxed{3}$"],
        ["Divide by 2.", "x = 3.", "Check: 2 * 3 = 6.", "Hence x = 3.", "$\\boxed{3}$"],
        ["Subtract 2x from both sides?", "No: divide.", "$\\boxed{3}$"],
    ],
}


def park_records() -> tuple[list[dict], list[tuple[str, int, int]]]:
    """Park-style records (prefixes of each response but the full text) and their truth.

    Returns:
        The records in generation order, and for each one (question, true response index within
        the question, step).
    """
    records, truth = [], []
    for question, responses in RESPONSES.items():
        for r, steps in enumerate(responses):
            for k in range(len(steps)):  # Park labels k = 0 .. n_steps - 1
                prefix = "\n\n".join(steps[:k])
                # some records keep the rollout's trailing separator (k=0 then is "\n\n")
                if (r + k) % 3 == 0:
                    prefix += "\n\n"
                records.append(
                    {
                        "question": question,
                        "reasoning_prefix": prefix,
                        "success_prob": ((r + 2 * k) % 9) / 8,
                    }
                )
                truth.append((question, r, k))
    return records, truth


def write_json(path: Path, records: list) -> Path:
    path.write_text(json.dumps(records, indent=1))
    return path


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _chains(labels: pd.DataFrame) -> Counter:
    """The recovered responses as a multiset of (question, frozenset of (step, prefix))."""
    return Counter(
        (qid, frozenset(zip(g["step"], g["reasoning_prefix"], strict=True)))
        for (qid, _), g in labels.groupby(["question_id", "response_id"])
    )


def _true_chains() -> Counter:
    out: Counter = Counter()
    for question, responses in RESPONSES.items():
        for steps in responses:
            out[
                (
                    question_id(question),
                    frozenset((k, "\n\n".join(steps[:k])) for k in range(len(steps))),
                )
            ] += 1
    return out


# ----------------------------------------------------------------------------- basics
def test_question_id_is_deterministic_sha1() -> None:
    assert question_id(Q1) == "q" + hashlib.sha1(Q1.encode("utf-8")).hexdigest()[:12]
    assert question_id(Q1) == question_id(str(Q1))
    assert question_id(Q1) != question_id(Q2)
    assert len(question_id("é")) == 13


@pytest.mark.parametrize(
    ("prefix", "steps"),
    [
        ("", ()),
        ("\n\n", ()),
        ("a", ("a",)),
        ("a\n\n", ("a",)),
        ("a\n\nb", ("a", "b")),
        ("a\n\nb\n\n", ("a", "b")),
        ("a\nstill a\n\nb", ("a\nstill a", "b")),
    ],
)
def test_split_steps(prefix: str, steps: tuple[str, ...]) -> None:
    assert split_steps(prefix) == steps


def test_assign_responses_small_cases() -> None:
    e, a, ab, ac, abd = (), ("a",), ("a", "b"), ("a", "c"), ("a", "b", "d")
    # two chains sharing their first step
    assert assign_responses([e, e, a, a, ab, ac]) == [0, 1, 0, 1, 0, 1]
    # leaves are numbered by first appearance, whatever the order of the shorter prefixes
    # ... and each record goes to the first chain that extends it and lacks its step
    assert assign_responses([ac, e, a, ab, a, e]) == [0, 0, 0, 1, 1, 1]
    # only duplicates of the empty prefix: one response each
    assert assign_responses([e, e, e]) == [0, 1, 2]
    # a chain contained in a longer one is peeled off in a second round
    assert assign_responses([e, a, ab, abd, e, a, ab]) == [0, 0, 0, 0, 1, 1, 1]
    assert assign_responses([]) == []


# ----------------------------------------------------------------------------- recovery
def test_recovers_responses_and_steps_in_generation_order(tmp_path: Path) -> None:
    records, truth = park_records()
    labels = import_park(write_json(tmp_path / "park.json", records), tmp_path / "labels.parquet")
    assert list(labels.columns) == list(LABEL_COLUMNS)
    assert len(labels) == len(records) == 3 + 4 + 1 + 3 + 5 + 3
    assert _chains(labels) == _true_chains()
    # in generation order the maximal chains come first, the contained ones after
    q1 = labels[labels["question_id"] == question_id(Q1)]
    assert q1.groupby("response_id")["step"].max().to_dict() == {0: 2, 1: 3, 2: 0}
    q2 = labels[labels["question_id"] == question_id(Q2)]
    assert q2.groupby("response_id")["step"].max().to_dict() == {0: 4, 1: 2, 2: 2}
    assert q2[q2["response_id"] == 2]["reasoning_prefix"].iloc[-1] == "Divide by 2.\n\nx = 3."
    # rows sorted by question (first appearance), response, step
    assert list(labels["question_id"].unique()) == [question_id(Q1), question_id(Q2)]
    assert labels.equals(
        labels.sort_values(["response_id", "step"], kind="stable").sort_values(
            "question_id",
            key=lambda s: s.map({question_id(Q1): 0, question_id(Q2): 1}),
            kind="stable",
        )
    )
    # labels
    assert (labels["n_rollouts"] == 8).all()
    np.testing.assert_array_equal(labels["n_correct"], np.rint(labels["success_prob"] * 8))
    assert Counter(
        zip(labels["question"], labels["reasoning_prefix"], labels["success_prob"], strict=True)
    ) == Counter(
        (r["question"], r["reasoning_prefix"].removesuffix("\n\n"), r["success_prob"])
        for r in records
    )
    # the step is the number of segments of the stripped prefix
    for prefix, step in zip(labels["reasoning_prefix"], labels["step"], strict=True):
        assert not prefix.endswith("\n\n")
        assert step == (0 if prefix == "" else prefix.count("\n\n") + 1)
    assert sorted(Counter(truth[i][2] for i in range(len(truth))).items()) == sorted(
        Counter(labels["step"]).items()
    )


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_recovers_responses_from_shuffled_records(tmp_path: Path, seed: int) -> None:
    records, truth = park_records()
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    shuffled = [records[i] for i in order]
    labels = park_to_labels(shuffled)
    assert _chains(labels) == _true_chains()
    # ids: maximal chains numbered by the first appearance of their longest prefix, then the
    # contained chain (the third response of Q1, the first of Q2) gets the next id
    for question, maximal, contained in ((Q1, (0, 1), 2), (Q2, (1, 2), 0)):
        steps = RESPONSES[question]
        first_seen = {
            r: min(
                pos for pos, i in enumerate(order) if truth[i] == (question, r, len(steps[r]) - 1)
            )
            for r in maximal
        }
        expected = {r: n for n, r in enumerate(sorted(maximal, key=first_seen.get))}
        expected[contained] = 2
        sub = labels[labels["question_id"] == question_id(question)]
        for r, rid in expected.items():
            got = sub[sub["response_id"] == rid]
            assert set(got["step"]) == set(range(len(steps[r])))
            assert got["reasoning_prefix"].iloc[-1] == "\n\n".join(steps[r][: len(steps[r]) - 1])


def test_jsonl_gives_the_same_labels(tmp_path: Path) -> None:
    records, _ = park_records()
    from_json = import_park(write_json(tmp_path / "a.json", records), tmp_path / "a.parquet")
    from_jsonl = import_park(write_jsonl(tmp_path / "b.jsonl", records), tmp_path / "b.parquet")
    pd.testing.assert_frame_equal(from_json, from_jsonl)
    # blank lines in JSON lines are ignored
    (tmp_path / "c.jsonl").write_text("\n" + (tmp_path / "b.jsonl").read_text() + "\n\n")
    pd.testing.assert_frame_equal(
        from_json, import_park(tmp_path / "c.jsonl", tmp_path / "c.parquet")
    )


def test_written_labels_load_with_contract_dtypes(tmp_path: Path) -> None:
    records, _ = park_records()
    labels = import_park(write_json(tmp_path / "park.json", records), tmp_path)  # a directory
    back = read_labels(tmp_path / "labels.parquet")
    assert back["response_id"].dtype == np.int32 and back["n_correct"].dtype == np.int32
    assert back["success_prob"].dtype == np.float32
    assert list(back["question_id"]) == list(labels["question_id"])
    np.testing.assert_array_equal(back["step"], labels["step"])
    assert list(back["reasoning_prefix"]) == list(labels["reasoning_prefix"])


@pytest.mark.parametrize(
    ("n_rollouts", "prob", "ok"), [(4, 0.5, True), (4, 0.125, False), (16, 0.0625, True)]
)
def test_n_rollouts_sets_the_grid(n_rollouts: int, prob: float, ok: bool) -> None:
    records = [{"question": Q1, "reasoning_prefix": "", "success_prob": prob}]
    if ok:
        labels = park_to_labels(records, n_rollouts)
        assert labels["n_correct"].tolist() == [round(prob * n_rollouts)]
        assert labels["n_rollouts"].tolist() == [n_rollouts]
    else:
        with pytest.raises(
            DataError,
            match=rf"record 0: field 'success_prob': expected a multiple of 1/{n_rollouts}",
        ):
            park_to_labels(records, n_rollouts)


def test_success_prob_tolerance() -> None:
    base = {"question": Q1, "reasoning_prefix": ""}
    assert park_to_labels([{**base, "success_prob": 0.375 + 5e-7}])["n_correct"].tolist() == [3]
    assert park_to_labels([{**base, "success_prob": 1}])["n_correct"].tolist() == [8]
    with pytest.raises(DataError, match="expected a multiple of 1/8"):
        park_to_labels([{**base, "success_prob": 0.375 + 1e-5}])


# ----------------------------------------------------------------------------- bad input
GOOD = {"question": Q1, "reasoning_prefix": "Add.", "success_prob": 0.5}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {"question": Q1, "reasoning_prefix": ""},
            r"record 2: missing field\(s\) \['success_prob'\]",
        ),
        ({"success_prob": 0.5}, r"record 2: missing field\(s\) \['question', 'reasoning_prefix'\]"),
        (
            {**GOOD, "success_prob": 1.25},
            r"record 2: field 'success_prob': expected a value in \[0, 1\], found 1\.25",
        ),
        (
            {**GOOD, "success_prob": -0.125},
            r"record 2: field 'success_prob': expected a value in \[0, 1\]",
        ),
        (
            {**GOOD, "success_prob": 0.3},
            r"record 2: field 'success_prob': expected a multiple of 1/8 .*found 0\.3",
        ),
        (
            {**GOOD, "success_prob": "0.5"},
            r"record 2: field 'success_prob': expected a finite number, found '0\.5'",
        ),
        (
            {**GOOD, "success_prob": None},
            r"record 2: field 'success_prob': expected a finite number, found None",
        ),
        (
            {**GOOD, "success_prob": True},
            r"record 2: field 'success_prob': expected a finite number, found True",
        ),
        (
            {**GOOD, "success_prob": float("nan")},
            r"record 2: field 'success_prob': expected a finite number, found nan",
        ),
        (
            {**GOOD, "reasoning_prefix": None},
            r"record 2: field 'reasoning_prefix': expected a string, found None",
        ),
        ({**GOOD, "question": 7}, r"record 2: field 'question': expected a string, found 7"),
        (["not", "an", "object"], r"record 2: expected a JSON object with fields \['question', "),
    ],
)
@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_bad_record_names_file_index_and_field(
    tmp_path: Path, bad: object, message: str, fmt: str
) -> None:
    records = [GOOD, {**GOOD, "reasoning_prefix": ""}, bad, GOOD]
    path = tmp_path / f"park.{fmt}"
    (write_json if fmt == "json" else write_jsonl)(path, records)
    out = tmp_path / "labels.parquet"
    out.write_bytes(b"existing")
    with pytest.raises(DataError, match=rf"park\.{fmt}: {message}"):
        import_park(path, out)
    assert out.read_bytes() == b"existing"  # nothing already written is lost
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, "labels.parquet"])


def test_unreadable_files(tmp_path: Path) -> None:
    out = tmp_path / "labels.parquet"
    with pytest.raises(DataError, match=r"missing\.json: file not found"):
        import_park(tmp_path / "missing.json", out)
    (tmp_path / "empty.json").write_text("  \n")
    with pytest.raises(DataError, match=r"empty\.json: empty file"):
        import_park(tmp_path / "empty.json", out)
    (tmp_path / "none.json").write_text("[]")
    with pytest.raises(DataError, match=r"none\.json: no records"):
        import_park(tmp_path / "none.json", out)
    (tmp_path / "broken.json").write_text('[{"question": "x",')
    with pytest.raises(DataError, match=r"broken\.json: not valid JSON"):
        import_park(tmp_path / "broken.json", out)
    (tmp_path / "broken.jsonl").write_text(
        json.dumps(GOOD) + "\n\n" + json.dumps(GOOD) + "\n{oops\n"
    )
    with pytest.raises(DataError, match=r"broken\.jsonl: line 4 \(record 2\): not valid JSON"):
        import_park(tmp_path / "broken.jsonl", out)
    assert not out.exists()


def test_bad_n_rollouts() -> None:
    with pytest.raises(ValueError, match="n_rollouts must be a positive integer"):
        park_to_labels([GOOD], 0)
