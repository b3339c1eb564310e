"""The posterior of ``auto-seq``: how a drawn candidate's calibrated estimate and final answer
read as evidence about the question's success probability p, both fitted on training pools."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: probabilities are clipped this far from 0 and 1 before a logit
EPS = 1e-6


def logit(p: np.ndarray) -> np.ndarray:
    """log(p / (1 - p)), p clipped to [EPS, 1 - EPS]."""
    p = np.clip(np.asarray(p, dtype=np.float64), EPS, 1 - EPS)
    return np.log(p) - np.log1p(-p)


def _fit_logistic(x: np.ndarray, y: np.ndarray, ridge: float = 1e-3, steps: int = 50) -> np.ndarray:
    """Ridge-penalised logistic regression by Newton's method: x [n, d] (first column 1), y [n]
    -> coefficients [d] (deterministic)."""
    beta = np.zeros(x.shape[1])
    penalty = ridge * np.eye(x.shape[1])
    penalty[0, 0] = 0.0
    for _ in range(steps):
        eta = np.clip(x @ beta, -30, 30)
        mu = 1 / (1 + np.exp(-eta))
        grad = x.T @ (y - mu) - penalty @ beta
        hess = (x * (mu * (1 - mu))[:, None]).T @ x + penalty
        step = np.linalg.solve(hess, grad)
        beta += step
        if np.abs(step).max() < 1e-10:
            break
    return beta


@dataclass
class CandidateLikelihood:
    """log r(e) = logit P(c = 1 | e, m) - logit P(c = 1 | m), fitted on training pools.

    Attributes:
        with_estimate: [3] coefficients of (1, logit m, logit e).
        prior_only: [2] coefficients of (1, logit m).
    """

    with_estimate: np.ndarray
    prior_only: np.ndarray

    @classmethod
    def fit(
        cls, prior_mean: np.ndarray, estimate: np.ndarray, correct: np.ndarray, valid: np.ndarray
    ) -> CandidateLikelihood:
        """Fit on training pools.

        Args:
            prior_mean: [Q] the questions' calibrated prior mean m.
            estimate: [Q, K] the candidates' calibrated estimates e.
            correct: [Q, K] 0/1 correctness.
            valid: [Q, K] real candidates (not padding).
        """
        lm = np.broadcast_to(logit(prior_mean)[:, None], estimate.shape)[valid]
        le = logit(estimate)[valid]
        y = np.asarray(correct, dtype=np.float64)[valid]
        ones = np.ones_like(lm)
        return cls(
            _fit_logistic(np.column_stack([ones, lm, le]), y),
            _fit_logistic(np.column_stack([ones, lm]), y),
        )

    def log_ratio(self, prior_mean: np.ndarray, estimate: np.ndarray) -> np.ndarray:
        """log r(e) [Q, K] for prior means [Q] and candidate estimates [Q, K]."""
        lm = logit(prior_mean)[:, None]
        le = logit(estimate)
        a, b = self.with_estimate, self.prior_only
        return (a[0] + a[1] * lm + a[2] * le) - (b[0] + b[1] * lm)


def rising_log(alpha: np.ndarray, n_max: int) -> np.ndarray:
    """log of the rising factorial alpha (alpha + 1) ... (alpha + t - 1) for t = 0..n_max:
    [..., n_max + 1] for alpha [...] (= lgamma(alpha + t) - lgamma(alpha), without lgamma)."""
    alpha = np.asarray(alpha, dtype=np.float64)
    terms = np.log(alpha[..., None] + np.arange(n_max))
    return np.concatenate([np.zeros((*alpha.shape, 1)), np.cumsum(terms, axis=-1)], axis=-1)


#: log (t - 1)! for cluster sizes t = 0..4096 (index t; t = 0 unused)
LOG_FACT = np.concatenate([[0.0, 0.0], np.cumsum(np.log(np.arange(1, 4096)))])


@dataclass
class WrongAnswerModel:
    """How wrong answers collide: a CRP with concentration log alpha(p) = intercept + slope
    logit p, fitted on training pools by maximum likelihood.

    The CRP's log-probability of a sequence of m wrong answers in k clusters of sizes t_i is
    k log alpha + sum_i log (t_i - 1)! - log[alpha (alpha + 1) ... (alpha + m - 1)]; it is
    concave in log alpha, so Newton's method on (intercept, slope) converges (deterministic).

    Attributes:
        intercept, slope: of log alpha in logit p.
    """

    intercept: float
    slope: float

    def log_alpha(self, p: np.ndarray) -> np.ndarray:
        """log alpha(p) for p [...] (p clipped to [0.005, 0.995])."""
        return self.intercept + self.slope * logit(np.clip(p, 0.005, 0.995))

    @classmethod
    def fit(
        cls, answer: np.ndarray, correct: np.ndarray, valid: np.ndarray, steps: int = 50
    ) -> WrongAnswerModel:
        """Fit on training pools: answer codes, 0/1 correctness and validity [Q, K].

        A question's p is its pool's share of correct candidates (clipped to half a candidate
        from 0 and 1); only its wrong candidates' answers enter the likelihood. With no
        question of two or more wrong answers the model is alpha = 1 everywhere.
        """
        valid = np.asarray(valid, dtype=bool)
        size = valid.sum(axis=1)
        share = np.where(valid, correct, 0).sum(axis=1) / np.maximum(size, 1)
        half = 0.5 / np.maximum(size, 1)
        x = logit(np.clip(share, half, 1 - half))
        wrong_n, clusters = [], []
        for q in range(len(size)):
            codes = np.asarray(answer[q])[valid[q] & (np.asarray(correct[q]) < 0.5)]
            wrong_n.append(len(codes))
            clusters.append(len(np.unique(codes)))  # sum log (t_i - 1)! does not depend on alpha
        m, k = np.asarray(wrong_n), np.asarray(clusters, dtype=np.float64)
        keep = m >= 2
        if not keep.any():
            return cls(0.0, 0.0)
        x, m, k = x[keep], m[keep], k[keep]
        design = np.column_stack([np.ones_like(x), x])
        theta = np.zeros(2)
        steps_i = np.arange(int(m.max()))[None, :]
        inside = steps_i < m[:, None]  # the terms i = 0..m-1 of each question
        for _ in range(steps):
            alpha = np.exp(np.clip(design @ theta, -20, 20))
            frac = np.where(inside, alpha[:, None] / (alpha[:, None] + steps_i), 0.0)
            # d/du of k u - sum_i log(e^u + i), u = log alpha, and its (negative) curvature
            grad_u = k - frac.sum(axis=1)
            curv_u = (frac * (1 - frac)).sum(axis=1) + 1e-9
            grad = design.T @ grad_u - 1e-6 * theta
            hess = (design * curv_u[:, None]).T @ design + 1e-6 * np.eye(2)
            step = np.linalg.solve(hess, grad)
            step *= min(1.0, 2.0 / max(np.abs(step).max(), 1e-300))  # damped far from the optimum
            theta += step
            if np.abs(step).max() < 1e-10:
                break
        return cls(float(theta[0]), float(theta[1]))
