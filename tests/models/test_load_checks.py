"""Loaded models are checked, outputs are finite, settings are in range.

Every case here failed at 62a0d12: corrupted weights loaded silently (NaN quantiles), truncated
or empty files and shape mismatches ended in raw tracebacks, and out-of-range settings were
accepted.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dprm.config import ConfigError, load_config
from dprm.data import read_calibration_set
from dprm.io import DataError
from dprm.models import REGISTRY, load
from dprm.models.fit import fit, resolve_config

pytestmark = pytest.mark.usefixtures("one_thread")

QUICK = {"max_steps": "4", "eval_every": "2", "warmup_steps": "0", "batch_size": "32"}


@pytest.fixture(scope="module")
def saved(tiny_world, tmp_path_factory):
    """A fitted ``mono`` saved once; each test corrupts a copy."""
    data = read_calibration_set(tiny_world()["id/calib"])
    model = fit("mono", data, overrides=QUICK, progress=False)
    return model.save(tmp_path_factory.mktemp("m") / "mono"), data


@pytest.fixture
def copy(saved, tmp_path):
    import shutil

    directory, data = saved
    target = tmp_path / "mono"
    shutil.copytree(directory, target)
    return target, data


def one_line(err: pytest.ExceptionInfo, path) -> str:
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def test_intact_copy_loads(copy):
    directory, data = copy
    assert load(directory).kind == "distribution"


def test_same_length_garbage_is_caught_by_the_content_hash(copy):
    directory, _ = copy
    weights = directory / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    header_len = int.from_bytes(raw[:8], "little")
    start = 8 + header_len
    raw[start:] = np.random.default_rng(0).bytes(len(raw) - start)  # same length, header intact
    weights.write_bytes(bytes(raw))
    with pytest.raises(DataError) as err:
        load(directory)
    assert "content hash" in one_line(err, weights)


@pytest.mark.parametrize("keep", [0, 5, "half"])
def test_truncated_or_empty_weights(copy, keep):
    directory, _ = copy
    weights = directory / "model.safetensors"
    raw = weights.read_bytes()
    weights.write_bytes(raw[: len(raw) // 2 if keep == "half" else keep])
    with pytest.raises(DataError) as err:
        load(directory)
    one_line(err, weights)


def test_bit_flip_in_the_header_is_caught(copy):
    directory, _ = copy
    weights = directory / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[9] ^= 0xFF  # inside the JSON header
    weights.write_bytes(bytes(raw))
    with pytest.raises(DataError) as err:
        load(directory)
    one_line(err, weights)


def test_config_shapes_that_no_longer_match_the_weights(copy):
    directory, _ = copy
    cfg_path = directory / "config.json"
    cfg = json.loads(cfg_path.read_text())
    # the weights were saved with another width (whatever the defaults chose for this data)
    cfg["config"]["context_dim"] = 2 * cfg["config"]["context_dim"]
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(DataError, match="the config describes") as err:
        load(directory)
    one_line(err, directory / "model.safetensors")


def test_non_finite_outputs_are_refused_naming_the_model(copy):
    directory, data = copy
    model = load(directory)
    with torch.no_grad():
        model.net.marginal_scale.bias.fill_(float("nan"))
    score = data.records["prm_score"].to_numpy(np.float32)
    with pytest.raises(DataError, match="'mono'.*non-finite quantile") as err:
        model.quantiles(data.hidden, [0.1, 0.5], score)
    assert str(directory) in str(err.value)
    with pytest.raises(DataError, match="non-finite point estimate"):
        model.point_estimate(data.hidden, score)


@pytest.mark.parametrize(
    ("method", "key", "value"),
    [
        ("mono", "batch_size", "0"),
        ("mono", "max_steps", "-5"),
        ("ot", "lr", "-1"),
        ("ot", "lr_f", "0"),
        ("mono", "context_hidden", "64,0"),
        ("mono", "context_dim", "0"),
        ("qr", "eval_every", "0"),
        ("binomial", "n_levels", "0"),
        ("qr", "levels", "0.1,1.5"),
        ("conformal", "alpha", "1"),
        ("platt", "max_iter", "0"),
        ("mono", "lr", "nan"),
    ],
)
def test_numeric_settings_are_range_checked_naming_the_key(method, key, value):
    with pytest.raises(ConfigError, match=f"{key} = .* out of range"):
        resolve_config(method, None, {key: value})


def test_ranges_are_declared_once_and_inherited():
    """Every gradient method inherits the shared ranges from one declaration (field metadata)."""
    from dataclasses import fields

    for method in ("qr", "mono", "ot", "binomial"):
        config_class = REGISTRY[method].config_class
        ranges = {f.name: f.metadata.get("range") for f in fields(config_class)}
        assert ranges["batch_size"] == {"ge": 1} and ranges["lr"] == {"gt": 0}
    with pytest.raises(ConfigError, match="batch_size"):
        load_config(REGISTRY["qr"].config_class, None, {"batch_size": 0})


def test_conformal_on_two_questions_says_what_it_needs(tiny_world):
    data = read_calibration_set(tiny_world()["id/calib"])
    ids = data.records["question_id"].to_numpy()
    two = data.subset(np.flatnonzero(np.isin(ids, np.unique(ids)[:2])))
    with pytest.raises(DataError) as err:
        fit("conformal", two, overrides={"inner_method": "platt"}, progress=False)
    message = str(err.value)
    assert "at least 3 questions" in message and "found 1" not in message
