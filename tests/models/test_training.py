"""The shared training loop's weight averaging and learning-rate schedules."""

from __future__ import annotations

import math

import pytest
import torch
from closed_form import STEPS, gaussian_logit_world
from torch import nn

from dprm.config import ConfigError
from dprm.models.fit import fit, resolve_config
from dprm.models.training import WeightAverage

pytestmark = pytest.mark.usefixtures("one_thread")


def test_weight_average_is_the_debiased_ema_and_swaps_back():
    layer = nn.Linear(1, 1, bias=False)
    average = WeightAverage(layer, decay=0.5)
    with average.swapped():  # no update yet: the current weights
        start = layer.weight.item()
    assert start == layer.weight.item()
    for value in (1.0, 2.0, 3.0):
        layer.weight.data.fill_(value)
        average.update()
    # biased: 0.5 -> 1.25 -> 2.125; debiased by 1 - 0.5^3 = 0.875
    with average.swapped():
        assert layer.weight.item() == pytest.approx(2.125 / 0.875, abs=1e-6)
    assert layer.weight.item() == 3.0  # the live weights come back


def test_averaged_fit_returns_averaged_weights_and_same_trajectory():
    """Averaging changes what is evaluated and returned, not the optimiser's path: with no
    checkpoint selection (warm-up = last step) the raw fit ends on the last iterate and the
    averaged one on its average, which differs from it."""
    data = gaussian_logit_world(600, seed=3)
    fast = {"max_steps": "40", "warmup_steps": "40", "warmup_fraction": "1", "eval_every": "10",
            "batch_size": "64"}  # fmt: skip
    raw = fit("ot", data, overrides={**fast, "ema_decay": "0"}, seed=5, progress=False)
    avg = fit("ot", data, overrides={**fast, "ema_decay": "0.9"}, seed=5, progress=False)
    # identical training losses (same batches and same raw iterates) ...
    assert [e.get("loss_g") for e in raw.history] == [e.get("loss_g") for e in avg.history]
    # ... but different returned weights
    a, b = raw.state_dict(), avg.state_dict()
    assert any(not torch.equal(a[k], b[k]) for k in a if a[k].is_floating_point())


def test_lr_schedule_is_checked_and_cosine_ends_at_gamma():
    with pytest.raises(ConfigError, match="lr_schedule"):
        resolve_config("ot", overrides={"lr_schedule": "linear"})
    data = gaussian_logit_world(300, seed=1)
    overrides = {**STEPS, "max_steps": "20", "warmup_steps": "20", "lr_schedule": "cosine"}
    model = fit("mono", data, overrides={**overrides, "lr_gamma": "0.1"}, seed=0, progress=False)
    assert model.info["config"]["lr_schedule"] == "cosine"


def test_cosine_multiplier_goes_from_one_to_gamma():
    from dprm.models.training import TrainConfig, Trainer

    trainer = Trainer.__new__(Trainer)
    trainer.config = TrainConfig(lr_schedule="cosine", lr_gamma=0.1, max_steps=10)
    param = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    schedule = trainer.scheduler(opt, 10)
    rates = []
    for _ in range(10):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    assert rates[0] == pytest.approx(1.0)
    assert rates[5] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 2)))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)
