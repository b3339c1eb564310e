"""``conformal``: the split-conformal lower bound and its finite-sample guarantee.

The guarantee P(y >= L(h)) >= 1 - alpha holds over the joint draw of calibration and test
points. Conditional on a fixed pool of exchangeable points, random splits of the pool are
themselves exchangeable, so E[test coverage | pool] >= 1 - alpha exactly; the mean over 200
random splits estimates it with standard error SE = sd / sqrt(200), and we allow 3 SE.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import Tensor

from dprm.data.contract import CalibrationSet
from dprm.data.splits import split_by_question
from dprm.models import REGISTRY, load
from dprm.models.conformal import (
    ConformalCalibrator,
    ConformalConfig,
    beta_quantile,
    calibration_rows,
    conformal_correction,
    conformal_rank,
)
from dprm.models.interface import Calibrator, QuantileFunction
from dprm.models.score_only import PlattCalibrator, PlattConfig

N_SPLITS = 200
ALPHA = 0.1


class LogitNormalQuantiles(QuantileFunction):
    def __init__(self, mu: Tensor, sigma: Tensor, shift: float):
        self.mu, self.sigma, self.shift = mu, sigma, shift

    def quantile(self, levels: Tensor) -> Tensor:
        z = torch.special.ndtri(levels.double().clamp(1e-9, 1 - 1e-9))
        q = torch.sigmoid(self.mu[:, None].double() + self.sigma[:, None].double() * z) + self.shift
        return q.clamp(0, 1).float()


class ClosedFormCalibrator(Calibrator):
    """The true quantile function of p (h = (mu, sigma)), shifted up by ``shift`` (over-confident)."""

    def __init__(self, shift: float):
        super().__init__(2)
        self.shift = shift

    def forward(self, hidden: Tensor, prm_score: Tensor | None = None) -> QuantileFunction:
        return LogitNormalQuantiles(hidden[:, 0], hidden[:, 1], self.shift)

    @classmethod
    def fit_model(cls, train, val, config, seed, progress):
        raise NotImplementedError("a fixed test double")


def make_set(hidden, y, n_rollouts, question_id, score=None) -> CalibrationSet:
    size = len(y)
    records = pd.DataFrame(
        {
            "question_id": question_id,
            "response_id": np.zeros(size, np.int32),
            "step": np.zeros(size, np.int32),
            "prm_score": (np.full(size, 0.5) if score is None else score).astype(np.float32),
            "success_prob": y.astype(np.float32),
            "n_rollouts": np.full(size, n_rollouts, np.int32),
        }
    )
    return CalibrationSet(records, hidden.astype(np.float32))


def iid_pool(seed: int, size: int, continuous: bool) -> CalibrationSet:
    """i.i.d. records: logit p ~ N(mu, sigma^2) with (mu, sigma) as the hidden state."""
    rng = np.random.default_rng(seed)
    mu, sigma = rng.normal(-0.3, 1.0, size), rng.uniform(0.4, 1.4, size)
    p = 1 / (1 + np.exp(-(mu + sigma * rng.standard_normal(size))))
    # A continuous label (n_rollouts = 1 is only a container here) vs k / 8 from 8 rollouts.
    y = p.astype(np.float32) if continuous else rng.binomial(8, p) / 8
    return make_set(
        np.column_stack([mu, sigma]), y, 1 if continuous else 8, [f"q{i}" for i in range(size)]
    )


def split_coverages(q: np.ndarray, y: np.ndarray, n_cal: int, seed: int) -> np.ndarray:
    """Test coverage of clip(q - c, 0, 1) over ``N_SPLITS`` random calibration/test splits."""
    rng = np.random.default_rng(seed)
    out = np.empty(N_SPLITS)
    for i in range(N_SPLITS):
        perm = rng.permutation(len(y))
        cal, test = perm[:n_cal], perm[n_cal:]
        c = conformal_correction(q[cal] - y[cal], ALPHA)
        out[i] = np.mean(y[test] >= np.clip(q[test] - c, 0, 1))
    return out


def test_rank_and_correction():
    assert conformal_rank(99, 0.1) == 90  # (99 + 1) * 0.9 = 90 exactly, despite float error
    assert conformal_rank(100, 0.1) == 91
    assert conformal_correction(np.arange(10.0), 0.05) == math.inf  # rank 11 > 10
    assert conformal_correction(np.arange(19.0)[::-1], 0.1) == 17.0  # rank 18 of 0..18
    with pytest.raises(ValueError):
        conformal_rank(10, 0.0)


@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_coverage_200_splits_discrete_labels(beta):
    data = iid_pool(0, 2500, continuous=False)
    y = data.records["success_prob"].to_numpy(np.float64)
    q = beta_quantile(ClosedFormCalibrator(shift=0.05), data, beta)
    raw = np.mean(y >= q)
    assert raw < 1 - ALPHA - 0.05  # the uncorrected bound is far from valid: the test can fail
    cov = split_coverages(q, y, n_cal=300, seed=1)
    se = cov.std(ddof=1) / np.sqrt(N_SPLITS)
    assert cov.mean() >= 1 - ALPHA - 3 * se


def test_coverage_200_splits_continuous_is_tight():
    data = iid_pool(2, 2500, continuous=True)
    y = data.records["success_prob"].to_numpy(np.float64)
    q = beta_quantile(ClosedFormCalibrator(shift=0.1), data, 0.1)
    n_cal = 50
    cov = split_coverages(q, y, n_cal=n_cal, seed=3)
    se = cov.std(ddof=1) / np.sqrt(N_SPLITS)
    assert cov.mean() >= 1 - ALPHA - 3 * se
    # Continuous scores: coverage is also at most 1 - alpha + 1 / (n + 1).
    assert cov.mean() <= 1 - ALPHA + 1 / (n_cal + 1) + 3 * se
    # The check has power: the naive rank ceil(n (1 - alpha)) (no "+ 1") covers only
    # 45 / 51 = 0.882 in expectation here and fails it.
    rng = np.random.default_rng(3)
    naive = np.empty(N_SPLITS)
    for i in range(N_SPLITS):
        perm = rng.permutation(len(y))
        cal, test = perm[:n_cal], perm[n_cal:]
        c = np.sort(q[cal] - y[cal])[math.ceil(n_cal * (1 - ALPHA)) - 1]
        naive[i] = np.mean(y[test] >= np.clip(q[test] - c, 0, 1))
    assert naive.mean() < 1 - ALPHA - 3 * naive.std(ddof=1) / np.sqrt(N_SPLITS)


def grouped_pool(seed: int, n_questions: int) -> CalibrationSet:
    """Questions with 4..16 dependent prefixes each and an over-confident PRM score."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(4, 17, n_questions)
    qid = np.repeat([f"q{i:04d}" for i in range(n_questions)], sizes)
    difficulty = np.repeat(rng.normal(-0.5, 1.2, n_questions), sizes)
    logit = difficulty + rng.normal(0, 0.7, len(qid))
    y = rng.binomial(8, 1 / (1 + np.exp(-logit))) / 8
    score = 1 / (1 + np.exp(-(2.0 * logit + 1.5 + rng.normal(0, 0.5, len(qid)))))
    return make_set(rng.normal(size=(len(qid), 2)), y, 8, qid, score)


