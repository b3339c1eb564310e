"""Small in-memory worlds with closed-form conditional quantiles, for calibrator tests."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pandas as pd

from dprm.data.contract import CalibrationSet

MIDPOINTS = (np.arange(50) + 0.5) / 50
#: training budget and small networks shared by the map calibrators' closed-form tests; patience
#: off: the budget is the point (the default wait, twice the kept step, stops a run whose warm-up
#: ends at 100 by step 200, before these worlds' maps settle)
STEPS = {
    "patience": "0",
    "max_steps": "400",
    "warmup_steps": "100",
    "eval_every": "25",
    "context_hidden": "16",
    "picnn_hidden": "16",
}


def calibration_set(
    y: np.ndarray, hidden: np.ndarray, n_questions: int, seed: int = 0
) -> CalibrationSet:
    """In-memory set; records are spread over ``n_questions`` questions for the grouped split."""
    rng = np.random.default_rng(seed)
    n = len(y)
    records = pd.DataFrame(
        {
            "question_id": [f"q{i:04d}" for i in rng.integers(0, n_questions, n)],
            "response_id": np.zeros(n, np.int32),
            "step": np.zeros(n, np.int32),
            "prm_score": rng.uniform(0.5, 1.0, n).astype(np.float32),
            "success_prob": np.asarray(y, np.float32),
            "n_rollouts": np.ones(n, np.int32),
        }
    )
    return CalibrationSet(records, np.asarray(hidden, np.float32), {"kind": "calibration"})


def beta25_quantile(levels: np.ndarray) -> np.ndarray:
    """Beta(2, 5) quantiles by bisection on F(x) = 1 - (1 - x)^6 - 6 x (1 - x)^5."""
    levels = np.asarray(levels, np.float64)
    lo, hi = np.zeros_like(levels), np.ones_like(levels)
    for _ in range(60):
        mid = (lo + hi) / 2
        below = 1 - (1 - mid) ** 6 - 6 * mid * (1 - mid) ** 5 < levels
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


def beta_world(n: int, seed: int) -> CalibrationSet:
    """y ~ Beta(2, 5) whatever h (h is noise): the map must become Beta(2, 5)'s quantiles."""
    rng = np.random.default_rng(seed)
    return calibration_set(rng.beta(2.0, 5.0, n), rng.normal(size=(n, 3)), n // 10, seed)


def probit(levels: np.ndarray) -> np.ndarray:
    return np.array([NormalDist().inv_cdf(float(t)) for t in levels])


def logit_params(hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mu(h), sigma(h) of the Gaussian-logit world."""
    mu = 1.5 * hidden[:, 0] - 0.4
    sigma = 0.3 + 0.6 / (1 + np.exp(-2.0 * hidden[:, 1]))
    return mu, sigma


def gaussian_logit_world(n: int, seed: int) -> CalibrationSet:
    """logit y | h ~ N(mu(h), sigma(h)^2) with mean and spread both depending on h."""
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(n, 3))
    mu, sigma = logit_params(hidden)
    y = 1 / (1 + np.exp(-(mu + sigma * rng.standard_normal(n))))
    return calibration_set(y, hidden, n // 10, seed)


def gaussian_logit_quantile(hidden: np.ndarray, levels: np.ndarray) -> np.ndarray:
    mu, sigma = logit_params(hidden)
    return 1 / (1 + np.exp(-(mu[:, None] + sigma[:, None] * probit(levels)[None, :])))


def discrete_context_world(n: int, seed: int) -> tuple[CalibrationSet, np.ndarray]:
    """Three contexts (one-hot h) with different laws, one of them with atoms (k / 8)."""
    rng = np.random.default_rng(seed)
    context = rng.integers(0, 3, n)
    y = np.where(
        context == 0,
        rng.beta(2.0, 8.0, n),
        np.where(context == 1, rng.beta(6.0, 2.0, n), rng.binomial(8, 0.45, n) / 8),
    )
    hidden = np.eye(3)[context] + 0.05 * rng.normal(size=(n, 3))
    return calibration_set(y, hidden, n // 10, seed), context
