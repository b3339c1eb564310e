"""Park et al.'s released labels as a recipe's data source, offline, on a fake copy of the layout.

``young-j-park/prm_calibration`` ships ``{dataset}/{generator}/data.json`` (records ``question``,
``reasoning_prefix``, ``success_prob``); a local directory in the same layout stands in for it.
Only the PRM embedding pass runs: no generator is loaded, no rollout is made.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dprm.cli import main
from dprm.io import read_json

from .conftest import tiny_recipe, write_recipe

DATASETS = {"train": ["mathtrain"], "id": ["math500"], "ood": ["aime24", "aime25"]}


def fake_park(root, policy: str) -> None:
    """Two responses of 3 steps per question, every prefix with success_prob k/8."""
    for split, datasets in DATASETS.items():
        for d, dataset in enumerate(datasets):
            records = []
            for q in range(6 if split == "train" else 2):
                question = f"{dataset} question {q}: what is {q} + {d + 3}?"
                for r in range(2):
                    steps = [f"Step {k} of answer {r} to {q}." for k in range(1, 4)]
                    for k in range(len(steps) + 1):
                        prob = ((q + r + k) % 9) / 8
                        records.append({"question": question, "reasoning_prefix": "\n\n".join(steps[:k]),
                                        "success_prob": prob})  # fmt: skip
            path = root / dataset / policy / "data.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(records))


def park_recipe(root, tiny_dirs, question_files) -> dict:
    """The tiny recipe on a fake copy of Park's released labels (no generator model, no IAS)."""
    park = root / "prm_calibration"
    fake_park(park, "Tiny-LM-Instruct")
    recipe = tiny_recipe(tiny_dirs, question_files)
    recipe["data"] = {"source": "park", "park": str(park), "park_train": DATASETS["train"],
                      "park_id": DATASETS["id"], "park_ood": DATASETS["ood"]}  # fmt: skip
    recipe["bon"] = {"n": 0}
    recipe["generators"] = [{"name": "tiny-lm", "park_name": "Tiny-LM-Instruct"}]  # no model
    return recipe


@pytest.mark.slow
def test_park_labels_run_only_the_embedding_pass(tmp_path, tiny_dirs, question_files):
    path = write_recipe(tmp_path / "table1.toml", park_recipe(tmp_path, tiny_dirs, question_files))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0

    from dprm.data.contract import read_calibration_set
    from dprm.data.park import question_id

    for split, n_questions in (("train", 6), ("id", 2), ("ood", 4)):
        cal = read_calibration_set(out / "worlds" / "tiny-lm__tiny-prm" / split / "calib")
        assert cal.records["question_id"].nunique() == n_questions
        assert len(cal) == n_questions * 2 * 4  # 2 responses x prefixes k = 0..3
        assert not cal.records.duplicated(["question_id", "response_id", "step"]).any()
        assert set(cal.records["success_prob"] * 8) <= set(range(9))
    cal = read_calibration_set(out / "worlds" / "tiny-lm__tiny-prm" / "ood" / "calib")
    assert question_id("aime25 question 1: what is 1 + 4?") in set(cal.records["question_id"])
    results = read_json(out / "results.json")
    assert results["failures"] == []
    metrics = pd.DataFrame(results["metrics"])
    assert set(metrics["dataset"]) == {"train", "id", "ood"}
    assert set(metrics["method"]) == {"base", "qr", "isotonic"}
    # no generation, no rollouts, no BoN pools, no IAS
    assert not (out / "data" / "tiny-lm" / "train" / "trajectories.parquet").exists()
    assert not (out / "ias").exists() and results["ias"] == []
    done = read_json(out / "state.json")["done"]
    assert not [k for k in done if k.startswith(("generate/", "rollout/", "questions/"))]
    assert (out / "report.md").exists()


@pytest.mark.slow
def test_local_executor_spreads_gpu_shards_over_pinned_workers(tmp_path, tiny_dirs, question_files):
    """The local executor's per-GPU workers (two pretend GPUs, CPU models): each worker process
    is pinned to one device id, and the sets equal those of the single-process run."""
    import numpy as np

    from dprm.data.contract import read_calibration_set
    from dprm.recipe import load_recipe, run_recipe
    from dprm.runner.executors.local import LocalRecipeExecutor

    recipe = load_recipe(
        write_recipe(tmp_path / "r.toml", park_recipe(tmp_path, tiny_dirs, question_files))
    )
    one, two = tmp_path / "one", tmp_path / "two"
    assert run_recipe(recipe, one, progress=False, log=lambda s: None).ok
    executor = LocalRecipeExecutor(recipe, two)
    executor.gpus = ["0", "1"]  # CUDA_VISIBLE_DEVICES of each worker; the tiny models use the CPU
    outcome = run_recipe(recipe, two, executor=executor, progress=False, log=lambda s: None)
    assert outcome.ok, outcome.failures
    done = read_json(two / "state.json")["done"]
    shards = [k for k in done if k.startswith("embed/") and "/shard" in k]
    assert len(shards) == 6  # 3 splits x 2 shards, spread over the two workers
    pinned = {done[k]["cuda_visible_devices"] for k in shards}
    assert pinned and pinned <= {"0", "1"}
    assert len({done[k]["pid"] for k in shards}) == len(pinned)  # one pinned process per device
    for split in ("train", "id", "ood"):
        a = read_calibration_set(one / "worlds" / "tiny-lm__tiny-prm" / split / "calib")
        b = read_calibration_set(two / "worlds" / "tiny-lm__tiny-prm" / split / "calib")
        pd.testing.assert_frame_equal(a.records, b.records)
        np.testing.assert_array_equal(np.asarray(a.hidden), np.asarray(b.hidden))
