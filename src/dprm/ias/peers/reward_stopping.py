"""Reward-based stopping rules for best-of-N, fitted on the training pools' raw PRM scores.

Two published rules that stop drawing for a question once one more draw is not worth its cost
``c`` (the knob each is swept over); neither reads a calibrator, both read the raw PRM score
(last step) of the draws and the training pools' raw scores (:class:`TrainingScores`):

* ``beacon`` -- a reward posterior in the spirit of BEACON (Wan et al. 2025, arXiv 2510.15945):
  the logit of a draw's score y = log(s / (1 - s)) of one question is Normal(mu, s2) with a
  Normal-Inverse-Gamma prior NIG(m0, k0, a0, b0) fitted on the training pools by moments
  (:func:`fit_nig`). After n draws with mean ybar and squared deviations S the posterior is
  NIG(mn, kn, an, bn): kn = k0 + n, mn = (k0 m0 + n ybar) / kn, an = a0 + n / 2,
  bn = b0 + S / 2 + k0 n (ybar - m0)^2 / (2 kn); the next draw's predictive is Student-t with
  nu = 2 an degrees of freedom, location mn and scale^2 = bn (kn + 1) / (an kn). The rule stops
  when the expected improvement of the best logit from one more draw,
  E[(Y_{n+1} - best_n)^+] = scale ((nu + z^2) / (nu - 1) f_nu(z) - z (1 - F_nu(z))),
  z = (best_n - mn) / scale, is at most c (:func:`student_t_improvement`).
  Simplified from the paper: BEACON stops on a precomputed index of the posterior that also
  counts what later draws teach (its optimal stopping rule of sequential search with Bayesian
  learning); here the rule is its one-step look-ahead (stop when one more draw's expected gain
  is at most its cost), which ignores the value of learning and so stops at least as early.
* ``pandora`` -- Weitzman's reservation value (Pandora's box, Weitzman 1979; used for
  best-of-N by Kalayci, Raman & Dughmi 2025, arXiv 2510.01394): every further draw is a box of
  cost c whose reward X has the training pools' distribution of raw scores; its reservation
  value sigma solves E[(X - sigma)^+] = c (:func:`reservation_value`, exact on the empirical
  distribution), and the optimal rule stops as soon as the best score drawn is >= sigma.
  Simplified from the paper: it learns each prompt's distribution online (a UCB-style estimate
  of sigma after Bradley-Terry normalisation of the rewards); here the distribution is the
  training pools' (Weitzman's rule with the distribution known), the same for every question,
  so the rule is a threshold on the best raw score (as ``score-raw``) at sigma(c) -- the two
  trace the same family of thresholds, parametrised by the draw's cost instead of a quantile.

Both fits read only the training pools: the view's ``train`` (the training candidates' raw
scores and their question), never the test draws.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dprm.ias.peers.views import DrawView, TrainingScores, first_stop

#: the costs c of one more draw swept for ``pandora`` (raw-score units; 0: never stop)
PANDORA_COSTS = (0.3, 0.1, 0.05, 0.03, 0.02, 0.01, 0.005, 0.002, 1e-3, 3e-4, 1e-4, 0.0)
#: the costs c swept for ``beacon`` (logit units; 0: never stop)
BEACON_COSTS = (1.0, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 5e-3, 2e-3, 5e-4, 0.0)
#: scores are clipped to [EPS, 1 - EPS] before the logit
EPS = 1e-4


def reservation_value(values: np.ndarray, cost: float) -> float:
    """Weitzman's reservation value sigma of a box with rewards ``values`` (equally likely;
    any shape) and opening cost ``cost``: the sigma with E[(X - sigma)^+] = cost.

    E[(X - sigma)^+] falls piecewise linearly in sigma, with slope -P(X > sigma); below the
    smallest value it is mean - sigma (so a cost above mean - min gives sigma = mean - cost).
    cost <= 0: inf (never stop).
    """
    x = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if cost <= 0:
        return float("inf")
    n = len(x)
    # excess[j] = E[(X - x[j])^+] = sum_{i > j} (x[i] - x[j]) / n, falling in j
    tail = np.cumsum(x[::-1])[::-1]  # tail[j] = sum_{i >= j} x[i]
    excess = (tail - x * (n - np.arange(n))) / n
    if cost >= excess[0]:
        return float(x[0] - (cost - excess[0]))  # slope -1 below the smallest value
    j = int(np.flatnonzero(excess > cost)[-1])  # excess[j] > cost >= excess[j + 1]
    above = (n - j - 1) / n  # P(X > sigma) on (x[j], x[j + 1]]
    return float(x[j] + (excess[j] - cost) / above)


def pandora_budgets(view: DrawView, levels: Sequence[float]) -> np.ndarray:
    """``pandora``'s draws [L, T, Q]: the first n whose best raw score is >= sigma(c), for each
    cost c of ``levels``, sigma from the training pools' raw scores (``view.train``)."""
    train = _train_of(view)
    best = np.maximum.accumulate(np.where(np.isfinite(view.score), view.score, -np.inf), axis=-1)
    return np.stack(
        [first_stop(best, reservation_value(train.raw, float(c)), view.cap) for c in levels]
    )


@dataclass(frozen=True)
class NIGPrior:
    """A Normal-Inverse-Gamma prior of one question's draw logits: mu | s2 ~ N(m0, s2 / k0),
    s2 ~ InvGamma(a0, b0)."""

    m0: float
    k0: float
    a0: float
    b0: float


def logit(score: np.ndarray) -> np.ndarray:
    s = np.clip(np.asarray(score, dtype=np.float64), EPS, 1 - EPS)
    return np.log(s / (1 - s))


