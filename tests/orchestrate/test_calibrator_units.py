"""The train stage's tuning hook (RunConfig.tune_trials): small and additive."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("optuna")

pytestmark = pytest.mark.usefixtures("one_thread")


def test_train_units_tune_only_when_asked(tmp_path):
    from dprm.orchestrate import calibrator_units
    from dprm.orchestrate.grid import resolve
    from dprm.runner.pipeline import Pipeline

    plain = resolve("tiny", methods=["qr", "isotonic"], keep_worlds=False)
    assert plain.tune_trials == 0
    world = plain.worlds[0]
    units = calibrator_units.train_units(Pipeline(tmp_path / "a", plain, progress=False), world)
    assert all("tune_trials" not in u.inputs for u in units)  # earlier runs keep their hashes

    tuned = resolve("tiny", methods=["qr", "isotonic"], keep_worlds=False, tune_trials=3)
    units = {
        u.key.split("/")[2]: u
        for u in calibrator_units.train_units(
            Pipeline(tmp_path / "b", tuned, progress=False), world
        )
    }
    assert units["qr"].inputs["tune_trials"] == 3
    assert units["qr"].inputs["tune_objective"] == "wql"  # a new default re-runs tuned units
    assert "tune_trials" not in units["isotonic"].inputs  # no search space: trained as before


def test_train_one_fits_with_the_searched_parameters(tiny_world, tmp_path):
    from dprm.orchestrate.calibrator_units import train_one

    calib = str(tiny_world()["train/calib"])
    tune_dir = tmp_path / "tune"
    for seed in (0, 1):  # the seeds share one search
        train_one(
            calib, "qr", seed, {"max_steps": 20}, str(tmp_path / f"s{seed}"), 0, 2, str(tune_dir)
        )
    import optuna

    study = optuna.load_study(study_name="qr", storage=f"sqlite:///{tune_dir / 'study.db'}")
    assert len(study.trials) == 2
    best = study.best_trial.user_attrs["overrides"]
    for seed in (0, 1):
        config = json.loads((tmp_path / f"s{seed}" / "config.json").read_text())["config"]
        assert config["lr"] == best["lr"] and config["batch_size"] == best["batch_size"]
        assert config["max_steps"] == 20  # the run's own overrides win


def test_a_pipeline_starts_a_stale_search_over(tiny_world, tmp_path):
    """A unit re-runs only when its inputs changed (e.g. the search objective); the search stored
    under the old settings is then started over, not refused as `dprm tune` would."""
    import optuna

    from dprm.data import read_calibration_set
    from dprm.models.tune import storage_url, tuned_overrides

    data = read_calibration_set(tiny_world()["train/calib"])
    tuned_overrides("qr", data, tmp_path, trials=1, max_steps=10, objective="checkpoint")
    tuned_overrides("qr", data, tmp_path, trials=1, max_steps=10, objective="wql")
    study = optuna.load_study(study_name="qr", storage=storage_url(tmp_path))
    assert study.user_attrs["settings"]["objective"] == "wql"
    assert len(study.trials) == 1  # the checkpoint search's trial went with it
