"""The population oracle (dprm.ias.curves.population, dprm.data.synth.population: twin_questions,
population_curves, oracle-pop rows)."""

from __future__ import annotations

from dataclasses import replace
from statistics import NormalDist

import numpy as np
import pytest

from dprm.data.synth.population import twin_questions
from dprm.ias.curves.equal_cost import reference_rows
from dprm.ias.curves.population import PopulationCurves, population_curves, population_oracle_rows
from dprm.ias.selection.rules import RuleTable


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


def test_twin_questions_replays_the_written_set_and_refuses_others(tiny_world):
    from dprm.data import read_bon_set
    from dprm.ias.curves.pays import run_pays

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
    pop = rows[rows["allocation"] == "oracle-pop"]
    assert set(pop["rule"]) == {"highest-last", "majority"}
    assert (pop.loc[pop["rule"] == "majority", "pop_pools"] == 4).all()
    assert (pop.loc[pop["rule"] == "highest-last", "pop_pools"] == 0).all()  # exact
    assert (
        run_pays(bon, [], rules=("highest-last",), population_pools=0)["allocation"]
        .ne("oracle-pop")
        .all()
    )
