"""The data-stage builder of a recipe: stage order, a labels job per data source, embed inputs."""

from __future__ import annotations

import dataclasses

import pytest

from dprm.recipe.run import run_config
from dprm.recipe.spec import SOURCES, recipe_from_dict
from dprm.recipe.stages import RecipeStages
from dprm.runner.pipeline import Pipeline

TABLES = {
    "generators": [{"name": "g", "model": "m", "park_name": "policy"}],
    "prms": [{"name": "p", "model": "x"}],
}


def _units(recipe, stage: str, tmp_path):
    pipe = Pipeline(tmp_path, run_config(recipe), False, lambda line: None)
    builders = dict(RecipeStages(recipe, shards=2).world_stages())
    return builders[stage](pipe, recipe.worlds[0])


def test_stage_order_and_a_labels_job_for_every_data_source():
    recipe = recipe_from_dict(TABLES, "r.toml")
    names = [name for name, _ in RecipeStages(recipe, 1).world_stages()]
    assert names == [
        "questions",
        "generate",
        "generate-merge",
        "labels",
        "labels-merge",
        "embed",
        "embed-merge",
    ]
    assert set(RecipeStages.LABEL_JOBS) == set(SOURCES)


@pytest.mark.parametrize(
    ("source", "key", "gpus"), [("generate", "rollout/g/id", 1.0), ("park", "labels/g/id", None)]
)
def test_labels_come_from_the_recipe_s_data_source(source, key, gpus, tmp_path):
    recipe = recipe_from_dict(TABLES | {"data": {"source": source}, "bon": {"n": 0}}, "r.toml")
    units = {u.key: u for u in _units(recipe, "labels", tmp_path)}
    assert sorted(units) == sorted(key.replace("/id", f"/{s}") for s in ("train", "id", "ood"))
    assert units[key].resources.get("gpus") == gpus  # rollouts need the generator, Park's not
    assert units[key].outputs == [tmp_path / "data" / "g" / "id" / "labels.parquet"]
    if source == "park":
        assert units[key].run.args[1:3] == (["math500"], "policy")


def test_embed_reads_labels_for_calibration_and_pools_for_bon(tmp_path):
    recipe = recipe_from_dict(TABLES | {"bon": {"n": 4}}, "r.toml")
    units = {u.key: u for u in _units(recipe, "embed", tmp_path)}
    world = "g__p"
    calib, bon = units[f"embed/{world}/id/calib"].run, units[f"embed/{world}/id/bon"].run
    assert calib.args[1:3] == (str(tmp_path / "data/g/id/labels.parquet"), "calibration")
    assert bon.args[1:3] == (str(tmp_path / "data/g/id/pool.parquet"), "bon")
    assert f"embed/{world}/train/bon" not in units  # no training pool without [bon] train
    assert dataclasses.asdict(recipe.prm("p")) == calib.args[0]
