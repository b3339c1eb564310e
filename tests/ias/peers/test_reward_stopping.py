"""Reward-based stopping rules (dprm.ias.peers.reward_stopping), each pinned to a hand-worked
case of its rule, and fitted on the training pools only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprm.ias.peers.methods import PEERS, DrawView, TrainingScores, peers_for_rule
from dprm.ias.peers.reward_stopping import (
    NIGPrior,
    beacon_improvement,
    fit_nig,
    nig_predictive,
    reservation_value,
    student_t_improvement,
)


def _sigmoid(y):
    return 1 / (1 + np.exp(-np.asarray(y, dtype=np.float64)))


def _view(scores: np.ndarray, train: TrainingScores | None, cap: int | None = None) -> DrawView:
    """One draw order of Q questions: scores [Q, K] (-inf padding), distinct answers."""
    q_count, k = scores.shape
    answer = np.tile(np.arange(k), (q_count, 1))[None]
    caps = np.full(q_count, k if cap is None else cap, dtype=np.int64)
    return DrawView(answer, scores[None], None, caps, 64, train)


def test_reservation_value_of_a_two_point_reward():
    """X = 0.2 or 0.8, each with probability 1/2. For 0.2 <= s <= 0.8, E[(X - s)^+] =
    (0.8 - s) / 2, so c = 0.1 gives s = 0.6; below 0.2 it is 0.5 - s, so c = 0.35 gives 0.15;
    c = 0: never stop."""
    assert reservation_value(np.array([0.2, 0.8]), 0.1) == pytest.approx(0.6)
    assert reservation_value(np.array([0.8, 0.2, 0.8, 0.2]), 0.1) == pytest.approx(0.6)
    assert reservation_value(np.array([0.2, 0.8]), 0.35) == pytest.approx(0.15)
    assert reservation_value(np.array([0.2, 0.8]), 0.0) == math.inf


def test_reservation_value_of_a_uniform_reward():
    """X uniform on [0, 1]: E[(X - s)^+] = (1 - s)^2 / 2 = c, so s = 1 - sqrt(2c) (0.8 at c =
    0.02, 0.5 at c = 0.125)."""
    grid = np.linspace(0, 1, 200001)
    assert reservation_value(grid, 0.02) == pytest.approx(0.8, abs=1e-4)
    assert reservation_value(grid, 0.125) == pytest.approx(0.5, abs=1e-4)


def test_pandora_stops_at_the_first_draw_at_or_above_the_reservation_value():
    """Training rewards 0.2 / 0.8 (sigma(0.1) = 0.6, sigma(0.35) = 0.15): draws 0.3, 0.5, 0.9
    stop at the third at c = 0.1 and at the first at c = 0.35; draws that never reach 0.6 stop
    at the cap; c = 0 never stops."""
    train = TrainingScores(np.array([0.2, 0.8, 0.2, 0.8]), None, np.array([0, 0, 1, 1]))
    scores = np.array([[0.3, 0.5, 0.9, 0.1, 0.95], [0.3, 0.4, 0.5, 0.55, 0.59]])
    budgets = PEERS["pandora"].budgets(_view(scores, train), [0.1, 0.35, 0.0])
    assert budgets[:, 0].tolist() == [[3, 5], [1, 1], [5, 5]]
    # the cap, and padding past a question's pool
    padded = np.array([[0.3, 0.5, -np.inf, -np.inf, -np.inf], [0.3, 0.6, 0.7, 0.8, 0.9]])
    view = _view(padded, train)
    view.cap[:] = [2, 5]
    assert PEERS["pandora"].budgets(view, [0.1])[0, 0].tolist() == [2, 2]


def test_the_student_t_improvement_matches_its_closed_form():
    """E[T^+] of a Student-t with nu = 3 is sqrt(3) Gamma(1) / (2 sqrt(pi) Gamma(3/2)) =
    sqrt(3) / pi; at large nu, the normal's E[(Z - z)^+] = phi(z) - z (1 - Phi(z))."""
    assert student_t_improvement(np.array(0.0), 3.0) == pytest.approx(math.sqrt(3) / math.pi,
                                                                      rel=1e-5)  # fmt: skip
    z = 0.5
    phi = math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    tail = 0.5 * math.erfc(z / math.sqrt(2))
    assert student_t_improvement(np.array(z), 1e6) == pytest.approx(phi - z * tail, rel=1e-4)


def test_the_nig_posterior_predictive_by_hand():
    """Prior NIG(0, 1, 2, 2), one draw y = 1: k1 = 2, m1 = 1/2, a1 = 5/2,
    b1 = 2 + 0 + 1 * 1 * 1 / (2 * 2) = 9/4; predictive t with nu = 5, location 1/2,
    scale^2 = (9/4)(3) / ((5/2)(2)) = 1.35."""
    nu, loc, scale = nig_predictive(NIGPrior(0.0, 1.0, 2.0, 2.0), 1.0, np.array(1.0), np.array(0.0))
    assert (float(nu), float(loc), float(scale) ** 2) == pytest.approx((5.0, 0.5, 1.35))


