"""Budget allocation on accuracy-vs-n curves: the oracle (headroom) and ``auto``.

Both maximise sum_i curve_i(N_i) subject to sum_i N_i = round(mean_budget x Q), N_i >= n0_i:

* **oracle**: the curves are every question's *true* accuracy of the selected answer under the
  rule (:class:`dprm.ias.selection.rules.RuleTable`), so its accuracy is the best any allocation of that
  mean budget can reach on this set: the headroom over uniform.
* **auto**: the curves are *predicted*, per question, from its calibrated distribution through a
  selection-accuracy model learnt on a training BoN set (:class:`SelectionModel`):
  acc_hat_i(n) = E_{p ~ Q(.|h_i)}[g_n(p)] = (1/M) sum_m g_n(Q(beta_m | h_i)), where g_n(p) is
  the expected accuracy of the rule's pick from n draws for a question whose pool succeeds with
  probability p. A guaranteed uniform share (every question gets at least
  ``round(floor_share x mean_budget)`` draws) protects against a poor calibrator; the share is
  chosen on the training set by cross-fitting (:func:`choose_floor_share`).

Accuracy curves of voting rules need not be concave in n, so the greedy runs on each curve's
*upper concave hull* (:func:`concave_hull_greedy`): taking hull segments by decreasing slope is
optimal for the hull (a relaxation: hull >= curve), and every question but the one whose segment
is cut lands on a hull vertex, where hull = curve. So the allocation's true value is within one
question's segment of the hull bound; both numbers are returned, the gap states how exact the
oracle is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dprm.ias.constants import N_MAX


def _hull_segments(
    curves: np.ndarray, start: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Upper concave hull segments of every curve from its start, vectorised over questions.

    From vertex a the next vertex is the farthest b > a of largest chord slope
    (v[b] - v[a]) / (b - a): the hull of the points (n, v[n - 1]), n >= start. Slopes strictly
    decrease along each question's segments; only segments of positive slope are returned.

    Args:
        curves: [Q, n_max].
        start: int [Q] first n (1-based).

    Returns:
        (question [S], n_from [S], n_to [S], slope [S]).
    """
    q_count, n_max = curves.shape
    n = np.arange(1, n_max + 1)
    rows = np.arange(q_count)
    at = start.astype(np.int64).copy()
    out_q, out_a, out_b, out_s = [], [], [], []
    for _ in range(n_max):
        live = at < n_max
        if not live.any():
            break
        r, a = rows[live], at[live]
        span = n[None, :] - a[:, None]  # [L, n_max]
        chord = (curves[r] - curves[r, a - 1][:, None]) / np.where(span > 0, span, 1)
        chord = np.where(span > 0, chord, -np.inf)
        best = chord.max(axis=1)
        # the farthest b attaining the best slope (collinear points are not vertices)
        ties = chord >= best[:, None] - 1e-15 * np.maximum(1.0, np.abs(best[:, None]))
        b = n_max - np.argmax(ties[:, ::-1], axis=1)
        keep = best > 0
        out_q.append(r[keep])
        out_a.append(a[keep])
        out_b.append(b[keep])
        out_s.append(best[keep])
        at[live] = np.where(keep, b, n_max)  # a flat or falling hull gains nothing further
    cat = np.concatenate
    if not out_q:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, np.zeros(0)
    return cat(out_q), cat(out_a), cat(out_b), cat(out_s)


def concave_hull_greedy(
    curves: np.ndarray, mean_budget: float, floor: np.ndarray | int = 1, *, spend_all: bool = True
) -> tuple[np.ndarray, float]:
    """Budgets maximising sum_i hull_i(N_i) under a total budget (see the module docstring).

    Args:
        curves: [Q, n_max] accuracy-vs-n curves.
        mean_budget: mean draws per question, in [1, n_max].
        floor: the least draws per question (scalar or [Q]), >= 1.

    Returns:
        (int64 budgets [Q] with sum = round(mean_budget x Q) (or the floors' sum if larger), the
        hull value mean_i hull_i(N_i)). Budget left when no segment gains anything is spread
        evenly with ``spend_all`` (``auto``: a flat *predicted* curve may still gain), else left
        unspent (the oracle: the true curve says it cannot gain; voting curves can even fall).
    """
    curves = np.asarray(curves, dtype=np.float64)
    q_count, n_max = curves.shape
    if not 1.0 <= mean_budget <= n_max:
        raise ValueError(f"mean_budget must be in [1, {n_max}], got {mean_budget}")
    start = np.clip(np.broadcast_to(np.asarray(floor, dtype=np.int64), (q_count,)), 1, n_max)
    budgets = start.copy()
    left = int(round(mean_budget * q_count)) - int(budgets.sum())
    q_idx, a_idx, b_idx, slope = _hull_segments(curves, start)
    order = np.lexsort((a_idx, q_idx, -slope))  # by decreasing slope; ties: question, then n
    length = (b_idx - a_idx)[order]
    before = np.cumsum(length) - length
    take = np.clip(np.minimum(length, left - before), 0, None) if left > 0 else 0 * length
    np.add.at(budgets, q_idx[order], take)
    hull_gain = float((slope[order] * take).sum())
    left -= int(np.sum(take))
    while spend_all and left > 0:  # no gain left: spread the rest evenly
        room = np.flatnonzero(budgets < n_max)
        if len(room) == 0:
            break
        add = room[: min(left, len(room))]
        budgets[add] += 1
        left -= len(add)
    hull_value = (curves[np.arange(q_count), start - 1].sum() + hull_gain) / q_count
    return budgets, float(hull_value)


