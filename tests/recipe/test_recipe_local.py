"""``dprm run`` with the local executor on the tiny-model variant of examples/park.toml."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dprm.cli import main
from dprm.config import ConfigError
from dprm.io import read_json
from dprm.recipe.spec import load_recipe, recipe_from_dict

from .compare import made_units, planned_units
from .conftest import ROOT, tiny_recipe, write_recipe


def _stage_units(out: Path, key: str = "last_stage_timing") -> dict[str, int]:
    """Units each stage ran in the last invocation (run.json)."""
    run = read_json(out / "run.json")
    timing = run.get(key) or run["stage_timing"]
    return {stage: int(t["units"]) for stage, t in timing.items()}


# ----------------------------------------------------------------------------- the recipe file
@pytest.mark.parametrize("name", ["park.toml", "paper-table1.toml"])
def test_examples_load(name):
    recipe = load_recipe(ROOT / "examples" / name)
    assert recipe.prms[0].model == "Qwen/Qwen2.5-Math-PRM-7B"
    assert len(recipe.worlds) >= 3


def test_unknown_keys_are_rejected_with_their_path(tmp_path):
    base = {"generators": [{"name": "g", "model": "m"}], "prms": [{"name": "p", "model": "x"}]}
    with pytest.raises(ConfigError, match=r"\[generators\]\[0\].*unknown key.*'tp'"):
        recipe_from_dict({**base, "generators": [{"name": "g", "model": "m", "tp": 2}]})
    with pytest.raises(ConfigError, match=r"\[sampling\].*unknown key.*'temprature'"):
        recipe_from_dict({**base, "sampling": {"temprature": 0.7}})
    with pytest.raises(ConfigError, match=r"unknown table.*'samplng'"):
        recipe_from_dict({**base, "samplng": {}})
    with pytest.raises(ConfigError, match=r"\[executor.ray\].*unknown key.*'adress'"):
        recipe_from_dict({**base, "executor": {"ray": {"adress": "auto"}}})
    with pytest.raises(ConfigError, match=r"calibrators.overrides.*qr"):
        recipe_from_dict(
            {**base, "calibrators": {"methods": ["qr"], "overrides": {"qr": {"nope": 1}}}}
        )
    with pytest.raises(ConfigError, match=r"\[data\].*source"):
        recipe_from_dict({**base, "data": {"source": "magic"}})
    with pytest.raises(ConfigError, match=r"\[prms\]"):
        recipe_from_dict({"generators": base["generators"]})
    path = tmp_path / "r.toml"
    path.write_text('[[generators]]\nname = "a__b"\nmodel = "m"\n[[prms]]\nname="p"\nmodel="x"\n')
    with pytest.raises(ConfigError, match=r"r.toml \[generators\]\[0\].*'__'"):
        load_recipe(path)


def test_unknown_key_exits_2(tmp_path, capsys):
    path = tmp_path / "r.toml"
    path.write_text(
        '[[generators]]\nname = "g"\nmodel = "m"\nbatch = 3\n[[prms]]\nname="p"\nmodel="x"\n'
    )
    assert main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    assert "[generators][0]" in capsys.readouterr().err


# ----------------------------------------------------------------------------- end to end
@pytest.mark.slow  # the shared local run of the tiny recipe: about a minute
def test_local_run_writes_report_tables_figures(local_run):
    root, _, out = local_run
    assert (out / "report.md").read_text().startswith("# dprm run: recipe `tiny`")
    assert sorted(p.name for p in (out / "tables").glob("calibration_tiny-prm.*"))
    assert list((out / "figures").glob("*.png"))
    results = read_json(out / "results.json")
    assert results["failures"] == []
    metrics = pd.DataFrame(results["metrics"])
    assert set(zip(metrics["method"], metrics["dataset"], strict=True)) == {
        (m, d) for m in ("base", "qr", "isotonic") for d in ("train", "id", "ood")
    }
    assert len(results["ias"]) > 0
    stored = read_json(out / "recipe.json")
    assert stored["recipe"]["run"]["name"] == "tiny" and stored["executor"] == "local"
    assert stored["recipe"]["sampling"]["seed"] == 42 and "dprm" in stored


@pytest.mark.slow  # the shared local run of the tiny recipe: about a minute
def test_local_run_data_is_complete_and_duplicate_free(local_run):
    from dprm.data.contract import read_bon_set, read_calibration_set, read_labels

    _, _, out = local_run
    key = ["question_id", "response_id", "step"]
    for split, n_questions in (("train", 8), ("id", 3), ("ood", 3)):
        traj = pd.read_parquet(out / "data" / "tiny-lm" / split / "trajectories.parquet")
        assert traj["question_id"].nunique() == n_questions and len(traj) == 2 * n_questions
        labels = read_labels(out / "data" / "tiny-lm" / split / "labels.parquet")
        assert not labels.duplicated(key).any()
        cal = read_calibration_set(out / "worlds" / "tiny-lm__tiny-prm" / split / "calib")
        assert len(cal) == len(labels)
        merged = cal.records.merge(labels, on=key, suffixes=("", "_label"))
        assert (merged["success_prob"] == merged["success_prob_label"]).all()
    for split in ("id", "ood"):
        bon = read_bon_set(out / "worlds" / "tiny-lm__tiny-prm" / split / "bon")
        assert len(bon) == 3 and len(bon.responses) == 3 * 4  # bon.n = 4 per question


@pytest.mark.slow  # the shared local run of the tiny recipe: about a minute
def test_the_dry_run_plans_the_units_the_run_made(local_run):
    """`--dry-run` planned other unit counts than the run made (no raw-score evaluate / IAS
    units, no training pool); here with two shards per output and their merges."""
    _, recipe, out = local_run
    loaded = load_recipe(recipe)
    made = made_units(out)
    assert "generate-merge" in made and "embed-merge" in made  # sharded outputs were merged
    assert planned_units(loaded, loaded.run.shards) == made


@pytest.mark.slow  # the shared local run of the tiny recipe: about a minute
def test_rerun_does_no_work(local_run):
    _, recipe, out = local_run
    before = read_json(out / "state.json")["done"]
    assert main(["run", str(recipe), "--out", str(out), "--quiet"]) == 0
    assert read_json(out / "state.json")["done"] == before
    units = _stage_units(out)
    assert units and all(n == 0 for n in units.values()), units


@pytest.mark.slow  # the shared local run of the tiny recipe: about a minute
def test_changed_calibrator_setting_reruns_only_that_calibrator(
    local_run, tiny_dirs, question_files
):
    root, _, out = local_run
    recipe = tiny_recipe(tiny_dirs, question_files)
    recipe["calibrators"]["overrides"]["qr"]["max_steps"] = 40
    changed = write_recipe(root / "changed.toml", recipe)
    before = read_json(out / "state.json")["done"]
    assert main(["run", str(changed), "--out", str(out), "--quiet"]) == 0
    after = read_json(out / "state.json")["done"]
    rerun = sorted(k for k in after if k not in before or after[k]["at"] != before[k]["at"]
                   or after[k].get("inputs") != before[k].get("inputs"))  # fmt: skip
    assert [k for k in rerun if not k.startswith("report/")] == [
        "evaluate/tiny-lm__tiny-prm/qr/seed0",
        "ias/tiny-lm__tiny-prm/id/qr/seed0",
        "ias/tiny-lm__tiny-prm/ood/qr/seed0",
        "train/tiny-lm__tiny-prm/qr/seed0",
    ]
    units = _stage_units(out, "stage_timing")
    assert units["train"] == 1 and units["evaluate"] == 1 and units["ias"] == 2
    assert all(units[s] == 0 for s in ("questions", "generate", "labels", "embed"))
    config = json.loads((out / "models/tiny-lm__tiny-prm/qr/seed0/config.json").read_text())
    assert config["config"]["max_steps"] == 40
