"""The highest-score index of auto-seq (dprm.ias.sequential.pick): hand-worked gains, the pick's
posterior correctness, the matched budget and what it buys on simulated pools."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dprm.ias.learnt.allocation import SelectionModel
from dprm.ias.selection.draws import draw_orders, order_outcomes, outcome_accuracy
from dprm.ias.sequential import CandidateLikelihood, SequentialAuto, WrongAnswerModel
from dprm.ias.sequential.pick import PickModel, ScoredLikelihood, pick_gain, score_feature
from dprm.ias.sequential.posterior import logit


def toy_model(n_max: int = 8) -> SelectionModel:
    """g_n(p) = 1 - (1 - p)^n (the fresh-draw curves the pick index replaces)."""
    grid = np.linspace(0, 1, 101)
    n = np.arange(1, n_max + 1)
    return SelectionModel(grid, 1 - (1 - grid[:, None]) ** n[None, :])


def hand_pick_model() -> PickModel:
    """log r(e, s) = logit s (the estimate reads nothing); training scores: correct
    0.2 0.6 0.8 0.95, wrong 0.1 0.3 0.4 0.7."""
    like = ScoredLikelihood(np.array([0.0, 0.0, 0.0, 1.0]), np.zeros(2))
    right = np.sort(logit(np.array([0.2, 0.6, 0.8, 0.95])))
    wrong = np.sort(logit(np.array([0.1, 0.3, 0.4, 0.7])))
    return PickModel(like, right, wrong)


def test_exceedance_counts_the_training_scores_above_with_half_a_candidate():
    model = hand_pick_model()
    # above 0.5: 3 of 4 correct, 1 of 4 wrong -> (3.5 / 5, 1.5 / 5)
    assert model.exceed(0.5) == pytest.approx((0.7, 0.3))
    # above 0.9: 1 correct, 0 wrong
    assert model.exceed(0.9) == pytest.approx((0.3, 0.1))
    assert model.exceed(-np.inf) == (1.0, 1.0)  # no pick yet: any draw outscores it


def test_pick_index_prefers_the_question_whose_current_pick_is_weak():
    """Two questions with the same prior p = 0.5 and one draw each; question 0's draw scores
    0.9, question 1's 0.5. By hand (module docstring of dprm.ias.sequential.pick):

    * question 1: r* = 0.5 / 0.5 = 1, pi = 0.5; A = (0.7, 0.3):
      gain = 0.5 * 0.5 * 0.7 - 0.5 * 0.5 * 0.3 = +0.1;
    * question 0: r* = 0.9 / 0.1 = 9, pi = 0.5 * 9 / (0.5 * 9 + 0.5) = 0.9; A = (0.3, 0.1):
      gain = 0.1 * 0.5 * 0.3 - 0.9 * 0.5 * 0.1 = -0.03 (a wrong draw may outscore a good pick).

    The extra draw goes to question 1. The fresh-draw curves value both questions alike (same
    prior, same n: a tie, question 0 first)."""
    k = 8
    samples = np.full((2, 1), 0.5)
    seq = SequentialAuto(toy_model(k), CandidateLikelihood(np.zeros(3), np.zeros(2)), None,
                         hand_pick_model())  # fmt: skip
    policy = seq.policy(samples, np.full(2, k), k)
    score = np.array([[0.9], [0.5]])
    log_r = seq.log_ratio(samples, np.full((2, 1), 0.5), score)
    np.testing.assert_allclose(log_r[:, 0], [np.log(9.0), 0.0], atol=1e-9)
    floor = policy.start(1.5, 0.0)  # total round(1.5 x 2) = 3: one draw each, one more
    np.testing.assert_array_equal(floor, [1, 1])
    policy.observe_floor([log_r[0], log_r[1]], None, [score[0], score[1]])
    np.testing.assert_allclose(policy.pick_right(0), [0.9])
    np.testing.assert_allclose(policy.pick_right(1), [0.5])
    assert policy._index(1) == pytest.approx(0.1)
    assert policy._index(0) == pytest.approx(-0.03)
    assert policy.next_round(1) == [1]
    assert policy.next_round(1) == []  # the budget is spent
    # the fresh-draw curves (no pick model) give the draw to question 0
    curves = SequentialAuto(toy_model(k), CandidateLikelihood(np.zeros(3), np.zeros(2)))
    plain = curves.policy(samples, np.full(2, k), k)
    plain.start(1.5, 0.0)
    plain.observe_floor([np.zeros(1), np.zeros(1)])
    assert plain._index(0) == pytest.approx(plain._index(1))
    assert plain.next_round(1) == [0]
    # a pending draw of question 1 discounts its next one by the chance the pick survives it
    u, v = 0.5 * 0.7, 0.5 * 0.3
    assert pick_gain(np.ones(1), np.full(1, 0.5), np.full(1, 0.5), (0.7, 0.3), pending=2) == (
        pytest.approx(0.1 * (1 - u - v) ** 2)
    )


def brute_force_pick_right(answers, ratio, pick: int, p: float, alpha: float) -> float:
    """P(draw ``pick`` is correct | answers, estimates, p) by enumerating correctness vectors
    (the correct draws state one answer that no wrong draw states; wrong answers from a CRP)."""
    num = den = 0.0
    for correct in itertools.product((0, 1), repeat=len(answers)):
        gold = {a for a, c in zip(answers, correct, strict=True) if c}
        wrong = [a for a, c in zip(answers, correct, strict=True) if not c]
        if len(gold) > 1 or gold & set(wrong):
            continue
        prob, seen = 1.0, {}
        for i, a in enumerate(wrong):  # the CRP, seat by seat
            prob *= (seen.get(a, 0) or alpha) / (alpha + i)
            seen[a] = seen.get(a, 0) + 1
        for c, r in zip(correct, ratio, strict=True):
            prob *= p * r if c else 1 - p
        den += prob
        num += prob * correct[pick]
    return num / den


@pytest.mark.parametrize(
    ("answers", "scores"),
    [(["x"], [0.3]), (["x", "y"], [0.2, 0.7]), (["x", "y", "x"], [0.6, 0.9, 0.1]),
     (["a", "b", "c", "a", "b"], [0.5, 0.4, 0.95, 0.3, 0.2])],
)  # fmt: skip
def test_pick_right_with_answers_is_the_posterior_that_the_pick_is_correct(answers, scores):
    samples = np.array([[0.1, 0.4, 0.7, 0.95]])
    model = WrongAnswerModel(0.3, 0.2)
    alpha = np.exp(model.log_alpha(samples[0]))
    rng = np.random.default_rng(len(answers))
    log_r = rng.normal(0, 1, len(answers))
    seq = SequentialAuto(toy_model(8), CandidateLikelihood(np.zeros(3), np.zeros(2)), model,
                         hand_pick_model())  # fmt: skip
    policy = seq.policy(samples, np.full(1, 8), 8, answers=True)
    policy.start(float(len(answers)), 1.0)
    policy.observe_floor([log_r], [np.array(answers, dtype=object)], [np.array(scores)])
    pick = int(np.argmax(scores))
    expect = [
        brute_force_pick_right(answers, list(np.exp(log_r)), pick, p, a)
        for p, a in zip(samples[0], alpha, strict=True)
    ]
    np.testing.assert_allclose(policy.pick_right(0), expect, atol=1e-9)


def test_scored_likelihood_reads_the_score_as_evidence():
    rng = np.random.default_rng(0)
    q, k = 300, 16
    p = rng.beta(1, 1, q)
    correct = rng.random((q, k)) < p[:, None]
    score = 1 / (1 + np.exp(-(1.5 * (2 * correct - 1) + rng.normal(0, 1, (q, k)))))
    estimate = np.full((q, k), 0.5)
    like = ScoredLikelihood.fit(p, estimate, score, correct, np.ones((q, k), bool))
    assert like.with_score[3] > 1.0  # the score's logit: about 2 x 1.5 in this simulation
    s = np.linspace(0.05, 0.95, 5)[None, :]
    assert (np.diff(like.log_ratio(np.array([0.5]), np.full((1, 5), 0.5), s)[0]) > 0).all()
    np.testing.assert_allclose(score_feature(np.array([0.5, -np.inf])), [0.0, logit(0.0)])


def simulated_pools(seed: int, q: int = 200, k: int = 32):
    """p ~ Beta(0.8, 0.8); a candidate's score logit ~ N(+1.5 / -1.5 by correctness, 1.5);
    its calibrated estimate uninformative (0.5)."""
    rng = np.random.default_rng(seed)
    p = rng.beta(0.8, 0.8, q)
    correct = (rng.random((q, k)) < p[:, None]).astype(np.float64)
    score = 1 / (1 + np.exp(-(1.5 * (2 * correct - 1) + 1.5 * rng.standard_normal((q, k)))))
    samples = np.clip(p[:, None] + np.linspace(-0.15, 0.15, 11)[None, :], 0.01, 0.99)
    return samples, correct, score


def test_pick_policy_spends_exactly_the_budget_and_beats_the_curves_index():
    """Fitted on training pools, run on other pools: every mean budget is spent exactly (with
    rounds, and reading answers), and at equal budget the highest-score pick is right more
    often than under the fresh-draw curves or uniform best-of-N (common draw orders)."""
    k = 32
    train_samples, train_correct, train_score = simulated_pools(1, k=k)
    samples, correct, score = simulated_pools(2, k=k)
    valid = np.ones_like(correct, dtype=bool)
    half = np.full_like(correct, 0.5)
    model = toy_model(k)
    pick = SequentialAuto.fit(model, train_samples, half, train_correct, valid,
                              train_score=train_score)  # fmt: skip
    plain = SequentialAuto.fit(model, train_samples, half, train_correct, valid)
    assert pick.pick is not None and plain.pick is None
    q = len(samples)
    size = np.full(q, k)
    size[:5] = 3  # a few small pools: their caps bind
    orders = draw_orders(size, 3, seed=0)
    mean_budgets = [1.5, 4.0, 8.0]
    for round_size in (1, 7):
        b = pick.budgets(samples, half, size, orders, mean_budgets, 0.0, k, round_size=round_size,
                         score=score)  # fmt: skip
        for j, mb in enumerate(mean_budgets):
            assert (b[j].sum(axis=1) == round(mb * q)).all()
            assert (b[j] >= 1).all() and (b[j] <= size[None, :]).all()
    answer = np.where(correct > 0.5, 0, 1 + np.arange(k)[None, :] % 3)  # wrong: three values
    with_answers = SequentialAuto(model, pick.likelihood, WrongAnswerModel(0.0, 0.0), pick.pick)
    b = with_answers.budgets(samples, half, size, orders, [4.0], 0.25, k, answer=answer,
                             score=score)  # fmt: skip
    assert (b[0].sum(axis=1) == 4 * q).all()
    with pytest.raises(ValueError, match="rule scores"):
        pick.budgets(samples, half, size, orders, [4.0], 0.0, k)
    weight = np.where(np.arange(k)[None, :] < size[:, None], score, -np.inf)
    outcomes = order_outcomes(weight, correct, orders)
    by_pick = pick.budgets(samples, half, size, orders, [4.0], 0.0, k, score=weight)[0]
    by_curves = plain.budgets(samples, half, size, orders, [4.0], 0.0, k)[0]
    acc_pick = outcome_accuracy(outcomes, by_pick)[0]
    acc_curves = outcome_accuracy(outcomes, by_curves)[0]
    acc_uniform = outcome_accuracy(outcomes, np.minimum(size, 4))[0]
    assert acc_pick > acc_curves + 0.02 and acc_pick > acc_uniform + 0.02


def test_majority_keeps_the_race_index():
    """The pick index is the highest-* rules' alone: a majority policy ignores a pick model
    (its budgets are the race's, with or without one)."""
    k = 8
    model = WrongAnswerModel(0.0, 0.0)
    like = CandidateLikelihood(np.zeros(3), np.zeros(2))
    with_pick = SequentialAuto(toy_model(k), like, model, hand_pick_model())
    without = SequentialAuto(toy_model(k), like, model)
    rng = np.random.default_rng(3)
    q = 12
    samples = np.sort(rng.random((q, 5)), axis=1)
    answer = rng.integers(0, 3, (q, k))
    orders = draw_orders(np.full(q, k), 2, seed=4)
    kw = dict(answer=answer, majority=True)
    race = without.budgets(samples, np.full((q, k), 0.5), np.full(q, k), orders, [3.0], 0.0, k,
                           **kw)  # fmt: skip
    np.testing.assert_array_equal(
        with_pick.budgets(samples, np.full((q, k), 0.5), np.full(q, k), orders, [3.0], 0.0, k,
                          score=rng.random((q, k)), **kw),
        race,
    )  # fmt: skip
    assert with_pick.policy(samples, np.full(q, k), k, answers=True, majority=True).pick is None
