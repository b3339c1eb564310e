"""The calibrator protocol, checked for every registered method (one parametrised test).

Each method is fitted briefly through the one fit dispatch (``fit_split``), saved and loaded:
the loaded model gives identical quantiles and point estimates, declares a kind and a config
class, and its outputs have the shapes the protocol documents; ``distribution`` calibrators are
monotone in tau (they promise it), ``levels`` ones answer only at their trained levels.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dprm.data import read_calibration_set
from dprm.metrics import LEVELS_11
from dprm.models import REGISTRY, load
from dprm.models.fit import fit_split
from dprm.models.interface import Calibrator, predict
from dprm.models.park_qr import score_input
from dprm.models.registry import KINDS

pytestmark = pytest.mark.usefixtures("one_thread")

QUICK = {"max_steps": "4", "eval_every": "2", "warmup_steps": "0", "batch_size": "32"}
#: the few overrides that make each method fit in well under a second
OVERRIDES = {
    "conformal": {"inner_method": "mono", "inner_set": "max_steps=4;eval_every=2"},
    "base": {},
    "isotonic": {},
    "platt": {},
    "park-qr": {},
}


def _with_record_columns(cls, data):
    """Columns a calibrator reads from the set (park-qr: an adapter's three quantiles)."""
    columns = getattr(cls, "record_columns", ())
    if not columns:
        return data
    rng = np.random.default_rng(0)
    records = data.records.copy()
    values = np.sort(rng.uniform(size=(len(records), len(columns))), axis=1)
    for k, column in enumerate(columns):
        records[column] = values[:, k].astype(np.float32)
    return dataclasses.replace(data, records=records)


@pytest.fixture(scope="module")
def halves(tiny_world):
    data = read_calibration_set(tiny_world()["id/calib"])
    rows = np.arange(len(data))
    return data.subset(rows[rows % 5 != 0]), data.subset(rows[rows % 5 == 0])


def test_registry_lists_every_method():
    assert set(REGISTRY) == {
        "base",
        "binomial",
        "conformal",
        "isotonic",
        "mono",
        "ot",
        "park-qr",
        "platt",
        "qr",
    }


@pytest.mark.parametrize("method", sorted(REGISTRY))
def test_protocol_save_load_and_shapes(method, halves, tmp_path):
    cls = REGISTRY[method]
    assert issubclass(cls, Calibrator) and cls.method == method and cls.kind in KINDS
    assert cls.config_class is None or dataclasses.is_dataclass(cls.config_class)
    train, val = (_with_record_columns(cls, part) for part in halves)
    overrides = OVERRIDES.get(method, QUICK)
    model, history, _ = fit_split(method, train, val, overrides=overrides, seed=0, progress=False)
    assert isinstance(history, list)
    loaded = load(model.save(tmp_path / method))
    assert type(loaded) is cls and loaded.kind == cls.kind and loaded.hidden_dim == val.hidden_dim

    score = score_input(loaded, val.records)
    n = len(val)
    levels = loaded.fixed_levels if loaded.kind == "levels" else np.linspace(0, 1, 21)
    q, q_loaded = (m.quantiles(val.hidden, levels, score) for m in (model, loaded))  # [N, L] each
    assert q.shape == (n, len(levels)) and q.dtype == np.float32
    np.testing.assert_array_equal(q, q_loaded)
    assert ((q >= 0) & (q <= 1)).all()
    p, p_loaded = (m.point_estimate(val.hidden, score) for m in (model, loaded))
    assert p.shape == (n,)
    np.testing.assert_array_equal(p, p_loaded)

    pred = predict(loaded, val.hidden, score, np.linspace(0, 1, 21))
    assert pred.kind == loaded.kind and pred.p.shape == (n,)
    if loaded.kind == "point":
        assert pred.q is None and loaded.beta_level(0.1) is None
        np.testing.assert_allclose(q, np.repeat(p[:, None], len(levels), axis=1))
    elif loaded.kind == "levels":
        assert pred.q.shape == (n, len(loaded.fixed_levels))
        assert loaded.beta_level(0.1) in set(loaded.fixed_levels.tolist())
        with pytest.raises(ValueError, match="trained levels"):
            loaded.quantiles(val.hidden, [0.123], score)
    else:
        assert pred.q.shape == (n, 21) and loaded.beta_level(0.1) == 0.1
        assert (np.diff(q, axis=1) >= -1e-7).all(), "distribution calibrators are monotone"
        np.testing.assert_allclose(
            pred.p, predict(loaded, val.hidden, score, LEVELS_11).p, atol=1e-6
        )
