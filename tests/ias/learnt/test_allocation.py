"""Oracle / auto allocation (dprm.ias.learnt.allocation) and the pays table (dprm.ias.curves.pays)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from dprm.ias.curves.pays import pays_table
from dprm.ias.learnt.allocation import (
    SelectionModel,
    auto_budgets,
    choose_floor_share,
    concave_hull_greedy,
    uniform_budgets,
)


def brute_best(curves: np.ndarray, total: int) -> float:
    """max sum_i curve_i(N_i) over all allocations with sum N_i <= total, N_i >= 1."""
    q, n_max = curves.shape
    best = -np.inf
    for alloc in itertools.product(range(1, n_max + 1), repeat=q):
        if sum(alloc) <= total:
            best = max(best, sum(curves[i, a - 1] for i, a in enumerate(alloc)))
    return best / q


def test_greedy_is_optimal_on_concave_curves():
    rng = np.random.default_rng(0)
    for _ in range(20):
        gains = np.sort(rng.random((3, 5)), axis=1)[:, ::-1] * 0.2  # decreasing gains: concave
        curves = np.cumsum(gains, axis=1)
        for total in range(3, 16):
            budgets, bound = concave_hull_greedy(curves, total / 3)
            value = curves[np.arange(3), budgets - 1].mean()
            assert budgets.sum() == total and (budgets >= 1).all()
            assert value == pytest.approx(brute_best(curves, total), abs=1e-12)
            assert bound == pytest.approx(value, abs=1e-12)


def test_hull_bound_brackets_the_optimum_on_non_concave_curves():
    rng = np.random.default_rng(1)
    for _ in range(20):
        curves = rng.random((3, 5))  # anything: voting curves can fall with n
        for total in range(3, 16):
            budgets, bound = concave_hull_greedy(curves, total / 3, spend_all=False)
            value = curves[np.arange(3), budgets - 1].mean()
            best = brute_best(curves, total)
            assert budgets.sum() <= total
            assert value <= best + 1e-12 <= bound + 2e-12
            assert best - value <= np.ptp(curves) / 3 + 1e-12  # at most one question's segment


def test_uniform_and_full_floor():
    b = uniform_budgets(7, 3.4)
    assert b.sum() == round(3.4 * 7) and b.max() - b.min() <= 1
    curves = np.cumsum(np.random.default_rng(2).random((7, 8)), axis=1)
    np.testing.assert_array_equal(np.sort(auto_budgets(curves, 3.0, 1.0)), np.full(7, 3))


def test_selection_model_is_monotone_and_recovers_a_known_curve():
    rng = np.random.default_rng(3)
    share = rng.random(2000)
    n = np.arange(1, 9)
    truth = 1 - (1 - share[:, None] ** 2) ** n  # some increasing-in-p accuracy
    model = SelectionModel.fit(share, truth + rng.normal(0, 0.02, truth.shape))
    assert (np.diff(model.table, axis=0) >= 0).all()
    p = np.array([0.2, 0.5, 0.8])
    np.testing.assert_allclose(model.predict(p), 1 - (1 - p[:, None] ** 2) ** n, atol=0.03)
    # a point mass and its mixture form agree
    np.testing.assert_allclose(model.expected_curve(p), model.expected_curve(p[:, None]))


def test_floor_share_goes_uniform_when_the_estimate_is_noise():
    rng = np.random.default_rng(4)
    share = rng.random(400)
    n = np.arange(1, 65)
    curves = 1 - (1 - share[:, None]) ** np.sqrt(n)
    informative, gains = choose_floor_share(share, curves, share[:, None])
    assert informative < 1.0 and max(gains.values()) > 0
    noise, _ = choose_floor_share(share, curves, rng.random((400, 1)))
    assert noise >= 0.5  # an estimate unrelated to the truth earns no adaptive share


def test_pays_table_headroom_and_share():
    rows = pd.DataFrame(
        {
            "method": ["uniform", "oracle", "ot", "ot", "ot"],
            "allocation": ["uniform", "oracle", "auto", "C", "C"],
            "C": [np.nan, np.nan, np.nan, 0.5, 0.9],
            "target_cost": [0.1, 0.1, 0.1, np.nan, np.nan],
            "cost": [0.1, 0.1, 0.1, 0.05, 0.2],
            "accuracy": [0.5, 0.6, 0.55, 0.4, 0.6],
            "rule": "highest-last",
        }
    )
    table = pays_table(rows, costs=(0.1,)).set_index(["method", "allocation"])
    assert table.loc[("ot", "auto"), "share"] == pytest.approx(0.5)
    assert table.loc[("ot", "C"), "accuracy"] == pytest.approx(0.4 + 0.2 * (0.05 / 0.15))
    assert table.loc[("oracle", "oracle"), "headroom"] == pytest.approx(0.1)


def test_run_ias_auto_rows_on_a_twin_world(tiny_world):
    from dprm.data import read_bon_set
    from dprm.ias import run_ias, truth_estimate

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    bon, train = read_bon_set(paths["id/bon"]), read_bon_set(paths["train/bon"])
    summary, _ = run_ias(
        bon, {}, mc_trials=0, rules=["highest-last", "majority"], train_bon=train,
        extra_estimates=[truth_estimate(bon)], vote_trials=16,
    )  # fmt: skip
    extra = summary[summary["allocation"].isin(["uniform", "oracle", "oracle-p", "auto"])]
    assert set(extra["rule"]) == {"highest-last", "majority"}
    assert set(extra.loc[extra["allocation"] == "auto", "method"]) == {"base", "truth"}
    ref = extra.pivot_table(index=["rule", "target_cost"], columns="allocation", values="accuracy")
    assert (ref["oracle"] >= ref["uniform"] - 1e-12).all()
    assert (ref["oracle"] >= ref["oracle-p"] - 1e-12).all()
    assert extra["floor_share"].dropna().between(0, 1).all()
    table = pays_table(summary)
    assert {"uniform", "oracle", "oracle-p", "auto", "C"} <= set(table["allocation"])


def test_shift_auc_tells_shifted_states_apart():
    from dprm.ias.learnt.allocation import SHIFT_AUC, shift_auc

    rng = np.random.default_rng(5)
    train = rng.normal(0, 1, (200, 30))
    same = rng.normal(0, 1, (200, 30))
    moved = rng.normal(0, 1, (60, 30)) + 0.5
    assert abs(shift_auc(train, same) - 0.5) < 0.1
    assert shift_auc(train, moved) > SHIFT_AUC