@dataclass
class SelectionModel:
    """g_n(p): expected accuracy of a rule's pick from n draws, given the pool's success rate p.

    Fitted on a training BoN set: per question the pool's share of correct candidates p_q and its
    accuracy curve under the rule; g is a Gaussian-kernel regression of the curves on p_q,
    evaluated on a grid of p and made non-decreasing in p (a larger share of correct candidates
    never hurts the pick) by a running maximum.

    Attributes:
        grid: [G] values of p.
        table: [G, n_max] g_n(p) on the grid.
    """

    grid: np.ndarray
    table: np.ndarray

    @classmethod
    def fit(
        cls, share: np.ndarray, curves: np.ndarray, bandwidth: float = 0.05, points: int = 101
    ) -> SelectionModel:
        """Fit on training pools: ``share`` [Q] correct share, ``curves`` [Q, n_max]."""
        share = np.asarray(share, dtype=np.float64)
        grid = np.linspace(0.0, 1.0, points)
        w = np.exp(-0.5 * ((grid[:, None] - share[None, :]) / bandwidth) ** 2)  # [G, Q]
        w_sum = w.sum(axis=1, keepdims=True)
        table = (w @ curves) / np.maximum(w_sum, 1e-300)
        # grid points with no training question nearby: g_n(0) = 0, g_n(1) = 1 anchor the ends
        empty = w_sum[:, 0] < 1e-6
        if empty.any():
            ok = ~empty
            for col in range(table.shape[1]):
                table[empty, col] = np.interp(
                    grid[empty],
                    np.concatenate([[0.0], grid[ok], [1.0]]),
                    np.concatenate([[0.0], table[ok, col], [1.0]]),
                )
        table = np.maximum.accumulate(np.clip(table, 0.0, 1.0), axis=0)
        return cls(grid, table)

    def predict(self, p: np.ndarray) -> np.ndarray:
        """g_n(p) for p [...] -> [..., n_max] (linear interpolation on the grid)."""
        p = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
        pos = p * (len(self.grid) - 1)
        lo = np.clip(np.floor(pos).astype(np.int64), 0, len(self.grid) - 2)
        frac = (pos - lo)[..., None]
        return self.table[lo] * (1 - frac) + self.table[lo + 1] * frac

    def expected_curve(self, samples: np.ndarray) -> np.ndarray:
        """E_p[g_n(p)] over per-question samples of p [Q, M] (e.g. quantiles at the M mid-point
        levels, or M = 1 for a point estimate) -> [Q, n_max].

        The mean of linear interpolations is a weight matrix W [Q, G] on the grid (each sample
        splits 1/M between its two grid neighbours), so this is W @ table: no [Q, M, n_max]
        temporary.
        """
        samples = np.asarray(samples, dtype=np.float64)
        if samples.ndim == 1:
            samples = samples[:, None]
        q_count, m = samples.shape
        g = len(self.grid)
        pos = np.clip(samples, 0.0, 1.0) * (g - 1)
        lo = np.clip(np.floor(pos).astype(np.int64), 0, g - 2)
        frac = pos - lo
        weights = np.zeros((q_count, g))
        rows = np.repeat(np.arange(q_count), m)
        np.add.at(weights, (rows, lo.ravel()), (1 - frac).ravel() / m)
        np.add.at(weights, (rows, lo.ravel() + 1), frac.ravel() / m)
        return weights @ self.table


def auto_budgets(predicted: np.ndarray, mean_budget: float, floor_share: float) -> np.ndarray:
    """``auto``: a uniform floor of round(floor_share x mean_budget) draws (at least 1), the rest
    by :func:`concave_hull_greedy` on the predicted curves [Q, n_max] -> budgets [Q]."""
    floor = max(1, min(int(round(floor_share * mean_budget)), int(np.floor(mean_budget))))
    return concave_hull_greedy(predicted, mean_budget, floor)[0]


