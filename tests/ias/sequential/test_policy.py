"""Sequential auto (dprm.ias.sequential): the likelihood, the answers' CRP, the race and the policy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dprm.ias.learnt.allocation import SelectionModel, auto_budgets
from dprm.ias.selection.draws import draw_orders, outcome_accuracy, vote_order_outcomes
from dprm.ias.sequential import CandidateLikelihood, SequentialAuto, WrongAnswerModel, rising_log


def toy_model(n_max: int = 8) -> SelectionModel:
    """g_n(p) = 1 - (1 - p)^n: strictly concave in n for p in (0, 1)."""
    grid = np.linspace(0, 1, 101)
    n = np.arange(1, n_max + 1)
    return SelectionModel(grid, 1 - (1 - grid[:, None]) ** n[None, :])


def test_likelihood_ratio_grows_with_the_candidate_estimate():
    rng = np.random.default_rng(1)
    q, k = 300, 16
    p = rng.beta(1, 1, q)
    correct = rng.random((q, k)) < p[:, None]
    estimate = 1 / (1 + np.exp(-(2.0 * (2 * correct - 1) + rng.normal(0, 1, (q, k)))))
    like = CandidateLikelihood.fit(p, estimate, correct, np.ones((q, k), bool))
    e = np.linspace(0.05, 0.95, 7)[None, :]
    log_r = like.log_ratio(np.array([0.5]), e)[0]
    assert (np.diff(log_r) > 0).all() and log_r[0] < 0 < log_r[-1]


def test_policy_spends_exactly_the_budget_within_caps_and_is_deterministic():
    rng = np.random.default_rng(2)
    q, k, m = 12, 8, 10
    samples = np.sort(rng.random((q, m)), axis=1)
    candidate = rng.random((q, k))
    size = np.full(q, k)
    size[0] = 3
    orders = draw_orders(size, 4, seed=0)
    like = CandidateLikelihood(np.array([0.0, 0.2, 0.8]), np.array([0.0, 1.0]))
    seq = SequentialAuto(toy_model(k), like)
    mean_budgets = [1.5, 3.0, 6.0]
    b = seq.budgets(samples, candidate, size, orders, mean_budgets, floor_share=0.5, n_max=k)
    assert b.shape == (3, 4, q)
    for j, mb in enumerate(mean_budgets):
        assert (b[j].sum(axis=1) == round(mb * q)).all()
        assert (b[j] >= 1).all() and (b[j] <= size[None, :]).all()
        assert (b[j] >= min(round(0.5 * mb), int(mb))).all()  # the uniform floor
    again = seq.budgets(samples, candidate, size, orders, mean_budgets, floor_share=0.5, n_max=k)
    np.testing.assert_array_equal(b, again)


def test_uninformative_candidates_reduce_to_the_fixed_auto_allocation():
    rng = np.random.default_rng(4)
    q, k, m = 10, 8, 6
    samples = np.sort(rng.uniform(0.02, 0.9, (q, m)), axis=1)
    model = toy_model(k)
    flat = CandidateLikelihood(np.zeros(3), np.zeros(2))  # r(e) = 1: nothing to learn
    seq = SequentialAuto(model, flat)
    orders = draw_orders(np.full(q, k), 2, seed=1)
    for mb in (2.0, 4.5):
        b = seq.budgets(samples, rng.random((q, k)), np.full(q, k), orders, [mb], 0.0, k)
        fixed = auto_budgets(model.expected_curve(samples), mb, 0.0)
        np.testing.assert_array_equal(b[0, 0], fixed)
        np.testing.assert_array_equal(b[0, 1], fixed)


def test_rounds_spend_the_budget_and_read_estimates_only_between_rounds():
    """``round_size``: 1 is the default policy; a round as large as the budget chooses every
    draw from the floor's posteriors (the later estimates are never read); in between, the
    total is spent exactly."""
    rng = np.random.default_rng(6)
    q, k, m = 9, 12, 8
    samples = np.sort(rng.random((q, m)), axis=1)
    candidate = rng.random((q, k))
    size = np.full(q, k)
    orders = draw_orders(size, 3, seed=2)
    like = CandidateLikelihood(np.array([0.0, 0.3, 1.5]), np.array([0.0, 1.0]))
    seq = SequentialAuto(toy_model(k), like)
    mb = [2.0, 4.0]
    one = seq.budgets(samples, candidate, size, orders, mb, 0.25, k)
    np.testing.assert_array_equal(
        one, seq.budgets(samples, candidate, size, orders, mb, 0.25, k, round_size=1)
    )
    for size_r in (2, 5):
        b = seq.budgets(samples, candidate, size, orders, mb, 0.25, k, round_size=size_r)
        for j, budget in enumerate(mb):
            assert (b[j].sum(axis=1) == round(budget * q)).all() and (b[j] <= k).all()
    # one round holds the whole budget: the estimates after the floor (1 draw) are never read
    whole = seq.budgets(samples, candidate, size, orders, [4.0], 0.25, k, round_size=10**6)
    later = candidate.copy()
    first = np.take_along_axis(orders[0], np.zeros((q, 1), np.int64), axis=1)  # order 0's floor
    mask = np.ones_like(later, bool)
    np.put_along_axis(mask, first, False, axis=1)
    later[mask] = rng.random(mask.sum())
    again = seq.budgets(samples, later, size, orders[:1], [4.0], 0.25, k, round_size=10**6)
    np.testing.assert_array_equal(whole[:, :1], again)
    seq_again = seq.budgets(samples, later, size, orders[:1], [4.0], 0.25, k)
    assert not np.array_equal(one[1:2, :1], seq_again), "one draw at a time reads them"


# --- answers (BoN contract v2): the CRP likelihood of the draws' final answers ---------------


def crp_sequence_probability(answers: list, alpha: float) -> float:
    """P of a sequence of wrong answers under a CRP, seat by seat: a new value with probability
    alpha / (alpha + i), a value seen t times with t / (alpha + i)."""
    seen: dict = {}
    prob = 1.0
    for i, a in enumerate(answers):
        prob *= (seen.get(a, 0) or alpha) / (alpha + i)
        seen[a] = seen.get(a, 0) + 1
    return prob


def brute_force_likelihood(answers: list, ratio: list, p: float, alpha: float) -> float:
    """P(answers, estimates | p) up to a constant, by enumerating every correctness vector:
    the correct draws must state one answer (the gold one) that no wrong draw states."""
    total = 0.0
    for correct in itertools.product((0, 1), repeat=len(answers)):
        gold = {a for a, c in zip(answers, correct, strict=True) if c}
        wrong = [a for a, c in zip(answers, correct, strict=True) if not c]
        if len(gold) > 1 or gold & set(wrong):
            continue
        prob = crp_sequence_probability(wrong, alpha)
        for c, r in zip(correct, ratio, strict=True):
            prob *= p * r if c else 1 - p
        total += prob
    return total


def answer_policy(samples: np.ndarray, model: WrongAnswerModel, k: int = 8):
    seq = SequentialAuto(toy_model(k), CandidateLikelihood(np.zeros(3), np.zeros(2)), model)
    return seq.policy(samples, np.full(len(samples), k), k, answers=True)


def test_rising_log_is_the_log_rising_factorial():
    alpha = np.array([0.3, 2.0])
    table = rising_log(alpha, 4)
    for a, row in zip(alpha, table, strict=True):
        expect = [np.log(np.prod(a + np.arange(t))) for t in range(5)]
        np.testing.assert_allclose(row, expect, atol=1e-12)


@pytest.mark.parametrize(
    "answers",
    [["x"], ["x", "x"], ["x", "y"], ["x", "y", "x"], ["a", "b", "c", "a", "a"], ["a"] * 4],
)
def test_answer_likelihood_equals_brute_force_enumeration(answers):
    samples = np.array([[0.05, 0.3, 0.6, 0.9]])
    model = WrongAnswerModel(0.4, 0.3)
    alpha = np.exp(model.log_alpha(samples[0]))
    rng = np.random.default_rng(len(answers))
    log_r = rng.normal(0, 1, len(answers))
    policy = answer_policy(samples, model)
    policy.start(float(len(answers)), 1.0)
    policy.observe_floor([log_r], [np.array(answers, dtype=object)])
    expect = np.log(
        [brute_force_likelihood(answers, list(np.exp(log_r)), p, a)
         for p, a in zip(samples[0], alpha, strict=True)]
    )  # fmt: skip
    # equal up to one constant over the prior samples (the posterior is what matters)
    diff = policy.log_w[0] - expect
    np.testing.assert_allclose(diff, diff[0], atol=1e-9)
    # and observing one draw at a time reaches the same posterior
    stepwise = answer_policy(samples, model)
    stepwise.start(float(len(answers)), 1.0)
    stepwise.observe_floor([log_r[:1]], [np.array(answers[:1], dtype=object)])
    stepwise.left = len(answers)
    for a, r in zip(answers[1:], log_r[1:], strict=True):
        stepwise.next_round(1)
        stepwise.observe(0, r, a)
    np.testing.assert_allclose(stepwise.log_w[0], policy.log_w[0], atol=1e-9)


def test_agreement_is_evidence_of_a_large_success_probability():
    samples = np.linspace(0.02, 0.98, 25)[None, :]
    model = WrongAnswerModel(np.log(2.0), 0.0)

    def posterior_mean(answers):
        policy = answer_policy(samples, model)
        policy.start(float(len(answers)), 1.0)
        policy.observe_floor([np.zeros(len(answers))], [np.array(answers)])
        w = np.exp(policy.log_w[0] - policy.log_w[0].max())
        return float(w @ samples[0] / w.sum())

    agree, scattered = posterior_mean(["7"] * 4), posterior_mean(["1", "2", "3", "4"])
    assert agree > 0.6 and scattered < 0.35  # the prior mean is 0.5
    # a systematic mistake is likelier where wrong answers cluster (small alpha): agreement
    # then says less about p
    clustered = WrongAnswerModel(np.log(0.2), 0.0)
    policy = answer_policy(samples, clustered)
    policy.start(4.0, 1.0)
    policy.observe_floor([np.zeros(4)], [np.array(["7"] * 4)])
    w = np.exp(policy.log_w[0] - policy.log_w[0].max())
    assert float(w @ samples[0] / w.sum()) < agree


def test_wrong_answer_model_recovers_the_concentration_of_simulated_pools():
    rng = np.random.default_rng(5)
    q, k = 600, 64
    p = rng.beta(0.7, 0.7, q)
    true = WrongAnswerModel(0.6, 0.3)
    alpha = np.exp(true.log_alpha(p))
    correct = rng.random((q, k)) < p[:, None]
    answer = np.zeros((q, k), dtype=np.int64)  # 0: gold
    for i in range(q):
        counts: list[int] = []
        for j in np.flatnonzero(~correct[i]):  # CRP seating of the wrong answers
            weights = np.array([*counts, alpha[i]], dtype=float)
            c = rng.choice(len(weights), p=weights / weights.sum())
            if c == len(counts):
                counts.append(0)
            counts[c] += 1
            answer[i, j] = c + 1
    fitted = WrongAnswerModel.fit(answer, correct.astype(float), np.ones((q, k), bool))
    assert fitted.intercept == pytest.approx(0.6, abs=0.15)
    assert fitted.slope == pytest.approx(0.3, abs=0.1)
    again = WrongAnswerModel.fit(answer, correct.astype(float), np.ones((q, k), bool))
    assert again == fitted  # deterministic
    # no question with two wrong answers: alpha = 1
    assert WrongAnswerModel.fit(answer[:, :1], np.ones((q, 1)), np.ones((q, 1), bool)) == (
        WrongAnswerModel(0.0, 0.0)
    )


def test_answer_policy_spends_the_budget_and_stops_early_on_agreement():
    """Two questions with the same prior: the one whose draws agree gets fewer draws."""
    k = 16
    samples = np.tile(np.linspace(0.05, 0.95, 19), (2, 1))
    model = WrongAnswerModel(np.log(2.0), 0.0)
    seq = SequentialAuto(toy_model(k), CandidateLikelihood(np.zeros(3), np.zeros(2)), model)
    answer = np.stack([np.zeros(k, np.int64), np.arange(k)])  # agree / all different
    orders = draw_orders(np.full(2, k), 3, seed=0)
    b = seq.budgets(samples, np.full((2, k), 0.5), np.full(2, k), orders, [4.0], 0.0, k,
                    answer=answer)  # fmt: skip
    assert (b.sum(axis=2) == 8).all()
    assert (b[0, :, 0] < b[0, :, 1]).all()
    blind = seq.budgets(samples, np.full((2, k), 0.5), np.full(2, k), orders, [4.0], 0.0, k)
    assert (blind[0, :, 0] == blind[0, :, 1]).all()  # without answers they look alike
    with pytest.raises(ValueError, match="without answers"):
        SequentialAuto(toy_model(k), CandidateLikelihood(np.zeros(3), np.zeros(2))).policy(
            samples, np.full(2, k), k, answers=True
        )


# --- the majority race index -------------------------------------------------------------


def race_policy(samples: np.ndarray, model: WrongAnswerModel, k: int = 16):
    seq = SequentialAuto(toy_model(k), CandidateLikelihood(np.zeros(3), np.zeros(2)), model)
    return seq.policy(samples, np.full(len(samples), k), k, answers=True, majority=True)


def read(policy, answers: list) -> None:
    policy.start(float(len(answers)), 1.0)
    policy.observe_floor([np.zeros(len(answers))], [np.array(answers, dtype=object)])


@pytest.mark.parametrize(
    "answers", [["x", "x", "y"], ["x", "y"], ["a", "b", "c", "b"], ["x"] * 3, ["u", "v", "u", "v"]]
)
def test_race_now_is_the_posterior_probability_that_the_vote_is_right(answers):
    """d = 0: the vote's current pick is right with the posterior probability that its cluster
    is the gold one (ties: half each), by brute-force enumeration of correctness vectors."""
    samples = np.array([[0.1, 0.4, 0.7, 0.9]])  # four samples: four groups, no merging
    model = WrongAnswerModel(0.4, 0.3)
    alpha = np.exp(model.log_alpha(samples[0]))
    policy = race_policy(samples, model)
    read(policy, answers)
    gold_mass: dict = {}
    for correct in itertools.product((0, 1), repeat=len(answers)):
        gold = {a for a, c in zip(answers, correct, strict=True) if c}
        wrong = [a for a, c in zip(answers, correct, strict=True) if not c]
        if len(gold) > 1 or gold & set(wrong):
            continue
        key = next(iter(gold)) if gold else None
        for p, a in zip(samples[0], alpha, strict=True):
            prob = crp_sequence_probability(wrong, a) * p ** sum(correct)
            prob *= (1 - p) ** (len(answers) - sum(correct))
            gold_mass[key] = gold_mass.get(key, 0.0) + prob
    total = sum(gold_mass.values())
    counts = {a: answers.count(a) for a in set(answers)}
    leaders = [a for a, c in counts.items() if c == max(counts.values())]
    expect = sum(gold_mass.get(a, 0.0) for a in leaders) / total / len(leaders)
    assert policy.race_wins(0, 4)[0] == pytest.approx(expect, abs=1e-9)


def test_race_wins_match_a_simulation_of_the_race():
    """The dynamic programme over the lead equals simulated trinomial walks (same model)."""
    samples = np.array([[0.2, 0.5, 0.8]])
    model = WrongAnswerModel(0.3, 0.2)
    policy = race_policy(samples, model)
    answers = ["x", "y", "x", "z", "y"]
    read(policy, answers)
    wins = policy.race_wins(0, 6)
    terms = policy._joint[0]
    post = np.exp(terms - terms.max())
    post /= post.sum()
    p = samples[0]
    alpha = np.exp(model.log_alpha(p))
    # hypotheses: 0 (gold unseen), clusters in first-seen order x (2), y (2), z (1)
    lead = np.array([-2, 0, 0, -1])[:, None]
    rival = np.array([2, 2, 2, 2])[:, None]
    wrong = np.array([5, 3, 3, 4])[:, None]
    down = (1 - p) * np.minimum(rival / (wrong + alpha), 1)
    rng = np.random.default_rng(0)
    sims = 200_000
    pick = rng.choice(post.size, size=sims, p=post.ravel())
    up_s = np.broadcast_to(p, post.shape).ravel()[pick]
    down_s, lead_s = down.ravel()[pick], np.broadcast_to(lead, post.shape).ravel()[pick]
    for d in range(7):
        u = rng.random((sims, d))
        moves = (u < up_s[:, None]).sum(1) - (
            (u >= up_s[:, None]) & (u < (up_s + down_s)[:, None])
        ).sum(1)
        final = lead_s + moves
        sim = np.mean((final > 0) + 0.5 * (final == 0))
        assert wins[d] == pytest.approx(sim, abs=4 / np.sqrt(sims))


def test_race_index_prefers_a_contested_vote_to_a_settled_one():
    samples = np.linspace(0.05, 0.95, 19)[None, :]
    model = WrongAnswerModel(np.log(2.0), 0.0)
    settled, contested = race_policy(samples, model), race_policy(samples, model)
    read(settled, ["7"] * 6)
    read(contested, ["7", "3", "7", "3", "1", "2"])
    assert settled._index(0) < 0.02 < contested._index(0)
    with pytest.raises(ValueError, match="reads the draws' answers"):
        SequentialAuto(toy_model(8), CandidateLikelihood(np.zeros(3), np.zeros(2)), model).policy(
            samples, np.full(1, 8), 8, answers=False, majority=True
        )


def test_race_policy_beats_uniform_majority_on_simulated_pools():
    """Pools from the answer model itself (gold with probability p, wrong answers from a CRP):
    at the same total budget the race policy's majority vote is right more often than uniform
    best-of-N's, on common draw orders; the curve index (no race) gains less."""
    rng = np.random.default_rng(3)
    q, k = 240, 24
    p = rng.beta(0.8, 0.8, q)
    model = WrongAnswerModel(np.log(1.5), 0.0)
    answer = np.zeros((q, k), dtype=np.int64)
    for i in range(q):
        counts: list[int] = []
        for j in range(k):
            if rng.random() < p[i]:
                continue  # gold: code 0
            weights = np.array([*counts, 1.5])
            c = rng.choice(len(weights), p=weights / weights.sum())
            if c == len(counts):
                counts.append(0)
            counts[c] += 1
            answer[i, j] = c + 1
    samples = np.clip(p[:, None] + np.linspace(-0.1, 0.1, 10)[None, :], 0.01, 0.99)
    group_correct = np.zeros((q, k))
    group_correct[:, 0] = 1.0
    orders = draw_orders(np.full(q, k), 4, seed=1)
    outcomes = vote_order_outcomes(answer, np.ones((q, k)), group_correct, np.full(q, k), orders, 0)
    seq = SequentialAuto(toy_model(k), CandidateLikelihood(np.zeros(3), np.zeros(2)), model)
    kw = dict(n_max=k, answer=answer)
    race = seq.budgets(samples, np.full((q, k), 0.5), np.full(q, k), orders, [4.0], 0.25,
                       majority=True, **kw)[0]  # fmt: skip
    assert (race.sum(axis=1) == 4 * q).all()
    curves = seq.budgets(samples, np.full((q, k), 0.5), np.full(q, k), orders, [4.0], 0.25,
                         **kw)[0]  # fmt: skip
    uniform = outcome_accuracy(outcomes, np.full(q, 4))[0]
    race_acc = outcome_accuracy(outcomes, race)[0]
    assert race_acc > uniform + 0.03
    assert race_acc > outcome_accuracy(outcomes, curves)[0] + 0.01
