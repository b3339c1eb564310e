"""CalibratedPRM: per-step quantiles, mean and budgets equal the calibrator's and the rule of docs/design.md §4."""

from __future__ import annotations

import numpy as np
import pytest

from dprm.io import DataError
from dprm.metrics import LEVELS_11, midpoint_levels

MID = midpoint_levels(100)


def test_assess_matches_prm_calibrator_and_mixture_rule(
    prm, calibrator_dirs, load_cprm, budget_rule, tiny
):
    from dprm.llm.prompts import split_steps

    cprm = load_cprm(calibrator_dirs["mono"])
    question = "What is 3 + 4?"
    steps = split_steps(tiny.solution(3, 4, 7))
    result = cprm.assess(question, steps, levels=LEVELS_11, C=0.9)
    raw = prm.score_steps(question, [steps])[0]
    assert [a.step for a in result] == list(range(1, len(steps) + 1))
    np.testing.assert_allclose([a.prm_score for a in result], raw.scores, rtol=0, atol=1e-6)
    q = cprm.calibrator.quantiles(raw.hidden, LEVELS_11, raw.scores)
    np.testing.assert_allclose(np.stack([a.quantiles for a in result]), q, atol=1e-6)
    assert all(np.all(np.diff(a.quantiles) >= 0) for a in result)
    np.testing.assert_allclose(
        [a.mean for a in result], cprm.calibrator.point_estimate(raw.hidden, raw.scores), atol=1e-6
    )
    q_mid = cprm.calibrator.quantiles(raw.hidden, MID, raw.scores)
    assert [a.budget for a in result] == [budget_rule(row, 0.9, 64) for row in q_mid]
    assert result[0].to_dict()["levels"] == list(LEVELS_11)
    # without C there is no budget; other levels are served as asked
    plain = cprm.assess(question, steps, levels=[0.25, 0.75])
    assert all(a.budget is None and a.quantiles.shape == (2,) for a in plain)


@pytest.mark.parametrize(
    "method",
    ["mono", "qr", "base"],
)
def test_question_budget_follows_the_rule_of_each_kind(
    method, prm, calibrator_dirs, load_cprm, questions_file, budget_rule
):
    from dprm.llm.questions import load_questions

    cprm = load_cprm(calibrator_dirs[method], n_max=16)
    texts = load_questions(questions_file)["question"].tolist()
    scores, hidden = prm.question_state(texts)
    cal = cprm.calibrator
    if method == "mono":
        expect = [budget_rule(row, 0.7, 16) for row in cal.quantiles(hidden, MID, scores)]
    elif method == "qr":  # the point rule at Q(0.1)
        expect = [budget_rule(row, 0.7, 16) for row in cal.quantiles(hidden, [0.1], scores)]
    else:  # the raw PRM score
        expect = [budget_rule(s, 0.7, 16) for s in np.asarray(scores, dtype=np.float32)]
    assert cprm.question_budget(texts, 0.7).tolist() == expect
    # the question-only assessment is the same state
    first = cprm.assess(texts[0], [], C=0.7)
    assert len(first) == 1 and first[0].step == 0 and first[0].budget == expect[0]
    assert first[0].prm_score == pytest.approx(float(scores[0]), abs=1e-6)


def test_budgets_vary_by_question(calibrator_dirs, load_cprm, prm, math500):
    """The fixture calibrator is informative: otherwise the budget tests could not fail."""
    from dprm.llm.questions import load_questions

    cprm = load_cprm(calibrator_dirs["mono"], n_max=8)
    texts = load_questions(math500, limit=12)["question"].tolist()
    assert len(set(cprm.question_budget(texts, 0.9).tolist())) > 1


def test_from_dirs_loads_both_and_checks_dimensions(model_dirs, calibrator_dirs, tmp_path):
    from dprm.live import CalibratedPRM
    from dprm.models.qr import QRCalibrator
    from dprm.models.raw_score import RawScoreCalibrator

    cprm = CalibratedPRM.from_dirs(
        str(model_dirs["prm"]), str(calibrator_dirs["qr"]), device="cpu", dtype="float32"
    )
    assert cprm.kind == "levels"
    np.testing.assert_allclose(cprm.default_levels, LEVELS_11, atol=1e-6)
    with pytest.raises(DataError, match="trained"):
        cprm.check_levels([0.15])
    wrong = QRCalibrator(7).save(tmp_path / "qr7")
    with pytest.raises(DataError, match=r"qr7.*dimension 7.*produces 32"):
        CalibratedPRM.from_dirs(str(model_dirs["prm"]), str(wrong), device="cpu", dtype="float32")
    # a calibrator that reads no hidden state works with any PRM width
    base = RawScoreCalibrator(7).save(tmp_path / "base7")
    assert CalibratedPRM.from_dirs(str(model_dirs["prm"]), str(base), device="cpu").kind == "point"
