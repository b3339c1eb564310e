"""Tests for :mod:`dprm.ias` (docs/design.md §4).

Budgets are checked against a brute-force loop that evaluates the defining inequality in exact
rational arithmetic (``fractions.Fraction`` of the float64 inputs), including knife-edge values
of C placed on a boundary 1 - (1 - p)^k in float64, where a float64 search can be wrong. Exact accuracies are checked
against full enumeration on small pools (all subsets / all orders) and against a 20,000-trial
Monte Carlo on 64-candidate pools.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dprm import ias
from dprm.data.contract import BonSet
from dprm.metrics import midpoint_levels, true_quantiles


def clip(p: float) -> float:
    return min(max(p, 1e-4), 1 - 1e-4)


def brute_budget(p: float, c: float, n_max: int = 64) -> int:
    """The point rule in exact rational arithmetic (the reference)."""
    return brute_mixture([p], c, n_max)


def brute_mixture(q, c: float, n_max: int = 64) -> int:
    """The mixture rule in exact rational arithmetic (the reference)."""
    fails = [1 - Fraction(clip(float(v))) for v in q]
    for n in range(1, n_max + 1):
        if 1 - sum(f**n for f in fails) / len(fails) >= Fraction(float(c)):
            return n
    return n_max


def float_budget(p: float, c: float, n_max: int = 64) -> int:
    """The point rule searched in plain float64 (what the exact search replaces)."""
    for n in range(1, n_max + 1):
        if 1.0 - fail_after(p, n) >= c:
            return n
    return n_max


def fail_after(p: float, k: int) -> float:
    """(1 - p)^k as the loop ``f *= 1 - p`` evaluates it (p clipped like the rule)."""
    p = min(max(p, 1e-4), 1 - 1e-4)
    f = 1.0
    for _ in range(k):
        f *= 1.0 - p
    return f


def random_pools(rng, q: int, k: int = 64, ties: bool = True) -> ias.Pools:
    p = rng.beta(1.0, 1.5, q)
    correct = rng.random((q, k)) < p[:, None]
    score = rng.normal(correct * 1.2, 1.0)
    if ties:
        score = np.round(score, 1)  # many tied scores
    return ias.Pools.from_arrays(list(score), list(correct))


# ----------------------------------------------------------------------------- budgets
def test_budget_point_matches_brute_force_random():
    rng = np.random.default_rng(0)
    p = np.concatenate([rng.random(400), rng.random(100) * 1e-3, [0.0, 1.0, 1e-4, 0.5]])
    c = rng.choice(np.array(ias.C_GRID + (0.0, 0.3, 1.0)), len(p))
    got = ias.budget_point(p, c)
    want = [brute_budget(pi, ci) for pi, ci in zip(p, c, strict=True)]
    np.testing.assert_array_equal(got, want)


def knife_edge_inputs(seed: int = 1, size: int = 4000):
    """(p, C, k): C = 1 - (1 - p)^k as float64 evaluates it, i.e. on the boundary of n = k."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.01, 0.9, size)
    k = rng.integers(1, 40, size)
    keep = np.array([fail_after(pi, ki) > 1e-6 for pi, ki in zip(p, k, strict=True)])
    p, k = p[keep], k[keep]  # far from 1 - f == 1 in float
    c = np.array([1.0 - fail_after(pi, ki) for pi, ki in zip(p, k, strict=True)])
    return p, c, k


def test_budget_point_on_boundaries_is_exact_where_float_search_is_not():
    p, c, k = knife_edge_inputs()
    got = ias.budget_point(p, c)
    want = np.array([brute_budget(pi, ci) for pi, ci in zip(p, c, strict=True)])
    np.testing.assert_array_equal(got, want)
    # On these inputs a plain float64 search and the closed form are each wrong somewhere.
    plain = np.array([float_budget(pi, ci) for pi, ci in zip(p, c, strict=True)])
    assert (plain != want).sum() > 10, "knife-edge inputs should trip a float64 search"
    closed = np.minimum(np.ceil(np.log(1 - c) / np.log(1 - p)), 64)
    assert (closed != want).any()
    assert (np.abs(want - k) <= 1).all()  # the boundary is at k, up to float64 rounding of C


