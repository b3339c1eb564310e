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
