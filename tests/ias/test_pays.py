"""The population oracle (dprm.ias.pays: twin_questions, population_curves, oracle-pop rows)."""

from __future__ import annotations

from dataclasses import replace
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from dprm.data.synth.population import twin_questions
from dprm.ias.equal_cost import reference_rows
from dprm.ias.pays import pays_table
from dprm.ias.population import PopulationCurves, population_curves, population_oracle_rows
from dprm.ias.rules import RuleTable


def toy_questions(p: list[float], reading: list[float]):
    """A 2-question twin split (llama-3.1-8b x Qwen-PRM, ID cell) with chosen p and readings."""
    from dprm.data import synth

    gen, prm = synth.resolve_preset("llama-3.1-8b__qwen-prm")
    p = np.asarray(p, dtype=np.float64)
    rec = synth.Records(
        true_mu=np.zeros(2), true_sigma=np.ones(2), true_p=p, n_correct=np.zeros(2),
        prm_score=np.full(2, 0.5), latent=np.zeros((2, 1)), question_reading=np.asarray(reading),
    )  # fmt: skip
    cell = synth.score_cell(gen, prm, "id")
    return synth.BonQuestions(gen, prm, cell, synth.SIZES["tiny"], 7, 0, rec), cell, prm


def exact_highest_curve(p: float, separation: float, sd: float, n_max: int) -> np.ndarray:
    """P(the highest-scoring of n i.i.d. candidates is correct), by quadrature.

    Candidate logit = shift + separation (2c - 1) + sd Z with c ~ Bernoulli(p) (the shift is
    the same for the question's candidates and cancels): the pick is correct with probability
    int n p f_1(x) F(x)^(n-1) dx, F = p F_1 + (1 - p) F_0.
    """
    x = np.linspace(-12 * sd - 4, 12 * sd + 4, 20001)
    dist = NormalDist()
    f1 = np.array([dist.pdf((v - separation) / sd) / sd for v in x])
    big_f1 = np.array([dist.cdf((v - separation) / sd) for v in x])
    big_f0 = np.array([dist.cdf((v + separation) / sd) for v in x])
    big_f = p * big_f1 + (1 - p) * big_f0
    n = np.arange(1, n_max + 1)[:, None]
    integrand = n * p * f1[None, :] * big_f[None, :] ** (n - 1)
    return np.trapezoid(integrand, x, axis=1)


def test_population_curve_equals_the_exact_expectation_on_a_two_question_toy():
    bq, cell, prm = toy_questions([0.3, 0.8], [0.5, -1.0])
    pop = population_curves(bq, ["highest-last"], pools=400, n_max=64, exact_highest_last=False)
    pop = pop["highest-last"]
    exact_rows = population_curves(bq, ["highest-last"], n_max=64)["highest-last"]
    sd = np.sqrt(1 + cell.score_noise**2)
    for q, p in enumerate([0.3, 0.8]):
        exact = exact_highest_curve(p, prm.bon_separation, sd, 64)
        # at n = 64 a pool's curve is one 0/1 outcome, which can be the same in every pool
        # (se 0): bound the se below by the Bernoulli one of a whole pool
        se = np.maximum(pop.se[q], np.sqrt(exact * (1 - exact) / pop.pools))
        z = (pop.mean[q] - exact) / se
        assert pop.mean[q, 0] == pytest.approx(p, abs=5 * pop.se[q, 0])  # one draw: p itself
        assert np.abs(z).max() < 5.0
        assert np.abs(pop.mean[q] - exact).mean() < 0.012
        np.testing.assert_allclose(exact_rows.mean[q], exact, atol=2e-4)  # the closed form
    assert exact_rows.pools == 0 and (exact_rows.se == 0).all()


def test_population_curves_are_deterministic_given_the_seed_and_bounded():
    bq, _, _ = toy_questions([0.1, 0.6], [0.0, 0.0])
    rules = ["highest-last", "highest-min", "majority"]
    a = population_curves(bq, rules, pools=4, n_max=16, trials=32, exact_highest_last=False)
    b = population_curves(bq, rules, pools=4, n_max=16, trials=32, exact_highest_last=False)
    assert set(a) == set(rules)
    for rule in a:
        np.testing.assert_array_equal(a[rule].mean, b[rule].mean)
        assert ((a[rule].mean >= 0) & (a[rule].mean <= 1)).all()
        assert (a[rule].se >= 0).all() and a[rule].pools == 4
    assert "highest-calibrated" not in population_curves(bq, ["highest-calibrated"], pools=2)