def fit_nig(values: np.ndarray, question: np.ndarray) -> NIGPrior:
    """The NIG prior of the logits, by moments over the training questions.

    E[s2] is the mean within-question variance (unbiased, questions with >= 2 candidates);
    a0 from the spread of those variances (Var(s2) = E[s2]^2 / (a0 - 2), less the sampling
    noise 2 E[s2]^2 / (K - 1) of a variance of K draws), kept in [2.5, 1e3]; b0 = E[s2] (a0 - 1);
    m0 the mean of the question means; k0 = E[s2] / Var(mu), Var(mu) the variance of the
    question means less the noise E[s2] / K, kept in [0.01, 1e3].

    Args:
        values: [R] the training candidates' raw scores (in (0, 1)).
        question: [R] their question index.
    """
    y = logit(values)
    q = np.asarray(question)
    _, inv, count = np.unique(q, return_inverse=True, return_counts=True)
    total = np.bincount(inv, weights=y)
    mean = total / count
    sq = np.bincount(inv, weights=(y - mean[inv]) ** 2)
    many = count >= 2
    if not many.any():
        raise ValueError("fitting the reward prior needs training questions with >= 2 candidates")
    var = sq[many] / (count[many] - 1)
    e_s2 = max(float(var.mean()), 1e-6)
    k_bar = float(count[many].mean())
    spread = float(var.var()) - 2 * e_s2**2 / max(k_bar - 1, 1.0)
    a0 = float(np.clip(2 + e_s2**2 / spread, 2.5, 1e3)) if spread > 0 else 1e3
    var_mu = float(mean.var()) - e_s2 / float(count.mean())
    k0 = float(np.clip(e_s2 / var_mu, 0.01, 1e3)) if var_mu > 0 else 1e3
    return NIGPrior(float(mean.mean()), k0, a0, e_s2 * (a0 - 1))


def nig_predictive(
    prior: NIGPrior, n: np.ndarray, ybar: np.ndarray, sq: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The next draw's Student-t predictive after n >= 1 draws of mean ``ybar`` and squared
    deviations ``sq`` (any shapes, broadcast): (degrees of freedom, location, scale)."""
    kn = prior.k0 + n
    mn = (prior.k0 * prior.m0 + n * ybar) / kn
    an = prior.a0 + n / 2
    bn = prior.b0 + sq / 2 + prior.k0 * n * (ybar - prior.m0) ** 2 / (2 * kn)
    return 2 * an, mn, np.sqrt(bn * (kn + 1) / (an * kn))


@functools.cache
def _t_table(nu: float, half_width: float = 60.0, points: int = 24001):
    """z grid and the upper tail 1 - F_nu(z) of a standard Student-t (trapezoid on the pdf)."""
    z = np.linspace(-half_width, half_width, points)
    pdf = _t_pdf(z, nu)
    cdf = np.concatenate([[0.0], np.cumsum((pdf[1:] + pdf[:-1]) / 2 * np.diff(z))])
    return z, 1 - cdf / cdf[-1]


def _t_pdf(z: np.ndarray, nu: float) -> np.ndarray:
    log_c = math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi)
    return np.exp(log_c - (nu + 1) / 2 * np.log1p(z * z / nu))


def student_t_improvement(z: np.ndarray, nu: float) -> np.ndarray:
    """E[(T - z)^+] of a standard Student-t T with nu > 1 degrees of freedom, elementwise:
    (nu + z^2) / (nu - 1) f_nu(z) - z (1 - F_nu(z))."""
    grid, upper = _t_table(float(nu))
    z = np.asarray(z, dtype=np.float64)
    tail = np.interp(z, grid, upper, left=1.0, right=0.0)
    out = (nu + z * z) / (nu - 1) * _t_pdf(z, nu) - z * tail
    return np.maximum(out, 0.0)


def beacon_improvement(view: DrawView, prior: NIGPrior) -> np.ndarray:
    """The expected improvement of the best logit from one more draw after each n draws
    [T, Q, K] (inf past a question's pool)."""
    valid = np.isfinite(view.score)
    y = np.where(valid, logit(np.where(valid, view.score, 0.5)), 0.0)
    n = np.cumsum(valid, axis=-1)
    safe_n = np.maximum(n, 1)
    ybar = np.cumsum(y, axis=-1) / safe_n
    sq = np.maximum(np.cumsum(y * y, axis=-1) - safe_n * ybar**2, 0.0)
    best = np.maximum.accumulate(np.where(valid, y, -np.inf), axis=-1)
    out = np.full(view.score.shape, np.inf)
    for count in np.unique(n[valid]):  # one degrees of freedom per draw count
        at = valid & (n == count)
        nu, loc, scale = nig_predictive(prior, float(count), ybar[at], sq[at])
        out[at] = scale * student_t_improvement((best[at] - loc) / scale, float(nu))
    return out


def beacon_budgets(view: DrawView, levels: Sequence[float]) -> np.ndarray:
    """``beacon``'s draws [L, T, Q]: the first n whose expected improvement from one more draw
    is <= c, for each cost c of ``levels`` (0: never stop), the prior fitted on the training
    pools (``view.train``)."""
    train = _train_of(view)
    if train.question is None:
        raise ValueError("beacon's prior is fitted per training question: TrainingScores.question")
    signal = -beacon_improvement(view, fit_nig(train.raw, train.question))
    out = []
    for c in levels:
        level = -float(c) if c > 0 else np.inf
        out.append(first_stop(signal, level, view.cap))
    return np.stack(out)


def _train_of(view: DrawView) -> TrainingScores:
    if view.train is None:
        raise ValueError("the reward-based stopping rules are fitted on the training pools' scores")
    return view.train
