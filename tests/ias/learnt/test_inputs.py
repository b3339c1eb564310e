"""``dprm.ias.learnt.inputs``: one calibrator's estimates on the test and training sets, built once and
never changed after."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dprm.ias.learnt.inputs import CalibratorInput
from dprm.ias.paper.estimates import Estimate


def _estimate(q: int = 3) -> Estimate:
    return Estimate("m", "point", p=np.linspace(0.1, 0.9, q))


def test_estimates_and_inputs_are_frozen():
    est = _estimate()
    with pytest.raises(dataclasses.FrozenInstanceError):
        est.candidate = np.zeros(4)
    inp = CalibratorInput("m", est)
    with pytest.raises(dataclasses.FrozenInstanceError):
        inp.train = est


def test_with_candidate_is_a_new_estimate():
    est = _estimate()
    cand = np.array([0.2, 0.4, 0.6, 0.8])
    got = est.with_candidate(cand)
    assert est.candidate is None and got.candidate is cand
    assert got.p is est.p and got.method == est.method and got.kind == est.kind


def test_reads_candidates_needs_both_sets():
    est = _estimate()
    cand = est.with_candidate(np.full(4, 0.5))
    assert not CalibratorInput("m", cand).reads_candidates  # no training set
    assert not CalibratorInput("m", cand, est).reads_candidates  # none on the training set
    assert not CalibratorInput("m", est, cand).reads_candidates  # none on the test set
    both = CalibratorInput("m", cand, cand)
    assert both.reads_candidates
    assert both.test_candidates is cand.candidate and both.train_candidates is cand.candidate


def test_calibrator_input_builds_the_estimates_of_both_sets(tiny_world):
    from dprm.data import read_bon_set
    from dprm.ias.learnt.inputs import calibrator_input
    from dprm.ias.paper.estimates import candidate_estimates, estimate_from_model
    from dprm.models.raw_score import RawScoreCalibrator

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    bon, train = read_bon_set(paths["id/bon"]), read_bon_set(paths["train/bon"])
    model = RawScoreCalibrator(bon.hidden_dim)
    inp = calibrator_input(
        model, bon, "raw", train_bon=train, test_candidates=True, train_candidates=True
    )
    assert inp.label == inp.test.method == inp.train.method == "raw"
    np.testing.assert_array_equal(inp.test.p, estimate_from_model(model, bon).p)
    np.testing.assert_array_equal(inp.train.p, estimate_from_model(model, train).p)
    np.testing.assert_array_equal(inp.test_candidates, candidate_estimates(model, bon))
    np.testing.assert_array_equal(inp.train_candidates, candidate_estimates(model, train))
    plain = calibrator_input(model, bon, "raw")
    assert plain.train is None and plain.test_candidates is None


def test_the_peer_curves_leave_their_priors_unchanged(tiny_world):
    """``set_curves`` adds the flat prior and ``shuffle_priors`` permutes a copy: the priors
    the caller built are the same objects with the same arrays afterwards."""
    from dprm.data import read_bon_set
    from dprm.ias.peers.curves import prior_inputs, set_curves, shuffle_priors
    from dprm.models.raw_score import RawScoreCalibrator

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    bon = read_bon_set(paths["id/bon"], check_hidden=False)
    train = read_bon_set(paths["train/bon"], check_hidden=False)
    priors = prior_inputs(RawScoreCalibrator(bon.hidden_dim), bon, train)
    assert [p.label for p in priors] == ["calibrated", "base", "truth"]
    before = [(p, p.test, p.train, np.copy(p.test_candidates)) for p in priors]
    shuffled = shuffle_priors(priors, ("calibrated",), seed=1)
    set_curves(bon, train, priors, "highest-last", trials=2, priors=("calibrated", "none"))
    for (inp, test, train_est, cand), now in zip(before, priors, strict=True):
        assert now is inp and now.test is test and now.train is train_est
        np.testing.assert_array_equal(now.test_candidates, cand)
    assert shuffled[0] is not priors[0] and shuffled[1] is priors[1]
