"""examples/arith.toml end to end on the shipped models, at minimal size (real models, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("math_verify")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arith.toml"


@pytest.mark.slow
def test_arith_recipe_runs_end_to_end_on_the_shipped_models(tmp_path):
    from dprm.recipe.run import run_recipe
    from dprm.recipe.spec import read_recipe_file, recipe_from_dict, resolve_paths

    data = resolve_paths(read_recipe_file(EXAMPLE), EXAMPLE.parent)
    data["questions"] = dict(data["questions"], limit=2)
    data["sampling"] = dict(data["sampling"], n=2)
    data["rollout"] = dict(data["rollout"], n=2, max_steps=2)
    data["bon"] = {"n": 4}
    data["calibrators"] = {"methods": ["isotonic", "ot"], "seeds": 1}
    data["ias"] = dict(data["ias"], mc_trials=5)
    recipe = recipe_from_dict(data, str(EXAMPLE))
    outcome = run_recipe(recipe, tmp_path / "run", progress=False, log=lambda s: None)
    assert outcome.ok, outcome
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    datasets = {row["dataset"] for row in results["metrics"]}
    assert {"arith-id", "arith-ood"} <= datasets or len(datasets) >= 2, datasets
    assert results["ias"], "no best-of-N rows"
    assert (tmp_path / "run" / "report.md").is_file()
