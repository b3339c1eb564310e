"""A PRM larger than one device: ``device_map`` / ``max_memory`` shard it with accelerate.

On CPU the only way to force a split is accelerate's offload: a ``max_memory`` smaller than the
model keeps the first modules on the CPU and offloads the rest to disk (the same dispatch that
puts a 72B PRM's layers on four GPUs in order). Scores and hidden states must equal the
unsplit model's; the hidden state comes off the last shard.
"""

from __future__ import annotations

import numpy as np
import pytest

from dprm.io import DataError
from dprm.llm.prm import load_prm
from dprm.llm.prm_interface import parse_max_memory

QUESTION = "What is 3 + 4?"
STEP_LISTS = [["## Step 1: Add.\n3 + 4 = 7.", "The answer is $\\boxed{7}$.", ""], ["x"], [""]]


def test_a_split_prm_scores_like_the_whole_one(qwen_prm_dir, qwen_prm, tmp_path):
    pytest.importorskip("accelerate")
    split = load_prm(
        str(qwen_prm_dir), dtype="float32", device_map="auto", max_memory={"cpu": "150KB"},
        offload_folder=str(tmp_path / "offload"),
    )  # fmt: skip
    placed = set(split.model.hf_device_map.values())
    assert {"cpu", "disk"} <= placed, split.model.hf_device_map  # really split
    assert split.model.hf_device_map.get("score") == "disk"  # the head sits on the last shard
    assert split.provenance()["prm_device_map"] == {
        str(k): v for k, v in split.model.hf_device_map.items()
    }
    whole = qwen_prm.score_steps(QUESTION, STEP_LISTS)
    parts = split.score_steps(QUESTION, STEP_LISTS)
    for a, b in zip(whole, parts, strict=True):
        np.testing.assert_allclose(b.scores, a.scores, atol=1e-6)
        np.testing.assert_allclose(b.hidden, a.hidden, atol=1e-6)


def test_the_72b_is_a_qwen_prm():
    from dprm.llm.prm import infer_kind

    assert infer_kind("Qwen/Qwen2.5-Math-PRM-72B") == "qwen-prm"


def test_max_memory_flag():
    assert parse_max_memory("0=70GiB,1=70GiB,cpu=100GiB") == {
        0: "70GiB",
        1: "70GiB",
        "cpu": "100GiB",
    }
    assert parse_max_memory(None) is None
    with pytest.raises(DataError, match="DEV=SIZE"):
        parse_max_memory("70GiB")


def test_a_recipe_declares_a_sharded_prm():
    import dataclasses

    from dprm.config import from_dict
    from dprm.recipe.spec import PrmSpec

    spec = from_dict(
        PrmSpec,
        {"name": "q72", "model": "Qwen/Qwen2.5-Math-PRM-72B", "gpus": 4, "device_map": "auto",
         "max_memory": "0=70GiB,1=70GiB,2=70GiB,3=70GiB"},
    )  # fmt: skip
    assert spec.gpus == 4 and spec.device_map == "auto"
    assert parse_max_memory(dataclasses.asdict(spec)["max_memory"]) == {
        i: "70GiB" for i in range(4)
    }
