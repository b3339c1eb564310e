"""Paired statistics of the quoted figures over independent draws of an experiment.

A *draw* is one independent replicate of a whole comparison: a twin world at one world seed, or
a trained world's calibrator seed on one question resample. Within a draw every method runs on
the same questions and the same draw orders (:func:`dprm.ias.selection.draws.draw_orders`), so
the bootstrap resamples a draw's questions once and evaluates every method on the same resample
(paired; :func:`figure_replicates`, the resamples of
:func:`dprm.ias.peers.curves.summarise`). The targets (uniform best-of-n's accuracy) are
recomputed on each resample, with the methods.

The headline "draws to reach uniform best-of-64's accuracy" of a method against a rival is the
per-draw ratio method / rival, its median over draws and a 90 % interval of that median: the
median over draws of the b-th bootstrap replicate of every draw, for b = 1..B (the draws'
resamples are independent, so the b-th replicates of all draws form one joint resample), whose
5th and 95th percentiles (taken as observed values, no interpolation) bound it
(:func:`paired_ratio`). A target ``ratio <= limit`` counts as met only if the interval's upper
end is within it. Where a method never reaches the target its draws count as infinite (the
ratio is inf; 0 where only the rival never reaches it); where neither reaches it the ratio is
inf too, so such a cell never meets a target.

Calibration's share of the gain at equal cost, (calibrated - rival) / (ceiling - rival) with the
ceiling ``auto-seq[truth]``, is paired the same way (:func:`paired_share`); every value is
reported, also below 0 and above 1, and it is undefined (NaN) only where the ceiling is not
above the rival.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dprm.ias.learnt.allocation import REPORT_COSTS
from dprm.ias.peers.curves import BOOTSTRAP, MATCH_TARGETS, CurveSet, curve_at_cost, draws_to_reach

#: the interval's coverage
LEVEL = 0.9
#: the figures of one method on one draw (columns of :func:`figure_replicates`)
FIGURES = (*(f"draws_to_u{n}" for n in MATCH_TARGETS), *(f"acc_at_{c:g}" for c in REPORT_COSTS))
#: the denominator of a share below which it is undefined
SHARE_EPS = 1e-9


def _figures(draws: np.ndarray, accuracy: np.ndarray, targets: dict[int, float], n_max: int):
    """Every figure of one curve (draws, accuracy: [L] means over the questions)."""
    row = [draws_to_reach(draws, accuracy, targets[n]) for n in MATCH_TARGETS]
    return row + [curve_at_cost(draws, accuracy, c * n_max) for c in REPORT_COSTS]


def figure_replicates(
    curve_set: CurveSet, bootstrap: int = BOOTSTRAP, seed: int = 0
) -> pd.DataFrame:
    """Every method's figures on a draw's questions and on paired bootstrap resamples of them.

    Args:
        curve_set: every method's curve on one (set, rule) of one draw.
        bootstrap: resamples of the questions (B).
        seed: the resamples' seed: with the seed of :func:`dprm.ias.peers.curves.summarise`,
            the same resamples its standard errors come from.

    Returns:
        one row per (method, replicate): ``rule, method, replicate`` (0: the draw's questions;
        1..B: the resamples, the same question indices for every method) and :data:`FIGURES`
        (NaN where a curve does not reach a target or cost).
    """
    uni = curve_set.curves["uniform"]
    level_of = {float(v): i for i, v in enumerate(uni.levels)}
    q_count = uni.accuracy.shape[1]
    rng = np.random.default_rng([seed, 97])
    picks = [np.arange(q_count)] + [rng.integers(0, q_count, q_count) for _ in range(bootstrap)]
    targets = []
    for idx in picks:
        uni_acc = uni.accuracy[:, idx].mean(axis=1)
        targets.append({n: float(uni_acc[level_of[float(n)]]) for n in MATCH_TARGETS})
    rows = []
    for name, curve in curve_set.curves.items():
        for b, idx in enumerate(picks):
            values = _figures(
                curve.draws[:, idx].mean(axis=1), curve.accuracy[:, idx].mean(axis=1),
                targets[b], curve_set.n_max,
            )  # fmt: skip
            rows.append([curve_set.rule, name, b, *values])
    return pd.DataFrame(rows, columns=["rule", "method", "replicate", *FIGURES])


def replicate_matrix(replicates: pd.DataFrame, method: str, figure: str, draws: list) -> np.ndarray:
    """[D, 1 + B] one method's figure per draw (rows, in ``draws`` order) and replicate.

    Args:
        replicates: rows of :func:`figure_replicates` of one (world, rule, split), with a
            ``draw`` column naming the draw.
        draws: the draws, in row order.

    Raises:
        ValueError: a draw without the method, or draws with different replicate counts.
    """
    of = replicates[replicates["method"] == method]
    rows = []
    for draw in draws:
        values = of[of["draw"] == draw].sort_values("replicate")[figure].to_numpy(np.float64)
        if len(values) == 0:
            raise ValueError(f"method {method!r} has no replicates in draw {draw!r}")
        rows.append(values)
    if len({len(r) for r in rows}) != 1:
        raise ValueError(f"method {method!r}: draws have different bootstrap replicate counts")
    return np.vstack(rows)


def draws_ratio(method: np.ndarray, rival: np.ndarray) -> np.ndarray:
    """method / rival, elementwise, for draws to reach a target (NaN: never reached): inf where
    the method never reaches it, 0 where only the rival never does."""
    method = np.asarray(method, dtype=np.float64)
    rival = np.asarray(rival, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = method / rival
    ratio = np.where(np.isnan(method), np.inf, ratio)
    return np.where(np.isnan(rival) & ~np.isnan(method), 0.0, ratio)


def _interval(replicate_medians: np.ndarray, level: float) -> tuple[float, float]:
    values = replicate_medians[~np.isnan(replicate_medians)]
    if len(values) == 0:
        return float("nan"), float("nan")
    tail = (1 - level) / 2
    low = float(np.quantile(values, tail, method="lower"))
    high = float(np.quantile(values, 1 - tail, method="higher"))
    return low, high


@dataclass(frozen=True)
class Paired:
    """A paired statistic over draws.

    Attributes:
        per_draw: [D] the statistic on each draw's questions.
        median: its median over the draws.
        low, high: the interval of the median (:data:`LEVEL`), from the bootstrap replicates.
        replicates: B, the bootstrap replicates per draw.
    """

    per_draw: np.ndarray
    median: float
    low: float
    high: float
    replicates: int

    def at_most(self, limit: float) -> bool:
        """Whether the target ``statistic <= limit`` is met: the interval's upper end is."""
        return bool(np.isfinite(self.high) and self.high <= limit)


