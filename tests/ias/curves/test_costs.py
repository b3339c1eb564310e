"""Tests for :mod:`dprm.ias.curves.costs`: labelled samples and PRM passes, worked by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from dprm.ias.curves.costs import READS, TrainingData, method_costs, reads_of, with_costs
from dprm.ias.peers.methods import PEERS

TRAINING = TrainingData(calibration_records=1000, train_candidates=200 * 64)


def test_calibrated_auto_seq_pays_for_its_calibrator_and_the_labelled_training_pools():
    got = method_costs("auto-seq[calibrated]", "majority", 10.0, TRAINING)
    assert got["labelled_samples"] == 1000 + 12800
    # test: one pass per draw (it reads each draw's estimate) + one on the question;
    # training: every labelled sample is one pass, spread over 500 / 5,000 test questions
    assert got["prm_passes_q500"] == pytest.approx(10 + 1 + 13800 / 500)
    assert got["prm_passes_q5000"] == pytest.approx(10 + 1 + 13800 / 5000)


def test_the_vote_peers_read_no_prm_under_majority_but_every_draw_under_a_score_rule():
    vote = method_costs("adaptive-consistency", "majority", 6.0, TRAINING)
    assert vote == {"labelled_samples": 0.0, "prm_passes_q500": 0.0, "prm_passes_q5000": 0.0}
    scored = method_costs("adaptive-consistency", "highest-last", 6.0, TRAINING)
    assert scored["prm_passes_q500"] == 6.0 and scored["labelled_samples"] == 0.0


def test_score_raw_reads_training_scores_without_labels():
    got = method_costs("score-raw", "highest-last", 4.0, TRAINING)
    assert got["labelled_samples"] == 0.0
    assert got["prm_passes_q5000"] == pytest.approx(4 + 12800 / 5000)


def test_flat_prior_auto_seq_reads_labels_but_no_prm_under_majority():
    got = method_costs("auto-seq[none]", "majority", 8.0, TRAINING)
    assert got["labelled_samples"] == 12800
    assert got["prm_passes_q500"] == pytest.approx(12800 / 500)


def test_unknown_counts_and_unreached_targets_are_nan_not_zero():
    unknown = TrainingData(calibration_records=None, train_candidates=100)
    got = method_costs("auto-seq[calibrated]", "majority", float("nan"), unknown)
    assert math.isnan(got["labelled_samples"]) and math.isnan(got["prm_passes_q500"])


def test_every_peer_has_a_cost_entry_and_an_unknown_method_fails_by_name():
    assert set(PEERS) <= set(READS)
    with pytest.raises(KeyError, match="no cost entry for method 'new-peer'"):
        reads_of("new-peer")


def test_training_data_of_a_fitted_calibrator():
    model = SimpleNamespace(info={"n_train": 800, "n_val": 200})
    train_bon = SimpleNamespace(responses=pd.DataFrame({"x": range(640)}))
    assert TrainingData.of(model, train_bon) == TrainingData(1000, 640)
    assert TrainingData.of(SimpleNamespace(info={}), train_bon).calibration_records is None


def test_with_costs_adds_the_columns_beside_the_draws():
    table = pd.DataFrame({"rule": ["majority", "majority"], "method": ["uniform", "auto-seq[none]"],
                          "draws_to_u64": [64.0, 20.0]})  # fmt: skip
    out = with_costs(table, TRAINING)
    assert list(out.columns) == ["rule", "method", "draws_to_u64", "labelled_samples",
                                 "prm_passes_q500", "prm_passes_q5000"]  # fmt: skip
    assert out["labelled_samples"].tolist() == [0.0, 12800.0]
