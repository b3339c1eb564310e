"""tools/audit_world.py: its parser, grader, metrics and PRM reader on hand-worked inputs; the
PRM reader against dprm's QwenPRM (the audit itself never imports dprm)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def audit():
    spec = importlib.util.spec_from_file_location("audit_world", ROOT / "tools" / "audit_world.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_audit_imports_no_dprm_code():
    text = (ROOT / "tools" / "audit_world.py").read_text(encoding="utf-8")
    imports = [line for line in text.splitlines() if line.lstrip().startswith(("import ", "from "))]
    assert imports and not [line for line in imports if "dprm" in line or "world_" in line]


def test_questions_parse_and_evaluate_in_story_order(audit):
    q = "Eva has 6 stamps. Eva loses 2. Eva gets 1 more. Eva finds 9 more. How many stamps does Eva have now?"
    assert audit.parse_question(q) == (6, [("-", 2), ("+", 1), ("+", 9)])
    assert audit.evaluate(*audit.parse_question(q)) == 14
    q = (
        "Ben has 3 coins. Ben ends up with 4 times as many. The coins are multiplied by 2. "
        "Ben gives away 5. Ben buys 70 more. How many coins does Ben have now?"
    )
    assert audit.evaluate(*audit.parse_question(q)) == (3 * 4) * 2 - 5 + 70 == 89
    for bad in (
        "Eva has 6 stamps. Eva eats 2. How many stamps does Eva have now?",
        "Eva has 6 stamps. Ben loses 2. How many stamps does Eva have now?",
        "Eva has 6 stamps. Eva loses 2. How many coins does Eva have now?",
        "Eva owns 6 stamps. How many stamps does Eva have now?",
    ):
        with pytest.raises(ValueError):
            audit.parse_question(bad)


def test_every_packaged_test_answer_equals_the_computed_one(audit):
    for split, path in audit.QUESTION_FILES.items():
        rows = audit.load_questions(path)
        assert len(rows) == {"id": 400, "ood": 200}[split]
        assert [r["question_id"] for r in rows if str(r["computed"]) != r["answer"]] == []


def test_the_grader_reads_the_last_complete_box_as_a_number(audit):
    assert audit.boxed_answer("a \\boxed{3} then $\\boxed{14}$.") == "14"
    assert audit.boxed_answer("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert audit.boxed_answer("\\boxed{1} and a cut \\boxed{2") == "1"
    assert audit.boxed_answer("no box") is None
    answer = "## Step 1: 6 - 2 = 4\n\nTherefore, the final answer is: $\\boxed{%s}$."
    assert audit.is_correct(answer % "4", 4)
    assert audit.is_correct(answer % "4.0", 4) and audit.is_correct(answer % " 04 ", 4)
    assert not audit.is_correct(answer % "5", 4)
    assert not audit.is_correct(answer % "four", 4)
    assert not audit.is_correct("## Step 1: 6 - 2 = 4", 4)


def test_auroc_ece_brier_and_the_picks_on_hand_worked_cases(audit):
    # positives 0.9 and 0.3, negatives 0.8 and 0.1: 3 of 4 pairs ordered
    assert audit.auroc([0.9, 0.8, 0.3, 0.1], [1, 0, 1, 0]) == 0.75
    assert audit.auroc([0.5, 0.5], [1, 0]) == 0.5
    assert math.isnan(audit.auroc([0.5, 0.4], [1, 1]))
    # a weight of 2 is the draw twice
    assert audit.auroc([0.9, 0.8, 0.3], [1, 0, 0], [1, 1, 2]) == 1.0
    assert (
        audit.auroc([0.2, 0.8, 0.3], [1, 0, 0], [1, 1, 2])
        == audit.auroc([0.2, 0.8, 0.3, 0.3], [1, 0, 0, 0])
        == 0.0
    )
    # bins [0, .1): .05 vs 0; [.1, .2): .15 vs 1; [.9, 1]: .95 vs .5 (and 1.0 in the last bin)
    s, y = [0.05, 0.15, 0.95, 0.95], [0, 1, 1, 0]
    assert audit.ece(s, y) == pytest.approx(0.05 / 4 + 0.85 / 4 + 0.45 / 2)
    assert audit.ece([1.0, 1.0], [1, 1]) == 0.0
    assert audit.brier(s, y) == pytest.approx((0.05**2 + 0.85**2 + 0.05**2 + 0.95**2) / 4)
    assert audit.majority_correct([14.0, 14.0, 3.0, 3.0, None], 14) == 0.5
    assert audit.majority_correct([14.0, 3.0, 3.0], 14) == 0.0
    assert audit.majority_correct([None, None], 14) == 0.0
    assert audit.best_of_correct([0.9, 0.9, 0.1], [1, 0, 1]) == 0.5


def test_split_stats_values_and_intervals(audit):
    records = [
        {"values": [4.0, 4.0, 5.0], "answer": 4, "correct": [1, 1, 0], "last": [0.9, 0.2, 0.1]},
        {"values": [7.0, 8.0, 8.0], "answer": 7, "correct": [1, 0, 0], "last": [0.3, 0.6, 0.6]},
        {"values": [1.0, 1.0, 1.0], "answer": 1, "correct": [1, 1, 1], "last": [0.8, 0.7, 0.9]},
    ]
    out = audit.split_stats(records, seed=0, resamples=200)
    assert out["pass@1"]["value"] == pytest.approx((2 / 3 + 1 / 3 + 1) / 3)
    assert out["majority@64"]["value"] == pytest.approx(2 / 3)
    assert out["prm_best_of_64"]["value"] == pytest.approx(2 / 3)
    # question 1: both right draws (0.9, 0.2) above the wrong one (0.1); question 2: the right
    # draw (0.3) below both wrong ones (0.6); question 3 has no wrong draw
    assert out["within_question_auroc"]["value"] == pytest.approx((1.0 + 0.0) / 2)
    assert out["questions_with_both_classes"] == 2 and out["draws"] == 9
    s = np.array([0.9, 0.2, 0.1, 0.3, 0.6, 0.6, 0.8, 0.7, 0.9])
    y = np.array([1, 1, 0, 1, 0, 0, 1, 1, 1])
    assert out["pooled_auroc"]["value"] == pytest.approx(audit.auroc(s, y))
    assert out["last_step_brier"]["value"] == pytest.approx(((s - y) ** 2).mean())
    for key in ("pass@1", "majority@64", "prm_best_of_64", "within_question_auroc", "pooled_auroc"):
        lo, hi = out[key]["ci"]
        assert lo <= out[key]["value"] <= hi and lo < hi, key


def test_the_prm_reader_gives_dprms_qwen_prm_scores(audit):
    pytest.importorskip("transformers")
    from dprm.llm.prm import load_prm

    prm_dir = audit.WORLD / "prm"
    row = audit.load_questions(audit.QUESTION_FILES["id"])[0]
    right = row["solution"].split("\n\n")
    wrong = ["## Step 1: 6 - 2 = 5", "## Step 2: 5 + 1 = 6", "Therefore"]
    cut = [right[0], ""]
    mine = audit.PRMReader(prm_dir).score([(row["question"], s) for s in (right, wrong, cut)])
    theirs = load_prm(str(prm_dir), device="cpu").score_steps(row["question"], [right, wrong, cut])
    for a, b, steps in zip(mine, theirs, (right, wrong, cut), strict=True):
        assert len(a) == len(steps)
        np.testing.assert_allclose(a, np.asarray(b.scores, float), atol=1e-5)
    assert mine[0][-1] > mine[1][-1]  # the right solution scores above the wrong one
