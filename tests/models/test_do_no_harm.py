"""The validation comparison with the raw PRM, the fallback and the small-data rule
(:mod:`dprm.models.do_no_harm`, ``fit(..., do_no_harm=True)``)."""

from __future__ import annotations

import numpy as np
import pytest

from dprm.data import read_calibration_set
from dprm.models import REGISTRY
from dprm.models.do_no_harm import (
    SMALL_DATA_QUESTIONS,
    clustered_difference,
    small_data_defaults,
    worse_than_raw,
)
from dprm.models.fit import fit

pytestmark = pytest.mark.usefixtures("one_thread")
#: a mono map that never leaves the identity T(tau) = tau: the point estimate 0.5 everywhere
BAD = {"max_steps": 1, "eval_every": 1, "init_marginal": False}


@pytest.fixture(scope="module")
def world(tiny_world):
    return read_calibration_set(tiny_world("r1-qwen-7b__qwen-prm")["train/calib"])


def test_clustered_difference_counts_questions_not_records() -> None:
    # two questions, each with a constant difference: the records of one question are one draw
    a, b = np.array([1.0, 1.0, 1.0, 3.0]), np.zeros(4)
    mean, se = clustered_difference(a, b, np.array(["q", "q", "q", "r"]))
    assert mean == pytest.approx(1.5)
    # sums per question 3 and 3, n_q m = 4.5 and 1.5: (1.5^2 + 1.5^2) / 16 x 2 = 0.5625
    assert se == pytest.approx(0.75)
    assert worse_than_raw(1.5, 0.75) and not worse_than_raw(0.5, 0.75)
    assert not worse_than_raw(float("nan"), 0.1)


def test_small_data_defaults_apply_up_to_the_threshold() -> None:
    mono, qr = REGISTRY["mono"].config_class, REGISTRY["qr"].config_class
    small = small_data_defaults(mono, SMALL_DATA_QUESTIONS)
    assert small == {
        "weight_decay": 1e-3, "context_hidden": (16,), "context_dim": 8, "warmup_steps": 400,
    }  # fmt: skip
    assert small_data_defaults(mono, SMALL_DATA_QUESTIONS + 1) == {}
    assert set(small_data_defaults(qr, 10)) == {"weight_decay", "warmup_steps"}  # its keys only
    assert small_data_defaults(None, 10) == {}


def test_small_data_defaults_sit_under_set(world) -> None:
    fast = {"max_steps": 20, "eval_every": 10}
    model = fit("mono", world, overrides=fast | {"context_dim": 4}, seed=0, progress=False)
    assert model.info["n_train_questions"] <= SMALL_DATA_QUESTIONS
    assert model.info["config"]["context_dim"] == 4  # --set wins
    assert (
        model.info["config"]["context_hidden"] == [16]
        and model.info["config"]["weight_decay"] == 1e-3
    )
    assert model.info["small_data"]["threshold"] == SMALL_DATA_QUESTIONS


def test_a_bad_calibrator_falls_back_to_the_raw_score_and_says_so(world, tmp_path) -> None:
    kept = fit("mono", world, overrides=BAD, seed=0, progress=False)
    versus = kept.info["versus_raw"]
    assert versus["worse_than_raw"] and versus["brier"]["fitted"] > versus["brier"]["raw"]
    assert versus["delta_vs_raw"] > versus["se_vs_raw"] > 0
    guarded = fit("mono", world, overrides=BAD, seed=0, progress=False, do_no_harm=True)
    assert guarded.method == "base"
    record = guarded.info["do_no_harm"]
    assert record["fell_back"] and record["fitted_method"] == "mono"
    assert guarded.info["versus_raw"] == versus
    score = world.records["prm_score"].to_numpy(np.float32)
    np.testing.assert_allclose(guarded.point_estimate(None, score), score.clip(0, 1))
    guarded.save(tmp_path / "m")
    from dprm.models import load

    assert load(tmp_path / "m").info["do_no_harm"]["fell_back"]


def test_a_good_calibrator_is_kept_under_the_rule(world) -> None:
    model = fit("platt", world, seed=0, progress=False, do_no_harm=True)
    assert model.method == "platt" and not model.info["do_no_harm"]["fell_back"]
    assert not model.info["versus_raw"]["worse_than_raw"]