def test_budget_mixture_and_estimates_exact_on_knife_edges():
    p, c, _ = knife_edge_inputs(seed=3, size=300)
    q = np.repeat(p[:, None], 4, axis=1)
    q[:, 0] = np.clip(q[:, 0] * 0.5, 0.0, 1.0)  # a genuine mixture
    exact = [brute_mixture(row, ci) for row, ci in zip(q, c, strict=True)]
    np.testing.assert_array_equal(ias.budget_mixture(q, c), exact)
    point = ias.Estimate("x", "point", p=p)
    got = point.budgets(np.array([c[0], c[1]]))  # [2, Q]
    np.testing.assert_array_equal(got[0], [brute_budget(pi, c[0]) for pi in p])


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.integers(1, 80))
def test_budget_point_hypothesis(p, c, n_max):
    assert int(ias.budget_point(p, c, n_max)) == brute_budget(p, c, n_max)


def test_budget_monotone_in_p_and_c():
    p = np.linspace(0.0, 1.0, 501)
    c = np.asarray(ias.C_GRID)
    n = ias.budget_point(p[None, :], c[:, None])  # [C, p]
    assert (np.diff(n, axis=1) <= 0).all(), "budgets must not increase with p"
    assert (np.diff(n, axis=0) >= 0).all(), "budgets must not decrease with C"
    assert n.min() >= 1 and n.max() == 64
    rng = np.random.default_rng(2)
    q = np.sort(rng.random((50, 100)), axis=1)
    nm = ias.budget_mixture(q[None], c[:, None])  # [C, 50]
    assert (np.diff(nm, axis=0) >= 0).all()
    assert (ias.budget_mixture(np.clip(q + 0.1, 0, 1), 0.9) <= ias.budget_mixture(q, 0.9)).all()


def test_budget_mixture_matches_brute_force():
    rng = np.random.default_rng(3)
    q = np.sort(rng.beta(0.7, 1.2, (60, 100)), axis=1)
    c = rng.choice(np.asarray(ias.C_GRID), 60)
    got = ias.budget_mixture(q, c)
    want = [brute_mixture(qi, ci) for qi, ci in zip(q, c, strict=True)]
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_mixture_equals_point_rule_for_equal_quantiles():
    rng = np.random.default_rng(4)
    p = np.concatenate([rng.random(300), [0.0, 1.0, 1e-5]])
    k = rng.integers(1, 30, len(p))
    on_boundary = np.array([1.0 - fail_after(pi, ki) for pi, ki in zip(p, k, strict=True)])
    for c in [np.full(len(p), 0.9), on_boundary]:
        q = np.repeat(p[:, None], 100, axis=1)
        np.testing.assert_array_equal(ias.budget_mixture(q, c), ias.budget_point(p, c))


def test_single_question_api():
    assert int(ias.budget_point(0.5, 0.9)) == 4  # 0.875 < 0.9 <= 0.9375
    assert int(ias.budget_point(0.0, 0.5)) == 64
    assert int(ias.budget_mixture(np.full(100, 0.5), 0.9)) == 4
    # a spread distribution with the same mean needs more samples than its point mass
    spread = np.linspace(0.01, 0.99, 100)
    assert int(ias.budget_mixture(spread, 0.9)) > int(ias.budget_point(spread.mean(), 0.9))


# ----------------------------------------------------------------------------- accuracy
def test_pick_weights_are_distributions():
    w = ias.pick_weights(64)
    for k in (1, 5, 64):
        np.testing.assert_allclose(w[k, :k].sum(axis=1), 1.0, rtol=1e-12)
    assert w[5, 5:].sum() == 0 and w[5, :, 5:].sum() == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_table_equals_enumeration_with_ties(seed):
    rng = np.random.default_rng(seed)
    k = 7
    s = rng.integers(0, 3, k).astype(float)  # heavy ties
    c = rng.integers(0, 2, k).astype(float)
    table = ias.exact_accuracy_table(ias.Pools.from_arrays([s], [c]), n_max=9)
    for n in range(1, k + 1):
        vals = []
        for sub in itertools.combinations(range(k), n):
            top = max(s[list(sub)])
            vals.append(np.mean([c[i] for i in sub if s[i] == top]))
        assert table[0, n - 1] == pytest.approx(np.mean(vals), abs=1e-12)
    assert table[0, 7] == table[0, 8] == table[0, 6]  # n beyond the pool draws the whole pool


