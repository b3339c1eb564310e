"""``qr``: the paper's quantile-regression baseline (linear layer, 11 sigmoid outputs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from closed_form import gaussian_logit_quantile, gaussian_logit_world

from dprm.data import read_calibration_set
from dprm.evaluation import evaluate_calibrator
from dprm.metrics import LEVELS_11
from dprm.models import load
from dprm.models.fit import fit
from dprm.models.qr import QRCalibrator

# patience off: the 400-step budget is the point (with its 100-step warm-up the default wait,
# 2x the kept step, would stop at step 200, before this slow world's calibration area settles)
FAST = {"max_steps": "400", "warmup_steps": "100", "eval_every": "25", "patience": "0"}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def world(tiny_world):
    return tiny_world("qwen-2.5-7b__qwen-prm")


def test_fixed_levels_and_marginal_initialisation():
    model = QRCalibrator(4)
    assert np.allclose(model.fixed_levels, LEVELS_11)
    y = np.random.default_rng(0).beta(2, 5, 1000)
    model.init_marginal(y)
    q = model.quantiles(np.random.default_rng(1).normal(size=(7, 4)).astype(np.float32), LEVELS_11)
    expected = np.clip(np.quantile(y, LEVELS_11), 0.02, 0.98)
    np.testing.assert_allclose(q, np.broadcast_to(expected, q.shape), atol=1e-6)
    with pytest.raises(ValueError, match="trained levels"):
        model.quantiles(np.zeros((2, 4), np.float32), [0.25])
    with pytest.raises(ValueError, match="strictly increasing"):
        QRCalibrator(4, {"levels": [0.5, 0.1]})


def test_gaussian_logit_world_and_save_load(tmp_path):
    data = gaussian_logit_world(4000, seed=0)
    model = fit("qr", data, overrides=FAST, seed=0, progress=False)
    hidden = np.random.default_rng(9).normal(size=(500, 3)).astype(np.float32)
    inner = LEVELS_11[1:-1]  # 0 and 1 are the support's ends: no closed-form target there
    error = np.abs(model.quantiles(hidden, inner) - gaussian_logit_quantile(hidden, inner)).mean()
    marginal = np.quantile(data.records["success_prob"].to_numpy(), inner)
    baseline = np.abs(marginal[None, :] - gaussian_logit_quantile(hidden, inner)).mean()
    assert error < 0.05 and error < 0.25 * baseline
    model.save(tmp_path / "qr")
    loaded = load(tmp_path / "qr")
    np.testing.assert_array_equal(
        loaded.quantiles(hidden, LEVELS_11), model.quantiles(hidden, LEVELS_11)
    )
    np.testing.assert_array_equal(
        loaded.point_estimate(hidden), model.quantiles(hidden, [0.5])[:, 0]
    )


def test_crossing_rate_is_reported(world, capsys):
    data = read_calibration_set(world["id/calib"])
    model = fit("qr", data, overrides=FAST, seed=0, progress=False)
    metrics = evaluate_calibrator(model, data)
    assert 0.0 <= metrics["crossing_rate"] <= 1.0
    with capsys.disabled():
        print(
            f"\n[qr] crossing rate at the 11 levels on a tiny world: {metrics['crossing_rate']:.4f}"
        )
    # a head whose outputs decrease in tau crosses at every adjacent pair
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.copy_(torch.linspace(2, -2, 11))
    assert evaluate_calibrator(model, data)["crossing_rate"] == 1.0
