"""``park-qr``: reads an adapter-embedded set's Park quantiles; nothing is fitted."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from dprm.io import DataError
from dprm.models import REGISTRY, load
from dprm.models.interface import predict
from dprm.models.park_qr import PARK_COLUMNS, ParkQRCalibrator, score_input
from dprm.models.qr import QRCalibrator


def _records(n: int = 6) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    q = np.sort(rng.uniform(size=(n, 3)), axis=1).astype(np.float32)
    frame = pd.DataFrame({"prm_score": rng.uniform(size=n).astype(np.float32)})
    for k, column in enumerate(PARK_COLUMNS):
        frame[column] = q[:, k]
    return frame


def test_registered_as_a_levels_calibrator():
    assert REGISTRY["park-qr"] is ParkQRCalibrator
    assert ParkQRCalibrator.kind == "levels" and not ParkQRCalibrator.uses_hidden


def test_quantiles_are_the_columns_and_the_point_is_the_median(tmp_path):
    records = _records()
    model = load(ParkQRCalibrator(4).save(tmp_path / "pq"))
    score = score_input(model, records)
    assert score.shape == (len(records), 4)
    pred = predict(model, None, score)
    np.testing.assert_allclose(pred.q, records[list(PARK_COLUMNS)].to_numpy(), atol=1e-7)
    np.testing.assert_allclose(pred.p, records["park_q50"].to_numpy(), atol=1e-7)
    np.testing.assert_allclose(pred.levels, [0.1, 0.5, 0.9], atol=1e-7)
    assert model.beta_level(0.1) == pytest.approx(0.1)


def test_other_calibrators_get_the_plain_score():
    records = _records()
    score = score_input(QRCalibrator(4), records)
    assert score.shape == (len(records),) and score.dtype == np.float32


def test_missing_columns_fail_with_one_line():
    model = ParkQRCalibrator(4)
    with pytest.raises(DataError, match="--adapter"):
        score_input(model, _records().drop(columns="park_q90"))
    with pytest.raises(DataError, match="park_q10"):
        model(None, torch.zeros(3))