def test_threshold_exact_equals_enumeration():
    rng = np.random.default_rng(5)
    k = 6
    s = np.round(rng.random(k), 1)
    c = rng.integers(0, 2, k).astype(float)
    pools = ias.Pools.from_arrays([s], [c])
    for t, cap in itertools.product(
        [-1.0, 0.0, float(np.median(s)), float(s.max()), 2.0], range(1, k + 1)
    ):
        acc = draws = 0.0
        perms = list(itertools.permutations(range(k)))
        for perm in perms:
            drawn = []
            for x in perm:
                drawn.append(x)
                if s[x] >= t or len(drawn) == cap:
                    break
            best = max(drawn, key=lambda i: (s[i], -drawn.index(i)))
            acc += c[best]
            draws += len(drawn)
        a, d = ias.threshold_exact(pools, np.array([t]), np.array([cap]))
        assert a[0] == pytest.approx(acc / len(perms), abs=1e-12)
        assert d[0] == pytest.approx(draws / len(perms), abs=1e-12)


def test_exact_agrees_with_20000_trial_monte_carlo():
    rng = np.random.default_rng(6)
    pools = random_pools(rng, q=12)
    budgets = np.stack([np.full(12, 1), np.full(12, 3), rng.integers(1, 65, 12), np.full(12, 64)])
    table = ias.exact_accuracy_table(pools)
    exact = ias.lookup(table, budgets).mean(axis=1)
    mc = ias.monte_carlo(pools, budgets, trials=20_000, seed=11, chunk=500)
    assert (np.abs(exact - mc["accuracy"]) <= 3 * mc["accuracy_se"] + 1e-12).all()
    # early stopping: thresholds at a score quantile, caps random
    thr = np.quantile(pools.scores[:, :1], 0.5) + rng.normal(0, 0.3, (3, 12))
    caps = rng.integers(1, 65, (3, 12))
    mc = ias.monte_carlo(pools, caps, thr, trials=20_000, seed=12, chunk=500)
    for r in range(3):
        a, d = ias.threshold_exact(pools, thr[r], caps[r])
        assert abs(a.mean() - mc["accuracy"][r]) < 3 * mc["accuracy_se"][r]
        assert d.mean() == pytest.approx(mc["cost"][r], rel=0.02)


def test_monte_carlo_is_seeded():
    pools = random_pools(np.random.default_rng(7), q=5)
    b = np.full((1, 5), 4)
    one = ias.monte_carlo(pools, b, trials=50, seed=3)
    two = ias.monte_carlo(pools, b, trials=50, seed=3)
    assert one["accuracy"][0] == two["accuracy"][0]


def test_pools_from_bon_aligns_and_sorts():
    rng = np.random.default_rng(8)
    questions = pd.DataFrame(
        {"question_id": ["a", "b", "c"], "prm_score": np.float32([0.2, 0.5, 0.9])}
    )
    sizes = {"a": 3, "b": 64, "c": 5}
    rows = [(q, r, rng.random(), rng.random() < 0.5) for q, n in sizes.items() for r in range(n)]
    responses = pd.DataFrame(rows, columns=["question_id", "response_id", "prm_score", "correct"])
    responses = responses.sample(frac=1.0, random_state=0).reset_index(drop=True)
    bon = BonSet(questions, np.zeros((3, 4), np.float32), responses)
    pools = ias.Pools.from_bon(bon)
    np.testing.assert_array_equal(pools.size, [3, 64, 5])
    for i, q in enumerate("abc"):
        sub = responses[responses["question_id"] == q].sort_values("prm_score", ascending=False)
        np.testing.assert_allclose(pools.scores[i, : sizes[q]], sub["prm_score"])
        np.testing.assert_allclose(pools.correct[i, : sizes[q]], sub["correct"].astype(float))
    table = ias.exact_accuracy_table(pools)
    assert table[0, 10] == table[0, 2]  # question a: budgets past 3 draw all 3


