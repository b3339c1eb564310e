"""``dprm evaluate`` (contract) and the evaluation conventions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dprm.cli import main
from dprm.data import read_calibration_set
from dprm.evaluation import METRIC_KEYS, _interp_rows, evaluate


@pytest.fixture(scope="module")
def world(tiny_world):
    return tiny_world("llama-3.2-1b__qwen-prm")


def test_evaluate_base_json_contract(world, tmp_path):
    out = tmp_path / "metrics.json"
    assert (
        main(
            [
                "synth",
                "--preset",
                "r1-qwen-7b__qwen-prm",
                "--size",
                "tiny",
                "--out",
                str(tmp_path / "w"),
                "--quiet",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "evaluate",
                "--data",
                str(tmp_path / "w" / "id" / "calib"),
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert list(result) == ["base"]
    base = result["base"]
    assert set(METRIC_KEYS) <= set(base) and {"quantile_error_true", "crps_true"} <= set(base)
    assert base["wql"] is None and base["calibration_area"] is None  # strict JSON: NaN -> null
    assert base["brier"] == pytest.approx(base["pos_brier"] + base["neg_brier"])
    records = read_calibration_set(tmp_path / "w" / "id" / "calib").records
    assert base["n"] == len(records)
    assert base["brier"] == pytest.approx(
        np.mean((records.prm_score - records.success_prob) ** 2), rel=1e-6
    )


def test_weak_generator_base_brier_above_strong_and_ood_above_id(world, tiny_world):
    strong = tiny_world("r1-qwen-7b__qwen-prm")
    brier = {
        (name, split): evaluate(read_calibration_set(w[f"{split}/calib"]))["base"]["brier"]
        for name, w in (("weak", world), ("strong", strong))
        for split in ("id", "ood")
    }
    assert brier["weak", "id"] > brier["strong", "id"] + 0.1
    assert (
        brier["weak", "ood"] > brier["weak", "id"]
        and brier["strong", "ood"] > brier["strong", "id"]
    )


def test_interpolation_between_fixed_levels():
    levels = np.linspace(0, 1, 11)
    q = np.tile(levels**2, (2, 1))
    got = _interp_rows(q, levels, np.array([0.05, 0.5, 1.0]))
    assert np.allclose(got[0], [0.005, 0.25, 1.0])


def test_evaluate_missing_data_is_a_clear_error(tmp_path, capsys):
    assert (
        main(["evaluate", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "m.json")]) == 2
    )
    assert "nope" in capsys.readouterr().err
