"""Recipe files: paths relative to the recipe's folder, encodings, errors in recipe terms."""

from __future__ import annotations

import pytest

from dprm.cli import main
from dprm.config import ConfigError
from dprm.recipe.spec import load_recipe, recipe_from_dict

BASE = {"generators": [{"name": "g", "model": "m"}], "prms": [{"name": "p", "model": "x"}]}


def test_relative_paths_resolve_against_the_recipe_folder_not_the_cwd(tmp_path, monkeypatch):
    home = tmp_path / "project"
    (home / "prm_calibration").mkdir(parents=True)
    (home / "models" / "tiny-prm").mkdir(parents=True)
    (home / "q").mkdir()
    (home / "q" / "train.jsonl").write_text("")
    (home / "recipe.toml").write_text(
        '[data]\nsource = "park"\npark = "prm_calibration"\n'
        '[questions]\ntrain = ["q/train.jsonl", "math500train"]\n'
        '[[generators]]\nname = "g"\nmodel = "Qwen/Qwen2.5-Math-1.5B-Instruct"\n'
        '[[prms]]\nname = "p"\nmodel = "models/tiny-prm"\n'
    )
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "prm_calibration").mkdir(parents=True)  # a decoy of the same name
    monkeypatch.chdir(elsewhere)

    recipe = load_recipe("../project/recipe.toml")
    assert recipe.data.park == str(home / "prm_calibration")
    assert recipe.questions.train == (str(home / "q" / "train.jsonl"), "math500train")
    assert recipe.prms[0].model == str(home / "models" / "tiny-prm")
    assert recipe.generators[0].model == "Qwen/Qwen2.5-Math-1.5B-Instruct"  # a hub id stays


def test_a_file_path_that_is_missing_is_still_a_path_of_the_recipe_folder(tmp_path, monkeypatch):
    (tmp_path / "r.toml").write_text(
        '[questions]\nid = ["./missing.jsonl"]\n'
        '[[generators]]\nname = "g"\nmodel = "m"\n[[prms]]\nname = "p"\nmodel = "x"\n'
    )
    monkeypatch.chdir(tmp_path.parent)
    assert load_recipe(tmp_path / "r.toml").questions.id == (str(tmp_path / "missing.jsonl"),)


def test_a_non_utf8_recipe_is_one_line_naming_the_file(tmp_path, capsys):
    path = tmp_path / "latin1.toml"
    path.write_bytes('[run]\nname = "caf\xe9"\n'.encode("latin-1"))
    assert main(["run", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "UTF-8" in err


def test_override_errors_speak_in_recipe_terms():
    with pytest.raises(ConfigError) as typo:
        recipe_from_dict(
            BASE | {"calibrators": {"methods": ["qr"], "overrides": {"qr": {"max_step": 3}}}},
            "r.toml",
        )
    message = str(typo.value)
    assert "r.toml [calibrators.overrides.qr]" in message and "'max_step'" in message
    assert "--set" not in message and "KEY=VALUE" not in message
    with pytest.raises(ConfigError) as other:
        recipe_from_dict(
            BASE | {"calibrators": {"methods": ["qr"], "overrides": {"ot": {"max_steps": 3}}}},
            "r.toml",
        )
    assert "[calibrators.overrides.ot]" in str(other.value) and "--set" not in str(other.value)
    with pytest.raises(ConfigError, match=r"\[calibrators.overrides.qr\].*max_steps"):
        recipe_from_dict(
            BASE | {"calibrators": {"methods": ["qr"], "overrides": {"qr": {"max_steps": "x"}}}},
            "r.toml",
        )


def test_ias_rules_reach_the_run_config_and_unknown_ones_are_refused():
    from dprm.recipe.run import run_config

    recipe = recipe_from_dict(
        BASE | {"ias": {"rules": ["highest-min"], "vote_trials": 8}}, "r.toml"
    )
    cfg = run_config(recipe)
    assert cfg.ias_rules == ["highest-min"] and cfg.vote_trials == 8
    assert run_config(recipe_from_dict(BASE, "r.toml")).ias_rules == ["highest-last", "majority"]
    with pytest.raises(
        ConfigError, match=r"r.toml \[ias\]: unknown selection rule\(s\) \['mode'\]"
    ):
        recipe_from_dict(BASE | {"ias": {"rules": ["mode"]}}, "r.toml")


def test_ias_sequential_key_reaches_the_run_config_and_others_are_refused(tmp_path):
    """``[ias] sequential = true`` turns on the auto-seq rows (RunConfig.ias_sequential, off by
    default); a misspelt key or a value that is not a boolean is refused with its table."""
    from dprm.recipe.run import run_config

    path = tmp_path / "r.toml"
    path.write_text(
        '[[generators]]\nname = "g"\nmodel = "m"\n[[prms]]\nname = "p"\nmodel = "x"\n'
        "[ias]\nsequential = true\nvote_trials = 8\n"
    )
    recipe = load_recipe(path)
    assert recipe.ias.sequential is True and run_config(recipe).ias_sequential is True
    assert run_config(recipe).vote_trials == 8
    assert recipe.to_dict()["ias"]["sequential"] is True  # recorded in recipe.json
    assert run_config(recipe_from_dict(BASE, "r.toml")).ias_sequential is False
    with pytest.raises(ConfigError, match=r"r.toml \[ias\]: unknown key.*'sequentail'"):
        recipe_from_dict(BASE | {"ias": {"sequentail": True}}, "r.toml")
    with pytest.raises(ConfigError, match=r"r.toml \[ias\].*sequential.*true/false"):
        recipe_from_dict(BASE | {"ias": {"sequential": "sometimes"}}, "r.toml")


def test_tune_trials_key_reaches_the_run_config_and_is_validated():
    from dprm.recipe.run import run_config

    recipe = recipe_from_dict(BASE | {"calibrators": {"methods": ["qr"], "tune_trials": 12}}, "r")
    assert recipe.calibrators.tune_trials == 12
    assert run_config(recipe).tune_trials == 12
    assert run_config(recipe_from_dict(BASE, "r")).tune_trials == 0  # default: no search
    with pytest.raises(ConfigError, match=r"r.toml.*tune_trials"):
        recipe_from_dict(BASE | {"calibrators": {"tune_trials": -1}}, "r.toml")
    with pytest.raises(ConfigError, match=r"r.toml.*tune_trials"):
        recipe_from_dict(BASE | {"calibrators": {"tune_trials": "many"}}, "r.toml")
