"""examples/arith.toml end to end on the shipped models, at minimal size (real models, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("math_verify")

from .compare import made_units, planned_units

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arith.toml"


@pytest.mark.slow
def test_arith_recipe_runs_end_to_end_on_the_shipped_models(tmp_path):
    from dprm.recipe.run import run_recipe
    from dprm.recipe.spec import read_recipe_file, recipe_from_dict, resolve_paths

    data = resolve_paths(read_recipe_file(EXAMPLE), EXAMPLE.parent)
    data["questions"] = dict(data["questions"], limit=2)
    data["sampling"] = dict(data["sampling"], n=2)
    data["rollout"] = dict(data["rollout"], n=2, max_steps=2)
    data["bon"] = {"n": 4, "train": True}
    data["calibrators"] = {"methods": ["isotonic", "ot"], "seeds": 1}
    data["ias"] = dict(data["ias"], mc_trials=5)
    recipe = recipe_from_dict(data, str(EXAMPLE))
    outcome = run_recipe(recipe, tmp_path / "run", progress=False, log=lambda s: None)
    assert outcome.ok, outcome
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    datasets = {row["dataset"] for row in results["metrics"]}
    assert {"id", "ood"} <= datasets, datasets
    allocations = {row["allocation"] for row in results["pays"]}
    assert {"uniform", "oracle", "auto", "auto-seq"} <= allocations, allocations
    assert (tmp_path / "run" / "report.md").is_file()
    # the units `dprm run --dry-run` lists are the units the run made (a training pool and a
    # raw-score IAS unit per pool were left out of the plan)
    assert planned_units(recipe, recipe.run.shards) == made_units(tmp_path / "run")


def test_bon_train_adds_a_training_pool_for_auto():
    from dprm.recipe.spec import load_recipe, read_recipe_file, recipe_from_dict, resolve_paths
    from dprm.recipe.stages import pool_splits, world_data

    recipe = load_recipe(EXAMPLE)
    assert pool_splits(recipe) == ("train", "id", "ood")
    assert "train/bon" in world_data(recipe, recipe.worlds[0])
    data = resolve_paths(read_recipe_file(EXAMPLE), EXAMPLE.parent)
    data["bon"] = {"n": 16}
    plain = recipe_from_dict(data, str(EXAMPLE))
    assert pool_splits(plain) == ("id", "ood")
    assert "train/bon" not in world_data(plain, plain.worlds[0])
    data["bon"] = {"n": 0, "train": True}
    assert pool_splits(recipe_from_dict(data, str(EXAMPLE))) == ()


def test_the_peer_table_recipe_is_arith_with_large_pools():
    """examples/arith-peers.toml (docs/results/adaptive-peers-arith.md): the same world and first
    pass as arith.toml, pools of 64 on >= 150 questions per split with a training pool, and the
    calibrator meant for IAS over three seeds."""
    from dprm.recipe.spec import load_recipe

    base = load_recipe(EXAMPLE)
    peers = load_recipe(EXAMPLE.parent / "arith-peers.toml")
    assert peers.generators == base.generators and peers.prms == base.prms
    assert peers.questions.train == base.questions.train and peers.questions.ood == ("arith-ood",)
    assert peers.sampling == base.sampling  # the pools are drawn as arith.toml draws them
    assert peers.bon.n == 64 and peers.bon.train and peers.questions.limit >= 150
    assert peers.calibrators.methods == ("binomial",) and peers.calibrators.seeds == 3


@pytest.mark.parametrize("name", ["arith.toml", "arith-peers.toml"])
def test_a_copied_shipped_recipe_still_finds_the_shipped_models(tmp_path, monkeypatch, name):
    """The shipped recipes named their models relative to examples/ ("../src/dprm/..."), so a
    recipe copied elsewhere (as docs/cluster.md suggests) no longer found them."""
    import shutil

    from dprm.recipe import preflight
    from dprm.recipe.spec import load_recipe

    copy = Path(shutil.copy(EXAMPLE.parent / name, tmp_path / "mine.toml"))
    recipe = load_recipe(copy)
    for spec in (*recipe.generators, *recipe.prms):
        assert Path(spec.model).is_dir() and (Path(spec.model) / "config.json").is_file()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    missing = preflight.missing_requirements(recipe, "local", tmp_path / "run")
    assert [m.what for m in missing if "not found" in m.what] == []


def test_a_package_reference_that_names_nothing_is_one_line(tmp_path):
    from dprm.config import ConfigError
    from dprm.recipe.spec import load_recipe

    text = (EXAMPLE).read_text().replace("dprm:llm/worlds/arith/prm", "dprm:llm/worlds/nope")
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(ConfigError, match="dprm:llm/worlds/nope.*no such file or folder"):
        load_recipe(tmp_path / "bad.toml")