# ----------------------------------------------------------------------------- sweeps
def _oracle_estimates(q: int, rng) -> list[ias.Estimate]:
    mu, sigma = rng.normal(0, 1.5, q), rng.uniform(0.3, 1.5, q)
    levels = np.concatenate([midpoint_levels(100), ias.BETA_GRID])
    qs = true_quantiles(mu, sigma, levels)
    q11 = true_quantiles(mu, sigma, ias.BETA_GRID)
    return [
        ias.Estimate("base", "point", p=1 / (1 + np.exp(-mu - 2))),
        ias.Estimate("ot", "distribution", q_mid=qs[:, :100], levels=levels, q_levels=qs),
        ias.Estimate(
            "qr", "levels", p=q11[:, 1], levels=np.asarray(ias.BETA_GRID), q_levels=q11, beta=0.1
        ),
    ]


def test_run_sweeps_shapes_and_columns():
    rng = np.random.default_rng(9)
    pools = random_pools(rng, q=30)
    summary, budgets = ias.run_sweeps(pools, _oracle_estimates(30, rng), mc_trials=400, seed=1)
    assert list(summary.columns[: len(ias.SUMMARY_COLUMNS)]) == ias.SUMMARY_COLUMNS
    assert list(budgets.columns) == ias.BUDGET_COLUMNS
    counts = summary.groupby(["method", "allocation"]).size().to_dict()
    assert counts == {
        ("base", "C"): 10,
        ("ot", "C"): 10,
        ("ot", "tau"): 100,
        ("ot", "beta"): 11,
        ("qr", "C"): 10,
        ("qr", "tau"): 11,
        ("qr", "beta"): 11,
    }
    assert len(budgets) == len(summary) * 30
    assert summary.loc[summary.allocation == "C", "level"].isna().all()
    assert (summary.loc[summary.allocation == "tau", "C"] == 0.99).all()
    assert (summary.loc[summary.allocation == "beta", "C"] == 0.9).all()
    assert summary[["cost", "accuracy", "accuracy_mc"]].notna().all().all()
    assert summary["cost"].between(1 / 64, 1).all()
    # C-sweep cost is mean N / 64, taken from the same budgets that budgets.parquet holds
    for (method, c), grp in budgets[budgets.allocation == "C"].groupby(["method", "C"]):
        row = summary[
            (summary.method == method) & (summary.allocation == "C") & (summary["C"] == c)
        ]
        assert row["cost"].iloc[0] == pytest.approx(grp["n"].mean() / 64)
    # costs rise with C for every method, and the exact value is within MC error
    for _, grp in summary[summary.allocation == "C"].groupby("method"):
        assert (np.diff(grp["cost"].to_numpy()) >= 0).all()
    diff = (summary["accuracy"] - summary["accuracy_mc"]).abs()
    assert (diff <= 4 * summary["accuracy_mc_se"] + 1e-12).all()


def test_beta_sweep_cost_rises_with_beta():
    rng = np.random.default_rng(10)
    pools = random_pools(rng, q=40, ties=False)
    est = _oracle_estimates(40, rng)[1]
    # put thresholds on the score scale so the sweep has something to do
    est = dataclasses.replace(est, q_levels=est.q_levels * 2.0 - 0.5)
    summary, _ = ias.run_sweeps(pools, [est], mc_trials=0)
    beta = summary[summary.allocation == "beta"]
    assert (np.diff(beta["cost"].to_numpy()) >= -1e-12).all()
    assert beta["accuracy_mc"].isna().all()
    cap = summary[(summary.allocation == "C") & (summary.C == 0.9)]["cost"].iloc[0]
    assert beta["cost"].max() <= cap + 1e-12  # early stopping never draws past the cap