def paired_ratio(method: np.ndarray, rival: np.ndarray, level: float = LEVEL) -> Paired:
    """The per-draw ratio method / rival of draws to reach a target, its median over draws and
    the paired bootstrap interval of that median.

    Args:
        method, rival: [D, 1 + B] draws to reach the target (NaN: never); column 0 on each
            draw's questions, columns 1..B its bootstrap replicates, the same question
            resamples for both.
        level: the interval's coverage.
    """
    method, rival = np.atleast_2d(method), np.atleast_2d(rival)
    if method.shape != rival.shape or method.shape[1] < 2:
        raise ValueError(f"method {method.shape} and rival {rival.shape}: need equal [D, 1 + B]")
    ratio = draws_ratio(method, rival)
    low, high = _interval(np.median(ratio[:, 1:], axis=0), level)
    per_draw = ratio[:, 0]
    return Paired(per_draw, float(np.median(per_draw)), low, high, method.shape[1] - 1)


def share_of(calibrated: np.ndarray, rival: np.ndarray, ceiling: np.ndarray) -> np.ndarray:
    """(calibrated - rival) / (ceiling - rival), elementwise; NaN where the ceiling is not
    above the rival (by more than :data:`SHARE_EPS`) or a value is missing."""
    calibrated, rival, ceiling = (
        np.asarray(a, dtype=np.float64) for a in (calibrated, rival, ceiling)
    )
    head = ceiling - rival
    with np.errstate(divide="ignore", invalid="ignore"):
        share = (calibrated - rival) / head
    return np.where(head > SHARE_EPS, share, np.nan)


def paired_share(
    calibrated: np.ndarray, rival: np.ndarray, ceiling: np.ndarray, level: float = LEVEL
) -> Paired:
    """Calibration's share of the gain at equal cost per draw, its median over draws (NaN if
    any draw's is undefined) and the paired bootstrap interval of the median (over the
    replicates where every draw's is defined).

    Args:
        calibrated, rival, ceiling: [D, 1 + B] accuracy at one cost of the calibrated method,
            the best calibrator-free rival and the ceiling (``auto-seq[truth]``); column 0 on
            each draw's questions, columns 1..B the paired bootstrap replicates.
    """
    arrays = [np.atleast_2d(a) for a in (calibrated, rival, ceiling)]
    if len({a.shape for a in arrays}) != 1 or arrays[0].shape[1] < 2:
        raise ValueError("calibrated, rival and ceiling need equal shapes [D, 1 + B]")
    share = share_of(*arrays)
    low, high = _interval(np.median(share[:, 1:], axis=0), level)
    per_draw = share[:, 0]
    return Paired(per_draw, float(np.median(per_draw)), low, high, arrays[0].shape[1] - 1)


def best_method(point: Mapping[str, np.ndarray], lower_is_better: bool) -> str | None:
    """The method whose median over draws of a figure (on each draw's questions) is best;
    methods whose median is NaN are skipped; None if every one is. Ties: the first listed."""
    best, best_value = None, np.nan
    for name, values in point.items():
        value = float(
            np.median(np.where(np.isnan(values), np.inf if lower_is_better else -np.inf, values))
        )
        if not np.isfinite(value):
            continue
        if best is None or (value < best_value if lower_is_better else value > best_value):
            best, best_value = name, value
    return best