def test_oracle_pop_on_the_realised_curves_is_the_oracle():
    rng = np.random.default_rng(3)
    curves = np.cumsum(rng.random((6, 8)) * 0.05, axis=1)
    table = RuleTable("highest-last", curves)
    pop = PopulationCurves("highest-last", curves, np.zeros_like(curves), 1)
    costs = (0.25, 0.5)
    ref = reference_rows(table, costs, n_max=8)
    rows = population_oracle_rows(table, pop, costs, n_max=8)
    oracle = ref[ref["method"] == "oracle"]["accuracy"].to_numpy()
    np.testing.assert_allclose(rows["accuracy"].to_numpy(), oracle)
    assert (rows["cost"] <= np.asarray(costs) + 1e-12).all()


def test_oracle_pop_allocates_on_population_curves_not_on_pool_luck():
    # question 0's realised pool is lucky (its curve jumps), its population curve is flat:
    # oracle-pop puts the extra draw on question 1, the pool oracle on question 0
    realised = np.array([[0.0, 1.0], [0.0, 0.1]])
    population = np.array([[0.0, 0.0], [0.0, 0.5]])
    table = RuleTable("highest-last", realised)
    pop = PopulationCurves("highest-last", population, np.zeros_like(population), 1)
    rows = population_oracle_rows(table, pop, (0.75,), n_max=2)  # 3 draws for 2 questions
    assert rows["accuracy"].iloc[0] == pytest.approx(0.05)
    ref = reference_rows(table, (0.75,), n_max=2)
    assert ref.loc[ref["method"] == "oracle", "accuracy"].iloc[0] == pytest.approx(0.5)


def test_pays_table_reports_both_headrooms():
    rows = pd.DataFrame(
        {
            "method": ["uniform", "oracle", "oracle-pop", "ot"],
            "sweep": ["uniform", "oracle", "oracle-pop", "auto"],
            "level": 0.1,
            "cost": 0.1,
            "accuracy": [0.5, 0.7, 0.6, 0.55],
            "rule": "highest-last",
        }
    )
    table = pays_table(rows, costs=(0.1,)).set_index(["method", "kind"])
    assert table.loc[("ot", "auto"), "share"] == pytest.approx(0.25)
    assert table.loc[("ot", "auto"), "share_pop"] == pytest.approx(0.5)
    assert table.loc[("ot", "auto"), "headroom_pop"] == pytest.approx(0.1)
    no_pop = pays_table(rows[rows["method"] != "oracle-pop"], costs=(0.1,))
    assert no_pop["share_pop"].isna().all() and not no_pop["share"].isna().all()


def test_twin_questions_replays_the_written_set_and_refuses_others(tiny_world):
    from dprm.data import read_bon_set
    from dprm.ias.pays import run_pays

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    for split in ("id", "ood"):
        bon = read_bon_set(paths[f"{split}/bon"])
        bq = twin_questions(bon)
        assert bq is not None
        np.testing.assert_array_equal(
            bq.rec.true_p.astype(np.float32), bon.questions["true_p"].to_numpy(np.float32)
        )
        np.testing.assert_array_equal(
            bq.rec.prm_score.astype(np.float32), bon.questions["prm_score"].to_numpy(np.float32)
        )
    assert twin_questions(read_bon_set(paths["train/bon"])) is None  # other streams
    bon = read_bon_set(paths["id/bon"])
    assert twin_questions(replace(bon, meta={**bon.meta, "source": "real"})) is None
    rows = run_pays(bon, [], rules=("highest-last", "majority"), population_pools=4, trials=8)
    pop = rows[rows["sweep"] == "oracle-pop"]
    assert set(pop["rule"]) == {"highest-last", "majority"}
    assert (pop.loc[pop["rule"] == "majority", "pop_pools"] == 4).all()
    assert (pop.loc[pop["rule"] == "highest-last", "pop_pools"] == 0).all()  # exact
    assert (
        run_pays(bon, [], rules=("highest-last",), population_pools=0)["sweep"]
        .ne("oracle-pop")
        .all()
    )


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
    seq = summary[summary["sweep"] == "auto-seq"].set_index(["method", "level"])
    auto = summary[summary["sweep"] == "auto"].set_index(["method", "level"])
    assert set(seq.index.get_level_values("method")) == {"base", "qr"}
    assert sorted(set(seq.index.get_level_values("level"))) == [0.05, 0.1, 0.25]
    for key, row in seq.iterrows():  # control variate: auto's exact accuracy + the difference
        assert row["accuracy"] == pytest.approx(auto.loc[key, "accuracy"] + row["minus_auto"])
        assert row["cost"] == pytest.approx(auto.loc[key, "cost"])  # the same budget
    assert "auto-seq" in set(pays_table(summary)["kind"])
    # both sets are contract v2: the policy read the draws' answers, from a floor share chosen
    # on the training pools
    from dprm.ias.allocation import SHIFT_AUC
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
    seq_v1 = summary_v1[summary_v1["sweep"] == "auto-seq"].set_index(["method", "level"])
    assert not seq_v1["seq_answers"].any()
    assert not np.allclose(seq_v1["accuracy"], seq.loc[seq_v1.index, "accuracy"])