def test_estimate_from_model_kinds_and_truth():
    import torch

    from dprm.models.interface import Calibrator, FixedLevels
    from dprm.models.raw_score import RawScoreCalibrator

    class Levels(Calibrator):
        kind = "levels"

        def forward(self, hidden, prm_score=None):
            return FixedLevels(hidden[:, :3], torch.tensor([0.05, 0.5, 0.95]))

        @property
        def fixed_levels(self):
            return np.array([0.05, 0.5, 0.95])

        @classmethod
        def fit_model(cls, train, val, config, seed, progress):
            raise NotImplementedError("a fixed test double")

    hidden = np.sort(np.random.default_rng(0).random((6, 3)), axis=1).astype(np.float32)
    questions = pd.DataFrame(
        {
            "question_id": list("abcdef"),
            "prm_score": np.float32([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]),
            "true_mu": np.float32([0, 1, -1, 0, 2, 0]),
            "true_sigma": np.float32([1, 1, 1, 0.5, 0.5, 2]),
        }
    )
    bon = BonSet(questions, hidden, pd.DataFrame())
    base = ias.estimate_from_model(RawScoreCalibrator(3), bon)
    np.testing.assert_allclose(base.p, questions["prm_score"])
    lv = ias.estimate_from_model(Levels(3), bon, beta=0.1)
    assert lv.beta == 0.05 and lv.kind == "levels"  # largest trained level <= beta
    np.testing.assert_allclose(lv.p, hidden[:, 0])
    assert lv.quantiles_at(ias.BETA_GRID) is None  # no beta sweep without those levels
    truth = ias.truth_estimate(bon)
    assert truth.q_mid.shape == (6, 100)
    assert (np.diff(truth.q_mid, axis=1) >= 0).all()
    assert truth.q_mid[0, 49] < 0.5 < truth.q_mid[0, 50]  # median of mu = 0 is 0.5
    assert math.isclose(truth.quantiles_at([0.5])[0, 0], 0.5, abs_tol=1e-12)


def test_uniform_curve_and_small_n_max():
    pools = random_pools(np.random.default_rng(11), q=10)
    u = ias.uniform_curve(pools)
    assert list(u["n"]) == list(range(1, 65))
    np.testing.assert_allclose(u["accuracy"], ias.exact_accuracy_table(pools).mean(axis=0))
    small = ias.uniform_curve(pools, n_max=16)
    assert len(small) == 16 and small["cost"].iloc[-1] == 1.0
    est = ias.Estimate("p", "point", p=np.full(10, 0.01))
    summary, budgets = ias.run_sweeps(pools, [est], n_max=16, mc_trials=0)
    assert budgets["n"].max() == 16 and summary["cost"].max() == 1.0


def test_budget_greedy_is_optimal_by_brute_force_and_beats_the_c_rule():
    """Greedy marginal gains = the best allocation of a total budget (exhaustive search)."""
    rng = np.random.default_rng(3)
    quantiles = rng.beta(0.7, 1.5, size=(4, 6))  # 4 questions, 6 levels: concave mixture curves
    curve = ias.success_curve_mixture(quantiles, 6)
    for total in range(4, 25):
        budgets = ias.budget_greedy(curve, total / 4)
        assert budgets.sum() == total and budgets.min() >= 1 and budgets.max() <= 6
        best = max(
            sum(curve[i, n - 1] for i, n in enumerate(choice))
            for choice in itertools.product(range(1, 7), repeat=4)
            if sum(choice) == total
        )
        assert curve[np.arange(4), budgets - 1].sum() == pytest.approx(best, abs=1e-12)
    # At the mean cost of any C rule allocation the greedy one is at least as good.
    for c in (0.5, 0.8, 0.95):
        rule = ias.budget_mixture(quantiles, c, 6)
        greedy = ias.budget_greedy(curve, rule.sum() / 4)
        got, ref = (curve[np.arange(4), b - 1].sum() for b in (greedy, rule))
        assert got >= ref - 1e-12
    with pytest.raises(ValueError, match="mean_budget"):
        ias.budget_greedy(curve, 7)
