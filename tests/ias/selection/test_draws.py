"""Draw orders and the rules' outcomes along them (dprm.ias.selection.draws)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dprm.ias.paper.accuracy import exact_accuracy_table
from dprm.ias.selection.draws import draw_orders, order_outcomes, outcome_accuracy
from dprm.ias.selection.rules import Candidates


def test_order_outcomes_by_hand():
    weight = np.array([[0.2, 0.9, 0.5]])
    correct = np.array([[1.0, 0.0, 1.0]])
    orders = np.array([[[2, 0, 1]]])  # draw candidate 2, then 0, then 1
    out = order_outcomes(weight, correct, orders)
    np.testing.assert_array_equal(out[0, 0], [1.0, 1.0, 0.0])  # picks 2, 2 (0.5 > 0.2), 1


def test_order_outcomes_over_all_orders_equal_the_exact_table():
    rng = np.random.default_rng(0)
    k = 4
    weight = rng.random((3, k))
    weight[2, 3] = -np.inf  # a pool of 3: padding drawn last
    correct = (rng.random((3, k)) < 0.5).astype(float)
    correct[2, 3] = 0.0
    size = np.array([4, 4, 3])
    perms = np.array(list(itertools.permutations(range(k))))  # [24, 4]
    orders = np.broadcast_to(perms[:, None, :], (len(perms), 3, k)).copy()
    orders[:, 2] = np.array([list(p) + [3] for p in itertools.permutations(range(3))] * 4)
    out = order_outcomes(weight, correct, orders).mean(axis=0)  # every order equally often
    cands = Candidates(
        np.arange(3), size, np.where(np.arange(k)[None] < size[:, None], 0, -1), correct,
        {"last": weight},
    )  # fmt: skip
    exact = exact_accuracy_table(cands.pools(weight), k)
    np.testing.assert_allclose(out, exact, atol=1e-6)


def test_draw_orders_are_deterministic_permutations_with_padding_last():
    size = np.array([5, 3])
    a, b = draw_orders(size, 6, seed=3), draw_orders(size, 6, seed=3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, draw_orders(size, 6, seed=4))
    for t in range(6):
        assert sorted(a[t, 0]) == list(range(5))
        assert sorted(a[t, 1, :3]) == [0, 1, 2] and list(a[t, 1, 3:]) == [3, 4]


def test_outcome_accuracy_reads_budgets_and_gives_a_standard_error():
    outcomes = np.array([[[0, 1, 1]], [[1, 1, 0]]], dtype=np.float32)  # [T=2, Q=1, K=3]
    acc, se, per = outcome_accuracy(outcomes, np.array([2]))
    assert acc == pytest.approx(1.0) and se == pytest.approx(0.0)
    acc, se, per = outcome_accuracy(outcomes, np.array([[1], [3]]))
    np.testing.assert_allclose(per, [0.0, 0.0])
    acc, _, per = outcome_accuracy(outcomes, np.array([5]))  # above K: the whole pool
    np.testing.assert_allclose(per, [1.0, 0.0])
