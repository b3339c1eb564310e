"""``dprm.models.interface``: the standardiser saved with every calibrator, and its folded layer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from dprm.models import REGISTRY
from dprm.models.interface import Standardizer
from dprm.models.training import TrainedCalibrator


def test_standardizer_matches_numpy_and_keeps_constant_dimensions_finite():
    rng = np.random.default_rng(0)
    hidden = rng.normal(3.0, 2.0, size=(1000, 5)).astype(np.float16)
    hidden[:, 2] = 7.0  # a constant dimension
    std = Standardizer(5).fit(hidden, chunk_rows=64)
    expected = hidden.astype(np.float64)
    expected = (expected - expected.mean(0)) / np.where(
        expected.std(0) > 1e-6, expected.std(0), 1.0
    )
    out = std(torch.from_numpy(hidden)).numpy()
    np.testing.assert_allclose(out, expected, atol=1e-4)
    assert np.all(out[:, 2] == 0.0)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_folded_linear_equals_layer_after_standardising(dtype):
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    hidden = (rng.normal(size=(300, 40)) * rng.uniform(0.1, 30, 40) + 5).astype(dtype)
    std = Standardizer(40).fit(hidden)
    layer = nn.Linear(40, 7)
    rows = torch.from_numpy(hidden)
    with torch.no_grad():
        expected = layer(std(rows))
        folded = std.linear(rows, layer)
    assert folded.dtype == torch.float32
    torch.testing.assert_close(folded, expected, rtol=1e-5, atol=1e-4)


def test_linear_many_equals_each_layer_alone():
    """An ensemble's first layers in one matmul: the same as each folded layer (bias or none)."""
    torch.manual_seed(0)
    hidden = np.random.default_rng(3).normal(1.0, 4.0, size=(50, 16)).astype(np.float16)
    std = Standardizer(16).fit(hidden)
    layers = [nn.Linear(16, 5), nn.Linear(16, 3, bias=False), nn.Linear(16, 8)]
    rows = torch.from_numpy(hidden)
    with torch.no_grad():
        together = std.linear_many(rows, layers)
        alone = [layer(std(rows)) for layer in layers]
    assert [t.shape[1] for t in together] == [5, 3, 8]
    for a, b in zip(together, alone, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "method", sorted(m for m, cls in REGISTRY.items() if issubclass(cls, TrainedCalibrator))
)
def test_forward_on_raw_rows_equals_forward_on_standardised_rows(method):
    """``model(h)`` (standardisation folded into the first layer) is ``forward_standardized``."""
    torch.manual_seed(0)
    hidden = np.random.default_rng(2).normal(2.0, 3.0, size=(64, 12)).astype(np.float16)
    model = REGISTRY[method](12)
    model.standardizer.fit(hidden)
    levels = torch.linspace(0.0, 1.0, 11 if method == "qr" else 9)  # qr: its trained levels
    rows = torch.from_numpy(hidden)
    with torch.no_grad():
        raw = model(rows).quantile(levels)
        standardised = model.forward_standardized(model.standardizer(rows)).quantile(levels)
    torch.testing.assert_close(raw, standardised, rtol=1e-5, atol=1e-5)


def test_save_refuses_an_existing_directory_unless_overwrite(tmp_path):

    model = REGISTRY["qr"](4, {})
    target = model.save(tmp_path / "qr")
    before = (target / "config.json").read_text()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        REGISTRY["mono"](4, {}).save(target)
    assert (target / "config.json").read_text() == before  # untouched
    REGISTRY["mono"](4, {}).save(target, overwrite=True)
    assert '"method": "mono"' in (target / "config.json").read_text()
    (tmp_path / "empty").mkdir()
    model.save(tmp_path / "empty")  # an empty folder is no earlier output