def uniform_budgets(q_count: int, mean_budget: float, n_max: int = N_MAX) -> np.ndarray:
    """The same n for everyone, to the draw: round(mean_budget x Q) spread as evenly as possible
    (floor or ceil of the mean; the first questions in order get the extra draw)."""
    total = int(round(mean_budget * q_count))
    base, extra = divmod(total, q_count)
    budgets = np.full(q_count, base, dtype=np.int64)
    budgets[:extra] += 1
    return np.clip(budgets, 1, n_max)


#: floor shares ``auto`` chooses from (1.0 is uniform)
FLOOR_SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
#: costs (mean budget / n_max) ``auto`` is tuned and reported at
REPORT_COSTS = (0.05, 0.1, 0.25)


def choose_floor_share(
    share: np.ndarray,
    curves: np.ndarray,
    samples: np.ndarray,
    *,
    costs: Sequence[float] = REPORT_COSTS,
    shares: Sequence[float] = FLOOR_SHARES,
    folds: int = 2,
    seed: int = 0,
) -> tuple[float, dict[float, float]]:
    """The uniform floor share of ``auto``, by cross-fitting on a training BoN set.

    The training questions are cut into ``folds`` folds; for each, g is fitted on the others and
    ``auto`` allocates on this fold from the calibrator's estimates, scored with the fold's true
    curves. The chosen share maximises the mean gain over uniform across folds and costs; a
    share closer to uniform wins ties (within 1e-4).

    Args:
        share: [Q] training pools' correct share.
        curves: [Q, n_max] their true accuracy curves under the rule.
        samples: [Q, M] the calibrator's samples of p for those questions.

    Returns:
        (chosen share, {share: mean gain over uniform}).
    """
    q_count, n_max = curves.shape
    fold = np.random.default_rng(seed).permutation(q_count) % folds
    gains = {s: [] for s in shares}
    for f in range(folds):
        test, train = fold == f, fold != f
        model = SelectionModel.fit(share[train], curves[train])
        pred = model.expected_curve(samples[test])
        rows = np.arange(int(test.sum()))
        for cost in costs:
            mean_budget = float(np.clip(cost * n_max, 1, n_max))
            uni = curves[test][rows, uniform_budgets(len(rows), mean_budget, n_max) - 1].mean()
            for s in shares:
                got = curves[test][rows, auto_budgets(pred, mean_budget, s) - 1].mean()
                gains[s].append(got - uni)
    mean_gain = {s: float(np.mean(v)) for s, v in gains.items()}
    best = max(mean_gain.values())
    chosen = max(s for s, g in mean_gain.items() if g >= best - 1e-4)
    return chosen, mean_gain


#: ``auto`` falls back to uniform when a classifier tells test from training question states
#: with a held-out AUC above this (set a priori, not tuned on the reported grid)
SHIFT_AUC = 0.75


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counting one half."""
    scores = np.concatenate([pos, neg])
    ranks = pd_rank(scores)
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def pd_rank(values: np.ndarray) -> np.ndarray:
    """Average ranks (1-based) of ``values``, ties averaged."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    sorted_v = values[order]
    start = 0
    while start < len(values):
        stop = start
        while stop + 1 < len(values) and sorted_v[stop + 1] == sorted_v[start]:
            stop += 1
        ranks[order[start : stop + 1]] = (start + stop) / 2 + 1
        start = stop + 1
    return ranks


def shift_auc(train_hidden: np.ndarray, test_hidden: np.ndarray, seed: int = 0) -> float:
    """Label-free covariate-shift score of test questions against the training questions.

    A 2-fold mean-difference classifier on standardised question states: the direction
    w = mean(test) - mean(train) (per-dimension standardised by the training fold) is fitted on
    one half of each set and scored on the other; the held-out AUC is averaged over the two
    folds. 0.5: indistinguishable; near 1: the test questions are unlike the training pools,
    so a selection model learnt there need not hold.

    Args:
        train_hidden: [Q_train, D] question states of the training BoN set.
        test_hidden: [Q_test, D] question states of the set to allocate on.
    """
    rng = np.random.default_rng(seed)
    a = np.asarray(train_hidden, dtype=np.float64)
    b = np.asarray(test_hidden, dtype=np.float64)
    fa, fb = rng.permutation(len(a)) % 2, rng.permutation(len(b)) % 2
    aucs = []
    for f in (0, 1):
        fit_a, fit_b = a[fa != f], b[fb != f]
        mu, sd = fit_a.mean(axis=0), fit_a.std(axis=0) + 1e-6
        w = ((fit_b - mu) / sd).mean(axis=0) - ((fit_a - mu) / sd).mean(axis=0)
        score_a, score_b = ((a[fa == f] - mu) / sd) @ w, ((b[fb == f] - mu) / sd) @ w
        aucs.append(_auc(score_b, score_a))
    return float(np.mean(aucs))