def test_run_pays_without_references_gives_the_calibrators_own_rows(tiny_world, one_thread):
    """``references=False`` (a calibrator's unit) skips the rows that do not depend on the
    calibrator, and its own rows, a calibrated rule's reference rows included, are unchanged."""
    from dprm.data import read_bon_set
    from dprm.ias.estimates import candidate_estimates, estimate_from_model, truth_estimate
    from dprm.ias.pays import run_pays
    from dprm.models.raw_score import RawScoreCalibrator

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    bon, train = read_bon_set(paths["id/bon"]), read_bon_set(paths["train/bon"])
    model = RawScoreCalibrator(bon.hidden_dim)
    est, train_est = (
        estimate_from_model(model, bon, "raw"),
        estimate_from_model(model, train, "raw"),
    )
    kwargs = dict(
        rules=("highest-last", "highest-calibrated"),
        train_bon=train,
        train_estimates={"raw": train_est},
        calibrated={
            "raw": candidate_estimates(model, bon),
            "train:raw": candidate_estimates(model, train),
        },
        population_pools=2,
        trials=4,
    )
    assert truth_estimate(bon) is not None  # a twin set: oracle-p and oracle-pop rows exist
    full = run_pays(bon, [est], **kwargs)
    own = run_pays(bon, [est], references=False, **kwargs)
    assert {"oracle-pop", "oracle-p", "uniform"} <= set(full["sweep"])
    keep = (full["method"] == "raw") | full["rule"].str.endswith("[raw]")
    expected = full[keep].reset_index(drop=True)
    assert not own["sweep"].eq("oracle-pop").any()
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
    import dprm.ias.pays as pays_module
    from dprm.data import read_bon_set
    from dprm.ias import run_ias
    from dprm.ias.peer_curves import prior_estimates, set_curves
    from dprm.ias.peers import CALIBRATOR_FREE
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
    seq = summary[summary["sweep"] == "auto-seq"]
    assert set(seq["rule"]) == {"highest-last", "majority"}
    test_est, train_est = prior_estimates(model, bon), prior_estimates(model, train)
    for rule, rows in seq.groupby("rule"):
        peer = set(rows["falls_back_to"])
        assert len(peer) == 1 and peer <= set(CALIBRATOR_FREE), peer
        chosen = set_curves(
            bon, train, test_est, train_est, rule, train_trials=SEQ_TRAIN_TRIALS, shifted=True,
            priors=("calibrated",),
        ).fallback  # fmt: skip
        assert peer == {chosen}
        assert rows["floor_share"].isna().all()  # the policy did not run
        assert rows["accuracy"].between(0, 1).all() or rows["accuracy"].isna().any()
    table = pays_table(summary)
    cells = table[table["kind"] == "auto-seq"]
    assert len(cells) and (cells["falls_back_to"] != "").all()
    assert (table.loc[table["kind"] != "auto-seq", "falls_back_to"] == "").all()


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
    seq = summary[summary["sweep"] == "auto-seq"]
    assert set(seq["rule"]) == {"highest-last", "majority"} and set(seq["method"]) == {"qr"}
    assert {"base", "qr"} <= set(summary.loc[summary["sweep"] == "auto", "method"])
