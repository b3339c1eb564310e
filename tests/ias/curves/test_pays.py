"""The "does it pay?" table and its rows on twin worlds (dprm.ias.curves.pays: run_pays, pays_table;
auto-seq rows and their shift fallback)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from dprm.ias.curves.pays import pays_table


def test_pays_table_reports_both_headrooms():
    rows = pd.DataFrame(
        {
            "method": ["uniform", "oracle", "oracle-pop", "ot"],
            "allocation": ["uniform", "oracle", "oracle-pop", "auto"],
            "target_cost": 0.1,
            "cost": 0.1,
            "accuracy": [0.5, 0.7, 0.6, 0.55],
            "rule": "highest-last",
        }
    )
    table = pays_table(rows, costs=(0.1,)).set_index(["method", "allocation"])
    assert table.loc[("ot", "auto"), "share"] == pytest.approx(0.25)
    assert table.loc[("ot", "auto"), "share_pop"] == pytest.approx(0.5)
    assert table.loc[("ot", "auto"), "headroom_pop"] == pytest.approx(0.1)
    no_pop = pays_table(rows[rows["method"] != "oracle-pop"], costs=(0.1,))
    assert no_pop["share_pop"].isna().all() and not no_pop["share"].isna().all()


@pytest.mark.slow
def test_run_ias_sequential_rows_on_a_twin_world(tiny_world, one_thread):
    import dprm
    from dprm.data import read_bon_set, read_calibration_set
    from dprm.ias import run_ias

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    bon, train = read_bon_set(paths["id/bon"]), read_bon_set(paths["train/bon"])
    model = dprm.fit("qr", read_calibration_set(paths["train/calib"]), seed=0, progress=False)
    summary, _ = run_ias(
        bon, {"qr": model}, mc_trials=0, rules=["highest-last"], train_bon=train,
        sequential=True, vote_trials=8,
    )  # fmt: skip
    seq = summary[summary["allocation"] == "auto-seq"].set_index(["method", "target_cost"])
    auto = summary[summary["allocation"] == "auto"].set_index(["method", "target_cost"])
    assert set(seq.index.get_level_values("method")) == {"base", "qr"}
    assert sorted(set(seq.index.get_level_values("target_cost"))) == [0.05, 0.1, 0.25]
    for key, row in seq.iterrows():  # control variate: auto's exact accuracy + the difference
        assert row["accuracy"] == pytest.approx(auto.loc[key, "accuracy"] + row["minus_auto"])
        assert row["cost"] == pytest.approx(auto.loc[key, "cost"])  # the same budget
    assert "auto-seq" in set(pays_table(summary)["allocation"])
    # both sets are contract v2: the policy read the draws' answers, from a floor share chosen
    # on the training pools
    from dprm.ias.learnt.allocation import SHIFT_AUC
    from dprm.ias.sequential import SEQ_FLOOR_SHARES

    assert seq["seq_answers"].all()
    unshifted = seq["shift_auc"] <= SHIFT_AUC
    assert unshifted.any() and seq.loc[unshifted, "floor_share"].isin(SEQ_FLOOR_SHARES).all()
    # a v1 copy of the test set (no answers): the estimates-only policy
    v1 = replace(bon, responses=bon.responses.drop(columns=["answer"]))
    summary_v1, _ = run_ias(
        v1, {"qr": model}, mc_trials=0, rules=["highest-last"], train_bon=train,
        sequential=True, vote_trials=8,
    )  # fmt: skip
    seq_v1 = summary_v1[summary_v1["allocation"] == "auto-seq"].set_index(["method", "target_cost"])
    assert not seq_v1["seq_answers"].any()
    assert not np.allclose(seq_v1["accuracy"], seq.loc[seq_v1.index, "accuracy"])


def test_run_pays_without_references_gives_the_calibrators_own_rows(tiny_world, one_thread):
    """``references=False`` (a calibrator's unit) skips the rows that do not depend on the
    calibrator, and its own rows, a calibrated rule's reference rows included, are unchanged."""
    from dprm.data import read_bon_set
    from dprm.ias.curves.pays import run_pays
    from dprm.ias.learnt.inputs import calibrator_input
    from dprm.ias.paper.estimates import truth_estimate
    from dprm.models.raw_score import RawScoreCalibrator

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    bon, train = read_bon_set(paths["id/bon"]), read_bon_set(paths["train/bon"])
    model = RawScoreCalibrator(bon.hidden_dim)
    raw = calibrator_input(
        model, bon, "raw", train_bon=train, test_candidates=True, train_candidates=True
    )
    kwargs = dict(
        rules=("highest-last", "highest-calibrated"),
        train_bon=train,
        population_pools=2,
        trials=4,
    )
    assert truth_estimate(bon) is not None  # a twin set: oracle-p and oracle-pop rows exist
    full = run_pays(bon, [raw], **kwargs)
    own = run_pays(bon, [raw], references=False, **kwargs)
    assert {"oracle-pop", "oracle-p", "uniform"} <= set(full["allocation"])
    keep = (full["method"] == "raw") | full["rule"].str.endswith("[raw]")
    expected = full[keep].reset_index(drop=True)
    assert not own["allocation"].eq("oracle-pop").any()
    pop_only = [c for c in expected.columns if c not in own.columns]  # oracle-pop's columns
    assert set(pop_only) <= {"pop_curve_se", "pop_pools"} and expected[pop_only].isna().all().all()
    expected = expected.drop(columns=pop_only)
    pd.testing.assert_frame_equal(own[expected.columns], expected)


def test_sequential_rows_under_shift_fall_back_to_the_peer_chosen_on_training(
    tiny_world, one_thread, monkeypatch
):
    """Test questions unlike the training set's: auto-seq does not adapt; each rule's rows are
    the calibrator-free peer that ``dprm ias --peers`` would fall back to (one choice, made on
    the training pools), and the pays table names it."""
    import dprm.ias.curves.pays as pays_module
    from dprm.data import read_bon_set
    from dprm.ias import run_ias
    from dprm.ias.peers.curves import prior_inputs, set_curves
    from dprm.ias.peers.methods import CALIBRATOR_FREE
    from dprm.ias.sequential import SEQ_TRAIN_TRIALS
    from dprm.models.raw_score import RawScoreCalibrator

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    bon, train = read_bon_set(paths["id/bon"]), read_bon_set(paths["train/bon"])
    monkeypatch.setattr(pays_module, "SHIFT_AUC", -1.0)  # every set counts as shifted
    model = RawScoreCalibrator(bon.hidden_dim)
    summary, _ = run_ias(
        bon, {"raw": model}, mc_trials=0, include_base=False,
        rules=["highest-last", "majority"], train_bon=train, sequential=True, vote_trials=8,
    )  # fmt: skip
    seq = summary[summary["allocation"] == "auto-seq"]
    assert set(seq["rule"]) == {"highest-last", "majority"}
    priors = prior_inputs(model, bon, train)
    for rule, rows in seq.groupby("rule"):
        peer = set(rows["falls_back_to"])
        assert len(peer) == 1 and peer <= set(CALIBRATOR_FREE), peer
        chosen = set_curves(
            bon, train, priors, rule, train_trials=SEQ_TRAIN_TRIALS, shifted=True,
            priors=("calibrated",),
        ).fallback  # fmt: skip
        assert peer == {chosen}
        assert rows["floor_share"].isna().all()  # the policy did not run
        assert rows["accuracy"].between(0, 1).all() or rows["accuracy"].isna().any()
    table = pays_table(summary)
    cells = table[table["allocation"] == "auto-seq"]
    assert len(cells) and (cells["falls_back_to"] != "").all()
    assert (table.loc[table["allocation"] != "auto-seq", "falls_back_to"] == "").all()


@pytest.mark.slow
def test_majority_auto_seq_indexes_the_vote_race(tiny_world, one_thread, monkeypatch):
    """With answers, the majority rule's policy (on the training pools and the test set) runs
    the race index; highest-last keeps the curve index. ``sequential`` naming methods limits
    the auto-seq rows to them (here not base's)."""
    import dprm
    from dprm.data import read_bon_set, read_calibration_set
    from dprm.ias import run_ias
    from dprm.ias.sequential import SequentialAuto

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    bon, train = read_bon_set(paths["id/bon"]), read_bon_set(paths["train/bon"])
    model = dprm.fit("qr", read_calibration_set(paths["train/calib"]), seed=0, progress=False)
    seen: list[tuple[int, bool]] = []
    original = SequentialAuto.policy

    def record(self, samples, cap, n_max=64, answers=False, majority=False):
        seen.append((len(samples), majority))
        return original(self, samples, cap, n_max, answers=answers, majority=majority)

    monkeypatch.setattr(SequentialAuto, "policy", record)
    summary, _ = run_ias(
        bon, {"qr": model}, mc_trials=0, rules=["highest-last", "majority"], train_bon=train,
        sequential=["qr"], vote_trials=8,
    )  # fmt: skip
    sizes = {len(bon.questions), len(train.questions)}
    assert {n for n, _ in seen} == sizes
    assert [m for _, m in seen] == [False, False, True, True]  # rules in order, train then test
    seq = summary[summary["allocation"] == "auto-seq"]
    assert set(seq["rule"]) == {"highest-last", "majority"} and set(seq["method"]) == {"qr"}
    assert {"base", "qr"} <= set(summary.loc[summary["allocation"] == "auto", "method"])


def test_sequential_rows_of_a_calibrated_rule_run_once_per_calibrator(tiny_world, one_thread):
    """``highest-calibrated`` labels its table ``highest-calibrated[<calibrator>]``; the
    sequential policy is fitted for the rule that label names."""
    import dprm
    from dprm.data import read_bon_set, read_calibration_set
    from dprm.ias import run_ias
    from dprm.ias.selection.rules import rule_of_label

    assert rule_of_label("highest-calibrated[qr]") == "highest-calibrated"
    assert rule_of_label("majority") == "majority"
    paths = tiny_world("llama-3.1-8b__qwen-prm")
    bon, train = read_bon_set(paths["id/bon"]), read_bon_set(paths["train/bon"])
    model = dprm.fit("qr", read_calibration_set(paths["train/calib"]), seed=0, progress=False)
    summary, _ = run_ias(
        bon, {"qr": model}, mc_trials=0, rules=["highest-calibrated"], train_bon=train,
        sequential=True, vote_trials=8,
    )  # fmt: skip
    seq = summary[summary["allocation"] == "auto-seq"]
    assert set(seq["rule"]) == {"highest-calibrated[qr]", "highest-calibrated[base]"}
    assert np.isfinite(seq["accuracy"]).all()
