"""Peer curves beside auto-seq: the figures users quote, and the fallback under a shift."""

from __future__ import annotations

import numpy as np
import pytest

from dprm.ias.peers.curves import (
    MATCH_TOLERANCE,
    SEQ_BUDGETS,
    curve_at_cost,
    draws_to_reach,
    per_question,
    prior_inputs,
    set_curves,
    shuffle_priors,
    summarise,
)
from dprm.ias.peers.methods import CALIBRATOR_FREE


def test_draws_to_reach_interpolates_the_first_crossing():
    draws = np.array([1.0, 2.0, 4.0, 8.0])
    acc = np.array([0.5, 0.6, 0.7, 0.8])
    # target 0.65 + tolerance: crossing between (2, 0.6) and (4, 0.7)
    goal = 0.65 - MATCH_TOLERANCE
    assert draws_to_reach(draws, acc, 0.65) == pytest.approx(2 + (goal - 0.6) / 0.1 * 2)
    assert draws_to_reach(draws, acc, 0.5) == 1.0
    assert np.isnan(draws_to_reach(draws, acc, 0.9))
    assert draws_to_reach(draws[::-1], acc[::-1], 0.8) == pytest.approx(
        4 + (0.8 - MATCH_TOLERANCE - 0.7) / 0.1 * 4
    )
    assert curve_at_cost(draws, acc, 3.0) == pytest.approx(0.65)
    assert np.isnan(curve_at_cost(draws, acc, 0.5))


def test_per_question_reads_the_outcome_at_each_budget():
    outcomes = np.array([[[0, 1, 1], [1, 0, 0]], [[1, 1, 1], [0, 0, 1]]], dtype=np.float32)
    budgets = np.array([[[1, 3], [2, 3]]])  # one level, T = 2, Q = 2
    acc, draws = per_question(outcomes, budgets)
    assert acc.tolist() == [[0.5, 0.5]] and draws.tolist() == [[1.5, 3.0]]


@pytest.fixture(scope="module")
def world(tiny_world):
    from dprm.data import read_bon_set
    from dprm.models.raw_score import RawScoreCalibrator

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    train = read_bon_set(paths["train/bon"], check_hidden=False)
    test = read_bon_set(paths["id/bon"], check_hidden=False)
    model = RawScoreCalibrator(test.hidden_dim)
    return test, train, prior_inputs(model, test, train)


@pytest.mark.parametrize("rule", ["highest-last", "majority"])
def test_under_a_shift_auto_seq_falls_back_to_the_best_calibrator_free_peer(world, rule):
    test, train, priors = world
    cs = set_curves(test, train, priors, rule, trials=2, shifted=True)
    assert cs.fallback in CALIBRATOR_FREE
    scores = cs.extra["fallback_scores"]
    assert scores[cs.fallback] == max(v for v in scores.values() if np.isfinite(v))
    peer = cs.curves[cs.fallback]
    for label in ("calibrated", "truth"):
        seq = cs.curves[f"auto-seq[{label}]"]
        assert seq.falls_back_to == cs.fallback  # shown as "falls back to X", not uniform
        np.testing.assert_array_equal(seq.accuracy, peer.accuracy)
        np.testing.assert_array_equal(seq.draws, peer.draws)
    for label in ("base", "none"):  # calibrator-free: they run as themselves, as the peers do
        seq = cs.curves[f"auto-seq[{label}]"]
        assert seq.falls_back_to == "" and len(seq.levels) == len(SEQ_BUDGETS) + 1
    uni = cs.curves["uniform"]
    assert not np.array_equal(cs.curves["auto-seq[calibrated]"].draws, uni.draws)
    table = summarise(cs, bootstrap=10)
    row = table.set_index("method").loc["auto-seq[calibrated]"]
    assert row["falls_back_to"] == cs.fallback
    assert row["draws_to_u64"] == table.set_index("method").loc[cs.fallback, "draws_to_u64"]


def test_a_subtle_shift_goes_unnoticed_by_the_shift_check(world):
    """Priors permuted across questions: every question's calibrated prior is another's, while
    the question states are the very same set. The shift check (it reads question states
    only) stays below its threshold, so auto-seq runs on the wrong priors: the check cannot
    see a calibrator that is wrong without states that look different."""
    test, train, priors = world
    wrong = shuffle_priors(priors, ("calibrated",), seed=0)
    was, now = priors[0], wrong[0]
    assert was.label == now.label == "calibrated"
    assert not np.array_equal(now.test.p, was.test.p)
    np.testing.assert_array_equal(now.test_candidates, was.test_candidates)
    assert now.train is was.train  # the training set is not shifted
    cs = set_curves(test, train, wrong, "highest-last", trials=2, priors=("calibrated",))
    assert cs.shift_auc < 0.75 and not cs.extra["shifted"]
    assert cs.curves["auto-seq[calibrated]"].falls_back_to == ""
