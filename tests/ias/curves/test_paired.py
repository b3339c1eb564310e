"""Tests for :mod:`dprm.ias.curves.paired`: hand-worked ratios, medians, intervals and shares."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dprm.ias.curves.paired import (
    FIGURES,
    best_method,
    draws_ratio,
    figure_replicates,
    paired_ratio,
    paired_share,
    replicate_matrix,
)
from dprm.ias.peers.curves import Curve, CurveSet, summarise


def test_ratio_of_draws_counts_a_method_that_never_reaches_as_infinite():
    method = np.array([10.0, np.nan, 8.0, np.nan])
    rival = np.array([20.0, 5.0, np.nan, np.nan])
    assert draws_ratio(method, rival).tolist() == [0.5, np.inf, 0.0, np.inf]


def test_paired_ratio_by_hand():
    # 3 draws; column 0 on the draw's questions, columns 1..4 paired bootstrap replicates
    method = np.array([
        [10.0, 10, 12, 9, 11],
        [30.0, 28, 33, 30, 27],
        [20.0, 18, 25, 20, 40],
    ])  # fmt: skip
    rival = np.array([
        [20.0, 20, 20, 18, 22],
        [30.0, 28, 30, 40, 30],
        [40.0, 36, 25, 40, 40],
    ])  # fmt: skip
    got = paired_ratio(method, rival)
    # per draw: 10/20, 30/30, 20/40
    assert got.per_draw.tolist() == [0.5, 1.0, 0.5]
    assert got.median == 0.5
    # replicate ratios: b1 (0.5, 1, 0.5) b2 (0.6, 1.1, 1.0) b3 (0.5, 0.75, 0.5) b4 (0.5, 0.9, 1.0)
    # medians over draws: 0.5, 1.0, 0.5, 0.9; 5th percentile (lower) 0.5, 95th (higher) 1.0
    assert (got.low, got.high) == (0.5, 1.0)
    assert got.replicates == 4
    # the median (0.5) meets 0.7, the interval's upper end (1.0) does not: the target is not met
    assert not got.at_most(0.7)
    assert got.at_most(1.0)


def test_a_never_reached_replicate_keeps_the_target_unmet():
    method = np.array([[10.0, 10.0, np.nan], [10.0, 10.0, np.nan]])
    rival = np.array([[40.0, 40.0, 40.0], [40.0, 40.0, 40.0]])
    got = paired_ratio(method, rival)
    assert got.median == 0.25 and got.high == np.inf
    assert not got.at_most(0.7)


def test_paired_share_by_hand_and_every_value_is_kept():
    calibrated = np.array([[0.80, 0.80, 0.82], [0.70, 0.71, 0.69]])
    rival = np.array([[0.78, 0.78, 0.78], [0.72, 0.70, 0.70]])
    ceiling = np.array([[0.79, 0.82, 0.86], [0.74, 0.75, 0.70]])
    got = paired_share(calibrated, rival, ceiling)
    # draw 1: 0.02 / 0.01 = 2.0 (above 1: shown, not dropped); draw 2: -0.02 / 0.02 = -1.0
    assert got.per_draw == pytest.approx([2.0, -1.0])
    assert got.median == pytest.approx(0.5)
    # b1: (0.5, 0.2) -> 0.35; b2: (0.5, undefined: ceiling = rival) -> NaN, left out
    assert got.low == pytest.approx(0.35) and got.high == pytest.approx(0.35)


def test_best_method_skips_methods_that_never_reach():
    point = {"a": np.array([10.0, np.nan, 12.0]), "b": np.array([11.0, 11.0, 11.0]),
             "c": np.array([np.nan, np.nan, np.nan])}  # fmt: skip
    assert best_method(point, lower_is_better=True) == "b"  # a's median counts its NaN as inf
    assert best_method({"c": point["c"]}, lower_is_better=True) is None
    assert best_method({"x": np.array([0.5]), "y": np.array([0.6])}, lower_is_better=False) == "y"


def _curve_set() -> CurveSet:
    rng = np.random.default_rng(0)
    q = 30
    levels = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
    base = rng.uniform(0.2, 0.9, q)
    gain = 1 - np.exp(-levels / 8)
    uni_acc = np.clip(base[None, :] * (0.5 + 0.5 * gain[:, None]), 0, 1)
    uni = Curve("uniform", levels, uni_acc, np.repeat(levels[:, None], q, axis=1))
    fast = Curve(
        "fast", levels, np.clip(uni_acc * 1.02, 0, 1), np.repeat(levels[:, None] / 2, q, axis=1)
    )
    return CurveSet("majority", {"uniform": uni, "fast": fast}, 0.5, "uniform", 64)


def test_replicate_zero_is_the_point_estimate_and_the_resamples_are_summarise_s():
    cs = _curve_set()
    reps = figure_replicates(cs, bootstrap=20, seed=3)
    assert list(reps.columns) == ["rule", "method", "replicate", *FIGURES]
    summary = summarise(cs, bootstrap=20, seed=3).set_index("method")
    for method in ("uniform", "fast"):
        of = reps[reps["method"] == method].set_index("replicate")
        for fig in FIGURES:
            assert of.loc[0, fig] == pytest.approx(summary.loc[method, fig], nan_ok=True)
        # the same resamples: the replicates' spread is summarise's standard error
        values = of.loc[1:, "draws_to_u64"].to_numpy(float)
        ok = np.isfinite(values)
        if ok.mean() >= 0.5:
            assert values[ok].std(ddof=1) == pytest.approx(summary.loc[method, "draws_to_u64_se"])


def test_replicate_matrix_stacks_draws_in_order():
    rows = []
    for draw in (11, 12):
        for b in range(3):
            rows.append(
                {"draw": draw, "method": "m", "replicate": b, "draws_to_u64": draw + b / 10}
            )
    frame = pd.DataFrame(rows).sample(frac=1, random_state=0)
    got = replicate_matrix(frame, "m", "draws_to_u64", [12, 11])
    assert got.tolist() == [[12.0, 12.1, 12.2], [11.0, 11.1, 11.2]]
    with pytest.raises(ValueError, match="no replicates in draw 13"):
        replicate_matrix(frame, "m", "draws_to_u64", [13])
