"""``isotonic`` and ``platt``: score-only point calibrators checked against reference solvers.

* isotonic against ``sklearn.isotonic.IsotonicRegression(out_of_bounds="clip")`` with
  n_rollouts sample weights, including tied scores (which sklearn pools before PAV);
* platt against an independent float64 Newton-Raphson solver of the same binomial likelihood
  and against ``sklearn.linear_model.LogisticRegression(C=inf)`` (unpenalised) fitted on the counts
  expanded to 0/1 rollouts with sample weights.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from dprm.data.contract import CalibrationSet
from dprm.models import REGISTRY, load
from dprm.models.score_only import (
    IsotonicCalibrator,
    IsotonicConfig,
    PlattCalibrator,
    PlattConfig,
    fit_isotonic,
    pool_adjacent_violators,
    score_logit,
)


def make_set(score: np.ndarray, k: np.ndarray, n: np.ndarray, dim: int = 3) -> CalibrationSet:
    """An in-memory calibration set; hidden states are noise (score-only methods ignore them)."""
    records = pd.DataFrame(
        {
            "question_id": [f"q{i // 4}" for i in range(len(score))],
            "response_id": np.zeros(len(score), np.int32),
            "step": np.zeros(len(score), np.int32),
            "prm_score": score.astype(np.float32),
            "success_prob": (k / n).astype(np.float32),
            "n_rollouts": n.astype(np.int32),
        }
    )
    hidden = np.random.default_rng(0).normal(size=(len(score), dim)).astype(np.float32)
    return CalibrationSet(records, hidden)


def random_counts(seed: int, size: int, ties: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over-confident PRM scores with binomial counts; ``ties`` rounds scores to 2 decimals."""
    rng = np.random.default_rng(seed)
    p = rng.beta(1.5, 2.5, size)
    score = 1 / (1 + np.exp(-(2.0 * np.log(p / (1 - p)) + 1.0 + rng.normal(0, 0.5, size))))
    score = np.round(score, 2) if ties else score.astype(np.float32).astype(np.float64)
    n = rng.choice([4, 8, 16], size).astype(np.float64)
    k = rng.binomial(n.astype(int), p).astype(np.float64)
    return score, k, n


def test_registered():
    assert REGISTRY["isotonic"] is IsotonicCalibrator and REGISTRY["platt"] is PlattCalibrator
    for cls in (IsotonicCalibrator, PlattCalibrator):
        assert cls.kind == "point" and cls.uses_hidden is False


def test_pav_small_exact():
    # Violations pool into weighted means: (3*1 + 1*3) / 4 = 1.5.
    fitted = pool_adjacent_violators(np.array([0.0, 3.0, 1.0, 2.0]), np.array([1.0, 1.0, 3.0, 1.0]))
    np.testing.assert_allclose(fitted, [0.0, 1.5, 1.5, 2.0])


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_isotonic_matches_sklearn(seed, ties):
    from sklearn.isotonic import IsotonicRegression

    score, k, n = random_counts(seed, 600, ties)
    model, history = IsotonicCalibrator.fit_model(
        make_set(score, k, n), make_set(score[:50], k[:50], n[:50]), IsotonicConfig(), seed, False
    )
    reference = IsotonicRegression(out_of_bounds="clip").fit(score, k / n, sample_weight=n)
    # Query inside the range, at the knots and beyond both ends.
    query = np.concatenate([np.linspace(-0.1, 1.1, 301), score[:100]]).astype(np.float32)
    ours = model.point_estimate(None, query).astype(np.float64)
    np.testing.assert_allclose(ours, reference.predict(query.astype(np.float64)), atol=1e-6)
    assert np.all(np.diff(model.predict(torch.linspace(0, 1, 500)).numpy()) >= 0)
    assert history[0]["knots"] == len(np.unique(score))


def test_isotonic_unweighted_differs_and_matches_sklearn():
    from sklearn.isotonic import IsotonicRegression

    score, k, n = random_counts(3, 300, ties=False)
    x, y = fit_isotonic(score, k / n, np.ones_like(n))
    reference = IsotonicRegression().fit(score, k / n)
    np.testing.assert_allclose(y, reference.predict(x), atol=1e-9)
    _, y_weighted = fit_isotonic(score, k / n, n)
    assert np.abs(y - y_weighted).max() > 1e-3  # the weights matter on this data


def newton_platt(x: np.ndarray, k: np.ndarray, n: np.ndarray, steps: int = 50) -> np.ndarray:
    """Independent Newton-Raphson for the binomial logistic likelihood (float64)."""
    design = np.column_stack([x, np.ones_like(x)])
    theta = np.zeros(2)
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(design @ theta)))
        grad = design.T @ (n * p - k)
        hess = design.T @ (design * (n * p * (1 - p))[:, None])
        theta -= np.linalg.solve(hess, grad)
    return theta


@pytest.mark.parametrize("seed", [0, 1])
def test_platt_matches_newton_and_sklearn(seed):
    from sklearn.linear_model import LogisticRegression

    score, k, n = random_counts(seed, 800, ties=False)
    model, _ = PlattCalibrator.fit_model(
        make_set(score, k, n), make_set(score[:10], k[:10], n[:10]), PlattConfig(), seed, False
    )
    a, b = float(model.slope), float(model.intercept)
    x = score_logit(torch.from_numpy(score), PlattConfig.score_eps).numpy()
    np.testing.assert_allclose([a, b], newton_platt(x, k, n), atol=1e-6)
    # Expanded 0/1 rollouts: each record contributes k ones and n - k zeros, as weights.
    features = np.concatenate([x, x])[:, None]
    labels = np.concatenate([np.ones_like(x), np.zeros_like(x)])
    weights = np.concatenate([k, n - k])
    keep = weights > 0
    reference = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10_000).fit(
        features[keep], labels[keep], sample_weight=weights[keep]
    )
    np.testing.assert_allclose([a, b], [reference.coef_[0, 0], reference.intercept_[0]], atol=1e-4)
    # The score is over-confident and biased upwards: a < 1 (temperature > 1) and b < 0.
    assert a < 1 and b < 0


@pytest.mark.parametrize("cls", [IsotonicCalibrator, PlattCalibrator])
def test_save_load_identical(cls, tmp_path):
    score, k, n = random_counts(5, 400, ties=True)
    data = make_set(score, k, n)
    model, _ = cls.fit_model(data, data, cls.config_class(), 0, False)
    model.save(tmp_path / "m")
    loaded = load(tmp_path / "m")
    assert type(loaded) is cls
    query = np.linspace(0, 1, 257, dtype=np.float32)
    np.testing.assert_array_equal(
        loaded.point_estimate(None, query), model.point_estimate(None, query)
    )
    assert not any(p.suffix in (".pkl", ".pt", ".bin") for p in (tmp_path / "m").iterdir())


def test_fit_improves_log_loss_over_raw_score():
    score, k, n = random_counts(7, 2000, ties=False)
    train, val = (
        make_set(score[:1500], k[:1500], n[:1500]),
        make_set(score[1500:], k[1500:], n[1500:]),
    )
    p_raw = np.clip(score[1500:], 1e-6, 1 - 1e-6)
    raw = -np.sum(k[1500:] * np.log(p_raw) + (n - k)[1500:] * np.log1p(-p_raw)) / n[1500:].sum()
    for cls in (IsotonicCalibrator, PlattCalibrator):
        _, history = cls.fit_model(train, val, cls.config_class(), 0, False)
        assert history[0]["val_log_loss"] < raw - 0.02