def test_beacon_stops_when_one_more_draw_is_not_worth_its_cost():
    """A prior so strong that the predictive stays N(0, 1) (k0, a0 huge; b0 = a0 - 1): the
    expected improvement over the best logit b is phi(b) - b (1 - Phi(b)): 0.399 after a
    draw of logit 0, 0.198 after one of logit 0.5. At c = 0.3 the draws 0, 0.5, ... stop at the
    second; at c = 0.45 at the first; at c = 0.1 they go on to the logit 1.5 (0.029)."""
    big = 1e7
    prior = NIGPrior(0.0, big, big, big - 1)
    scores = _sigmoid([[0.0, 0.5, 0.2, 1.5, 0.0]])
    ei = beacon_improvement(_view(scores, None), prior)[0, 0]
    assert ei[:2] == pytest.approx([0.39894, 0.19780], abs=1e-4)
    assert ei[3] == pytest.approx(0.02931, abs=1e-4)


def test_beacon_budgets_read_the_prior_fitted_on_the_training_pools(monkeypatch):
    """The registered peer fits its prior on ``view.train`` and stops at the first n with
    expected improvement <= c (the hand-worked prior of the previous test, given by the fit)."""
    from dprm.ias.peers import reward_stopping

    big = 1e7
    fitted = []

    def fake_fit(values, question):
        fitted.append((np.asarray(values).copy(), np.asarray(question).copy()))
        return NIGPrior(0.0, big, big, big - 1)

    monkeypatch.setattr(reward_stopping, "fit_nig", fake_fit)
    train = TrainingScores(np.array([0.3, 0.7, 0.4, 0.6]), None, np.array([0, 0, 1, 1]))
    scores = _sigmoid([[0.0, 0.5, 0.2, 1.5, 0.0]])
    budgets = PEERS["beacon"].budgets(_view(scores, train), [0.3, 0.45, 0.1, 0.0])
    assert budgets[:, 0, 0].tolist() == [2, 1, 4, 5]
    np.testing.assert_array_equal(fitted[0][0], train.raw)


def test_the_nig_fit_recovers_its_prior_by_moments():
    """Logits drawn from NIG(1, 2, 6, 5): the moment fit comes back near it."""
    rng = np.random.default_rng(0)
    q_count, k = 4000, 16
    s2 = 1 / rng.gamma(6.0, 1 / 5.0, q_count)
    mu = rng.normal(1.0, np.sqrt(s2 / 2.0))
    y = rng.normal(mu[:, None], np.sqrt(s2)[:, None], (q_count, k))
    prior = fit_nig(_sigmoid(y).ravel(), np.repeat(np.arange(q_count), k))
    assert prior.m0 == pytest.approx(1.0, abs=0.05)
    assert prior.k0 == pytest.approx(2.0, rel=0.2)
    assert prior.a0 == pytest.approx(6.0, rel=0.3)
    assert prior.b0 / (prior.a0 - 1) == pytest.approx(1.0, rel=0.05)  # E[s2] = 5 / 5


@pytest.mark.parametrize("name", ["beacon", "pandora"])
def test_both_rules_are_fitted_on_the_training_pools_only(name):
    """A question's draws depend on the training scores and its own draws, never on the other
    test questions: changing another test question leaves it alone, changing the training
    pools moves it. Without training scores the rule refuses."""
    rng = np.random.default_rng(1)
    scores = _sigmoid(rng.normal(0.0, 1.5, (6, 32)))
    train = TrainingScores(_sigmoid(rng.normal(0.0, 1.5, 400)), None, np.repeat(np.arange(25), 16))
    peer = PEERS[name]
    levels = peer.levels(_view(scores, train), train)
    assert len(levels) == 12 and levels[-1] == 0.0
    base = peer.budgets(_view(scores, train), levels)
    other = scores.copy()
    other[1:] = _sigmoid(rng.normal(3.0, 0.1, (5, 32)))  # every other test question changed
    np.testing.assert_array_equal(peer.budgets(_view(other, train), levels)[:, 0, 0],
                                  base[:, 0, 0])  # fmt: skip
    shifted = TrainingScores(_sigmoid(logit_of(train.raw) + 2.0), None, train.question)
    assert not np.array_equal(peer.budgets(_view(scores, shifted), levels), base)
    assert (base[-1] == 32).all()  # c = 0: never stop
    assert base[0].mean() <= base[-2].mean()  # a dearer draw stops no later on average
    with pytest.raises(ValueError, match="training pools"):
        peer.budgets(_view(scores, None), levels)


def logit_of(s):
    return np.log(s / (1 - s))


def test_the_reward_rules_run_for_score_picks_only():
    assert {"beacon", "pandora"} <= set(peers_for_rule("highest-last", calibrated=False))
    assert not {"beacon", "pandora"} & set(peers_for_rule("majority", calibrated=True))
