"""Fixtures shared by the CLI fault tests: one tiny world and an untrained saved model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dprm.models import REGISTRY


@pytest.fixture(scope="module")
def world(tiny_world):
    return tiny_world("r1-qwen-7b__qwen-prm")


@pytest.fixture(scope="module")
def model_dir(world, tmp_path_factory) -> Path:
    """An (untrained) OT calibrator saved as a calibrator directory, for commands that read one."""
    torch.manual_seed(0)
    dim = int(np.load(world["id/calib"] / "hidden_states.npy", mmap_mode="r").shape[1])
    return REGISTRY["ot"](dim, {}).save(tmp_path_factory.mktemp("m") / "ot")


@pytest.fixture(scope="module")
def exact_raw_set(world, tmp_path_factory) -> Path:
    """A copy of the tiny world's train/calib whose PRM score is the label itself: the raw
    score is perfect there, so any fitted calibrator is worse than it."""
    import shutil

    import pandas as pd

    out = tmp_path_factory.mktemp("exact") / "calib"
    shutil.copytree(world["train/calib"], out)
    records = pd.read_parquet(out / "records.parquet")
    records["prm_score"] = records["success_prob"].astype(records["prm_score"].dtype)
    records.to_parquet(out / "records.parquet", index=False)
    return out