def test_question_unit_coverage_200_splits_with_platt():
    data = grouped_pool(4, 400)
    pool_rows, train_rows = split_by_question(data.records["question_id"].to_numpy(), 0.25, seed=0)
    platt, _ = PlattCalibrator.fit_model(
        data.subset(train_rows), data.subset(train_rows), PlattConfig(), 0, False
    )
    pool = data.subset(pool_rows)
    q = beta_quantile(platt, pool, 0.1)
    y = pool.records["success_prob"].to_numpy(np.float64)
    codes, questions = pd.factorize(pool.records["question_id"])
    assert np.mean(y >= q) < 1 - ALPHA - 0.1  # the point estimate alone is no lower bound
    rng = np.random.default_rng(5)
    cov = np.empty(N_SPLITS)
    for i in range(N_SPLITS):
        cal_q = rng.permutation(len(questions))[: len(questions) // 2]
        cal = pool.subset(np.flatnonzero(np.isin(codes, cal_q)))
        rows = calibration_rows(cal, "question", rng)
        assert len(rows) == len(cal_q)
        offset = np.flatnonzero(np.isin(codes, cal_q))[rows]
        c = conformal_correction(q[offset] - y[offset], ALPHA)
        test = ~np.isin(codes, cal_q)
        covered = (y[test] >= np.clip(q[test] - c, 0, 1)).astype(float)
        # The guarantee is for a uniform record of a new question: mean of per-question shares.
        cov[i] = pd.Series(covered).groupby(codes[test]).mean().mean()
    se = cov.std(ddof=1) / np.sqrt(N_SPLITS)
    assert cov.mean() >= 1 - ALPHA - 3 * se


def test_wrapper_forward_and_save_load(tmp_path):
    data = grouped_pool(6, 60)
    platt, _ = PlattCalibrator.fit_model(data, data, PlattConfig(), 0, False)
    config = ConformalConfig(inner_method="platt", alpha=0.2)
    model = ConformalCalibrator.from_parts(platt, 0.125, config)
    assert REGISTRY["conformal"] is ConformalCalibrator and model.kind == "point"
    assert model.uses_hidden is False
    score = data.records["prm_score"].to_numpy(np.float32)
    expected = np.clip(platt.point_estimate(None, score).astype(np.float64) - 0.125 - 1e-6, 0, 1)
    np.testing.assert_allclose(model.point_estimate(None, score), expected, atol=1e-6)
    model.save(tmp_path / "c")
    loaded = load(tmp_path / "c")
    assert isinstance(loaded, ConformalCalibrator) and isinstance(loaded.inner, PlattCalibrator)
    assert float(loaded.correction) == 0.125 and loaded.config["alpha"] == 0.2
    np.testing.assert_array_equal(
        loaded.point_estimate(None, score), model.point_estimate(None, score)
    )


def test_train_fit_conformal_platt_and_nested_binomial(tmp_path):
    from dprm.models.fit import fit

    data = grouped_pool(7, 300)
    model = fit(
        "conformal",
        data,
        overrides={"inner_method": "platt", "alpha": "0.2"},
        seed=0,
        progress=False,
    )
    summary = model.info["conformal"]
    # 80 % of 300 questions train; 30 % of those calibrate, one record each.
    assert summary["n_scores"] == summary["n_calibration_questions"] == 72
    assert summary["calibration_coverage"] >= 0.8 > summary["inner_coverage"]
    fresh = grouped_pool(8, 300)  # new i.i.d. questions: coverage near 1 - alpha or above
    y = fresh.records["success_prob"].to_numpy()
    bound = model.point_estimate(None, fresh.records["prm_score"].to_numpy(np.float32))
    per_question = pd.Series(y >= bound).groupby(fresh.records["question_id"]).mean().mean()
    assert per_question >= 0.8 - 0.08  # one calibration draw: allow its sampling spread
    # A neural inner calibrator nests its state dict (inner.*) and config; reload is exact.
    nested = fit(
        "conformal",
        data,
        overrides={
            "inner_method": "binomial",
            "inner_set": "max_steps=4;eval_every=2",
            "beta": "0.2",
        },
        seed=0,
        progress=False,
    )
    assert nested.uses_hidden and nested.config["inner_config"]["max_steps"] == 4
    nested.save(tmp_path / "n")
    loaded = load(tmp_path / "n")
    score = data.records["prm_score"].to_numpy(np.float32)
    np.testing.assert_array_equal(
        loaded.point_estimate(data.hidden, score), nested.point_estimate(data.hidden, score)
    )
    assert float(loaded.correction) == float(nested.correction)


def test_cli_train_evaluate_ias_new_methods(tmp_path, tiny_world):
    """``dprm train --method`` for the new methods, then ``dprm evaluate`` and ``dprm ias``."""
    import json

    from dprm.cli import main

    paths = tiny_world("r1-qwen-7b__qwen-prm")
    fast = ["--set", "max_steps=6", "--set", "eval_every=3"]
    commands = {
        "isotonic": [],
        "platt": [],
        "binomial": fast,
        "conformal": ["--set", "inner_method=platt", "--set", "alpha=0.2"],
    }
    models = []
    for method, extra in commands.items():
        out = tmp_path / method
        argv = ["train", "--method", method, "--data", str(paths["id/calib"]), "--out", str(out)]
        assert main([*argv, "--quiet", *extra]) == 0
        models += ["--model", str(out)]
    metrics_path = tmp_path / "metrics.json"
    argv = ["evaluate", "--data", str(paths["ood/calib"]), *models, "--out", str(metrics_path)]
    assert main([*argv, "--quiet"]) == 0
    metrics = json.loads(metrics_path.read_text())
    assert set(commands) <= set(metrics)
    # strict JSON: a metric a point calibrator does not have is null, never NaN
    assert metrics["platt"]["wql"] is None and math.isfinite(metrics["binomial"]["wql"])
    assert all(math.isfinite(metrics[m]["quantile_error_true"]) for m in commands)
    argv = ["ias", "--bon", str(paths["ood/bon"]), *models, "--out", str(tmp_path / "ias")]
    assert main([*argv, "--mc-trials", "0", "--quiet"]) == 0
    assert any((tmp_path / "ias").iterdir())
