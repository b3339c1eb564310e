"""dprm.models.tune: search spaces, determinism, equal budgets, resume, auto selection."""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("optuna")

from dprm.data import read_calibration_set  # noqa: E402
from dprm.models import REGISTRY  # noqa: E402
from dprm.models import tune as T  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

#: tiny trials: the cap is below the warm-up, so the last step is the checkpoint
FAST = T.TuneSettings(trials=2, seed=0, max_steps=20)


@pytest.fixture(scope="module")
def data(tiny_world):
    return read_calibration_set(tiny_world()["train/calib"])


@pytest.fixture(scope="module")
def search(data, tmp_path_factory):
    # one thread, as the tests that repeat it (module fixtures run before `one_thread`): the
    # validation WQL differs in its last digits between thread counts (reduction order)
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = tmp_path_factory.mktemp("search")
        best = T.tune(data, out, settings=FAST, progress=False)
    finally:
        torch.set_num_threads(before)
    return out, best


def test_search_spaces_name_config_fields():
    assert set(T.TUNED_METHODS) <= set(T.SEARCH_SPACES)
    for method, space in T.SEARCH_SPACES.items():
        fields = {f.name for f in dataclasses.fields(REGISTRY[method].config_class)}
        assert set(space) <= fields, (method, set(space) - fields)
        assert {"lr", "batch_size", "weight_decay"} <= set(space)


@pytest.mark.slow
def test_every_method_gets_the_same_number_of_finished_trials(search):
    out, best = search
    assert set(best["methods"]) == set(T.TUNED_METHODS)
    for method, entry in best["methods"].items():
        counts = entry["trials"]
        assert counts["complete"] + counts["pruned"] == FAST.trials, method
        assert (out / method / "config.json").exists()
        saved = json.loads((out / method / "config.json").read_text())
        assert saved["method"] == method
        # the tuned calibrator is trained with the best trial's parameters (resolved config)
        for key, value in entry["overrides"].items():
            assert saved["config"][key] == value, (method, key)
    rows = (out / "trials.csv").read_text().splitlines()
    assert len(rows) == 1 + FAST.trials * len(T.TUNED_METHODS)
    assert json.loads((out / "best.json").read_text())["best_method"] == best["best_method"]


@pytest.mark.slow
def test_same_seed_same_best_params(search, data, tmp_path):
    _, first = search
    again = T.tune(data, tmp_path, methods=["ot", "qr"], settings=FAST, progress=False)
    for method in ("ot", "qr"):
        assert again["methods"][method]["params"] == first["methods"][method]["params"]
        assert again["methods"][method]["value"] == first["methods"][method]["value"]
    other = T.tune(
        data,
        tmp_path / "seed1",
        methods=["qr"],
        settings=dataclasses.replace(FAST, seed=1),
        progress=False,
    )
    assert other["methods"]["qr"]["params"] != first["methods"]["qr"]["params"]


def test_objective_uses_only_the_training_split_validation_questions(data):
    split = T.split_for_tuning(data)
    train_q = set(split.train.records["question_id"])
    val_q = set(split.val.records["question_id"])
    assert train_q.isdisjoint(val_q) and train_q | val_q == set(data.records["question_id"])
    assert len(split.val_std) == len(split.val) and split.train_std.hidden.dtype.name == "float32"


def test_interrupted_search_resumes_without_repeating_finished_trials(data, tmp_path, monkeypatch):
    settings = dataclasses.replace(FAST, trials=5)
    split = T.split_for_tuning(data)

    def stop_after(k):
        def callback(study, trial):
            if T.finished_trials(study) >= k:
                raise KeyboardInterrupt

        return callback

    with pytest.raises(KeyboardInterrupt):
        T.run_study(
            "qr", split, data, tmp_path, settings, progress=False, callbacks=[stop_after(2)]
        )
    # and a trial killed while running (a process that died mid-trial leaves it RUNNING)
    import optuna

    study = optuna.load_study(study_name="qr", storage=T.storage_url(tmp_path))
    study.ask()
    before = {t.number: (t.params, t.value, t.datetime_complete) for t in study.trials if t.value}
    assert len(before) == 2

    def interrupted_fit(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C in the middle of a trial

    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(T.objective, "fit_split", interrupted_fit)
        T.run_study("qr", split, data, tmp_path, settings, progress=False)

    T.tune(data, tmp_path, methods=["qr"], settings=settings, progress=False)
    study = optuna.load_study(study_name="qr", storage=T.storage_url(tmp_path))
    finished = [t for t in study.trials if t.state.name in T.FINISHED]
    assert len(finished) == settings.trials
    for number, (params, value, completed) in before.items():
        t = study.trials[number]
        assert (t.params, t.value, t.datetime_complete) == (params, value, completed)
    # the killed and the interrupted trials are failed and not counted; nothing ran twice
    assert [t.state.name for t in study.trials].count("FAIL") == 2
    assert len(study.trials) == settings.trials + 2


def test_other_settings_refused_unless_restart(data, tmp_path):
    from dprm.io import OutputError

    T.tune(
        data, tmp_path, methods=["qr"], settings=dataclasses.replace(FAST, trials=1), progress=False
    )
    changed = dataclasses.replace(FAST, trials=1, max_steps=10)
    with pytest.raises(OutputError, match="other settings"):
        T.tune(data, tmp_path, methods=["qr"], settings=changed, progress=False)
    best = T.tune(data, tmp_path, methods=["qr"], settings=changed, restart=True, progress=False)
    assert best["methods"]["qr"]["overrides"]["max_steps"] == 10


def test_unknown_method_is_a_config_error(data, tmp_path):
    from dprm.config import ConfigError

    with pytest.raises(ConfigError, match="tunable methods"):
        T.tune(data, tmp_path, methods=["platt"], settings=FAST, progress=False)
    with pytest.raises(ConfigError, match="select"):
        T.tune(data, tmp_path, methods=["qr"], settings=FAST, select="nll", progress=False)


def test_choose_is_the_lowest_validation_score():
    methods = {
        "ot": {"validation": {"wql": 0.2, "brier": 0.1}},
        "qr": {"validation": {"wql": 0.1, "brier": 0.3}},
        "mono": {"error": "no trial completed"},
    }
    assert T.choose(methods, "wql") == "qr"
    assert T.choose(methods, "brier") == "ot"
    assert T.choose({"mono": {}}, "wql") is None


def test_ot_trials_train_one_map_and_the_refit_bags_the_default_ensemble(
    data, tmp_path, monkeypatch
):
    from dprm.models.ot import OTConfig

    seen = []
    real_fit_split = T.objective.fit_split

    def spy(*args, **kwargs):
        seen.append(kwargs["overrides"].get("ensemble_size"))
        return real_fit_split(*args, **kwargs)

    monkeypatch.setattr(T.objective, "fit_split", spy)
    settings = dataclasses.replace(FAST, trials=1)
    best = T.tune(data, tmp_path, methods=["ot"], settings=settings, progress=False)
    assert seen == [1]  # the trial: one map
    entry = best["methods"]["ot"]
    assert "ensemble_size" not in entry["overrides"]
    saved = json.loads((tmp_path / "ot" / "config.json").read_text())
    assert saved["config"]["ensemble_size"] == OTConfig().ensemble_size > 1  # the refit: bagged


@pytest.mark.slow
def test_tuned_overrides_reuses_the_study(data, tmp_path):
    first = T.tuned_overrides("qr", data, tmp_path, trials=2)
    again = T.tuned_overrides("qr", data, tmp_path, trials=2)  # resumed: nothing to run
    assert first == again and first["lr"] > 0


def test_tuned_overrides_creates_the_shared_schema_under_the_folder_lock(data, tmp_path):
    """`dprm reproduce --tune-trials` runs a world's ot and qr units in two workers on one
    study.db; each creating the schema at once failed ("table studies already exists"). The
    schema is created while holding the folder's lock, so a second creator waits for it."""
    import threading

    from dprm.io import folder_locked

    done = []
    with folder_locked(tmp_path):
        worker = threading.Thread(
            target=lambda: done.append(T.tuned_overrides("qr", data, tmp_path, trials=1))
        )
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and not (tmp_path / T.STUDY_FILE).exists()  # waits for us
    worker.join(timeout=120)
    assert not worker.is_alive() and done[0]["lr"] > 0


_TUNED_OVERRIDES_AT = """
import sys, time
from dprm.data import read_calibration_set
from dprm.models import tune as T
data = read_calibration_set(sys.argv[1])
while time.time() < float(sys.argv[4]):  # both processes start creating at the same moment
    pass
print(T.tuned_overrides(sys.argv[2], data, sys.argv[3], trials=1, max_steps=10)["lr"])
"""


@pytest.mark.slow
def test_two_processes_tune_two_methods_in_one_fresh_folder(tiny_world, tmp_path):
    """The real thing, as reproduce's parallel train units do it: two processes start on one
    fresh folder at the same instant, one per method; both searches finish."""
    import subprocess
    import sys
    import time

    path = str(tiny_world()["train/calib"])
    start = str(time.time() + 8.0)  # after both interpreters have imported dprm
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _TUNED_OVERRIDES_AT, path, method, str(tmp_path), start],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for method in ("qr", "mono")
    ]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-2000:]
        assert float(out.strip().splitlines()[-1]) > 0
    import optuna

    names = optuna.get_all_study_names(T.storage_url(tmp_path))
    assert sorted(names) == ["mono", "qr"]


@pytest.mark.parametrize("method", ["qr", "ot"])
def test_trials_sharing_the_standardised_rows_compute_what_they_compute_alone(
    data, method, monkeypatch
):
    """In a search the trainers reuse one standardised copy of the split (and its statistics):
    the standardiser is fitted once, and each fit's history and weights equal a fit alone."""
    import torch

    from dprm.models.fit import fit_split
    from dprm.models.interface import Standardizer
    from dprm.models.training import reuse_standardized_rows

    split = T.split_for_tuning(data)
    fits = []
    original_fit = Standardizer.fit

    def counted_fit(self, *args, **kwargs):
        fits.append(1)
        return original_fit(self, *args, **kwargs)

    monkeypatch.setattr(Standardizer, "fit", counted_fit)

    def train(seed):
        model, history, _ = fit_split(
            method,
            split.train_std,
            split.val_std,
            overrides={"max_steps": 30},
            seed=seed,
            progress=False,
        )
        return model, history

    alone = [train(seed) for seed in (0, 1)]
    assert len(fits) == 2
    with reuse_standardized_rows():
        shared = [train(seed) for seed in (0, 1)]
    assert len(fits) == 3  # the second trial reused the first one's rows and statistics
    for (model_a, history_a), (model_b, history_b) in zip(alone, shared, strict=True):
        assert [{k: v for k, v in e.items() if k != "seconds"} for e in history_a] == [
            {k: v for k, v in e.items() if k != "seconds"} for e in history_b
        ]
        a, b = model_a.state_dict(), model_b.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with reuse_standardized_rows():  # a new block starts with an empty cache
        train(0)
    assert len(fits) == 4


#: `dprm tune` in a child process whose third trial hangs mid-training (after telling the
#: test it started), so the test can SIGKILL the process with two trials finished, one running
_HANGING_TUNE = """
import pathlib, sys, time
from dprm.models import tune as T
real_fit_split, calls = T.objective.fit_split, []
def fit_split(*args, **kwargs):
    calls.append(1)
    if len(calls) == 3:
        pathlib.Path(sys.argv[1]).write_text("third trial running")
        time.sleep(300)
    return real_fit_split(*args, **kwargs)
T.objective.fit_split = fit_split
from dprm.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_search_killed_by_sigkill_resumes_without_repeating_finished_trials(tiny_world, tmp_path):
    """The real thing: SIGKILL of the process running `dprm tune` in the middle of a trial, then
    the same command again. The SQLite study keeps the two finished trials (not re-run), the
    killed trial is marked failed (not counted) and only the missing trials run."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import optuna

    import dprm
    from dprm.cli import main

    out, started = tmp_path / "search", tmp_path / "started"
    command = [
        "tune", "--data", str(tiny_world()["train/calib"]), "--methods", "qr", "--trials", "4",
        "--max-steps", "20", "--out", str(out), "--quiet",
    ]  # fmt: skip
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(Path(dprm.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }  # fmt: skip
    child = subprocess.Popen([sys.executable, "-c", _HANGING_TUNE, str(started), *command], env=env)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert child.poll() is None, f"dprm tune exited early ({child.returncode})"
            assert time.monotonic() < deadline, "the third trial never started"
            time.sleep(0.1)
        study = optuna.load_study(study_name="qr", storage=T.storage_url(out))
        states = [t.state.name for t in study.trials]
        assert states == ["COMPLETE", "COMPLETE", "RUNNING"]
        before = [(t.number, t.params, t.value, t.datetime_complete) for t in study.trials[:2]]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    assert main(command) == 0  # the same command again
    study = optuna.load_study(study_name="qr", storage=T.storage_url(out))
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert [(t.number, t.params, t.value, t.datetime_complete) for t in study.trials[:2]] == before
    best = json.loads((out / "best.json").read_text())
    assert best["methods"]["qr"]["trials"] == {"complete": 4, "pruned": 0, "fail": 1}


@pytest.mark.slow
def test_parallel_workers_give_the_sequential_result(tiny_world, tmp_path):
    """jobs = 2 (two worker processes sharing one fresh SQLite file) finds what jobs = 1 finds;
    the schema is created once up front (two workers creating it at once used to collide)."""
    settings = dataclasses.replace(FAST, trials=1, max_steps=10)
    path = tiny_world()["train/calib"]
    methods = ["qr", "mono"]
    parallel = T.tune(path, tmp_path / "two", methods=methods, settings=settings, jobs=2,
                      progress=False)  # fmt: skip
    sequential = T.tune(path, tmp_path / "one", methods=methods, settings=settings, progress=False)
    for method in methods:
        assert parallel["methods"][method]["params"] == sequential["methods"][method]["params"]
        assert parallel["methods"][method]["value"] == sequential["methods"][method]["value"]
    assert parallel["methods"]["qr"]["process"] != sequential["methods"]["qr"]["process"]


def test_wql_objective_scores_every_method_by_the_returned_models_validation_wql(data, tmp_path):
    """objective "wql": the same score for every method (binomial included), the validation WQL at
    11 levels of the model the trial's trainer returns; "checkpoint": each trainer's own score.
    The sampler does not depend on the objective, so the first trial has the same parameters."""
    from dprm.models.fit import fit_split

    settings = dataclasses.replace(FAST, trials=1)
    methods = ["qr", "binomial"]
    own, by_wql = (
        T.tune(
            data,
            tmp_path / objective,
            methods=methods,
            settings=dataclasses.replace(settings, objective=objective),
            progress=False,
        )
        for objective in ("checkpoint", "wql")
    )
    assert by_wql["settings"]["objective"] == "wql" == T.DEFAULT_OBJECTIVE
    assert own["settings"]["objective"] == "checkpoint"
    split = T.split_for_tuning(data)
    for method, checkpoint_metric in (("qr", "calibration_area"), ("binomial", "nll")):
        a, b = own["methods"][method], by_wql["methods"][method]
        assert a["params"] == b["params"]
        assert (a["metric"], b["metric"]) == (checkpoint_metric, "wql")
        model, _, _ = fit_split(
            method,
            split.train_std,
            split.val_std,
            overrides=b["overrides"] | T.TRIAL_ONLY.get(method, {}),
            seed=settings.seed,
            progress=False,
        )
        wql = T.validation_scores(model, split.val_std)["wql"]
        assert b["value"] == pytest.approx(wql, rel=1e-9)
        assert a["value"] != pytest.approx(wql, rel=1e-3)  # the checkpoint score is another one
        # the refit is scored by the same objective, from the raw rows
        assert b["refit_value"] == b["validation"]["wql"]
        assert b["refit_value"] == pytest.approx(b["value"], abs=1e-4)


def test_a_search_resumes_only_with_its_own_objective(data, tmp_path):
    from dprm.config import ConfigError
    from dprm.io import OutputError

    settings = dataclasses.replace(FAST, trials=1, objective="checkpoint")
    T.tune(data, tmp_path, methods=["qr"], settings=settings, progress=False)
    by_wql = dataclasses.replace(settings, objective="wql")
    with pytest.raises(OutputError, match=r"other settings \(objective\)"):
        T.tune(data, tmp_path, methods=["qr"], settings=by_wql, progress=False)
    best = T.tune(data, tmp_path, methods=["qr"], settings=by_wql, restart=True, progress=False)
    assert best["methods"]["qr"]["metric"] == "wql"
    with pytest.raises(OutputError, match=r"other settings \(objective\)"):
        T.tune(data, tmp_path, methods=["qr"], settings=settings, progress=False)
    with pytest.raises(ConfigError, match="objective"):
        T.tune(
            data,
            tmp_path / "x",
            methods=["qr"],
            settings=dataclasses.replace(settings, objective="brier"),
            progress=False,
        )


def test_a_study_stored_before_the_objective_was_kept_is_a_checkpoint_search(data, tmp_path):
    """Studies stored before the objective was kept have no "objective" in their settings and were scored by
    the checkpoint score (then the default). Now that the default is "wql", such a study must
    not resume as a wql search: it resumes only as a checkpoint search."""
    from dprm.io import OutputError

    optuna = pytest.importorskip("optuna")
    checkpoint = dataclasses.replace(FAST, trials=1, objective="checkpoint")
    T.tune(data, tmp_path, methods=["qr"], settings=checkpoint, progress=False)
    study = optuna.load_study(study_name="qr", storage=T.storage_url(tmp_path))
    legacy = {k: v for k, v in study.user_attrs["settings"].items() if k != "objective"}
    study.set_user_attr("settings", legacy)
    with pytest.raises(OutputError, match=r"other settings \(objective\)"):
        T.tune(data, tmp_path, methods=["qr"], settings=dataclasses.replace(FAST, trials=1),
               progress=False)  # fmt: skip
    again = T.tune(data, tmp_path, methods=["qr"], settings=checkpoint, progress=False)
    assert again["methods"]["qr"]["metric"] == "calibration_area"


def test_a_study_is_keyed_by_the_content_of_its_data(tiny_world, tmp_path):
    """In memory or on disk, data changed with the same rows gets another fingerprint; a study
    that recorded no data digest (an older dprm) is refused with that reason."""
    from dprm.data.contract import CalibrationSet
    from dprm.io import OutputError

    data = read_calibration_set(tiny_world()["train/calib"])
    settings = T.TuneSettings(trials=1, max_steps=5)
    on_disk = T.study_fingerprint(data, "qr", settings)
    assert on_disk["data_digest"].startswith("dir:")
    memory = CalibrationSet(data.records, data.hidden.copy(), data.meta, None)
    before = T.study_fingerprint(memory, "qr", settings)["data_digest"]
    memory.hidden[0, 0] += 1
    assert T.study_fingerprint(memory, "qr", settings)["data_digest"] != before

    T.create_storage(tmp_path)
    study = T.open_study(tmp_path, "qr", on_disk, settings, restart=False)
    legacy = {k: v for k, v in on_disk.items() if k != "data_digest"}
    study.set_user_attr("settings", legacy)
    with pytest.raises(OutputError, match="no content digest of its data"):
        T.open_study(tmp_path, "qr", on_disk, settings, restart=False)
    changed = on_disk | {"data_digest": "dir:0000"}
    study.set_user_attr("settings", changed)
    with pytest.raises(OutputError, match=r"data_digest.*content of .* changed"):
        T.open_study(tmp_path, "qr", on_disk, settings, restart=False)


def test_a_resumed_search_draws_what_a_fresh_search_of_the_same_total_draws(data, tmp_path):
    """3 trials, then a resume to 6, equals a fresh 6-trial search: same parameters and values
    per trial (the sampler's random state is not restarted from its seed on a resume)."""
    import optuna

    settings = dataclasses.replace(FAST, max_steps=10)
    split = T.split_for_tuning(data)
    (tmp_path / "resumed").mkdir()
    (tmp_path / "fresh").mkdir()
    T.run_study("qr", split, data, tmp_path / "resumed", dataclasses.replace(settings, trials=3),
                progress=False)  # fmt: skip
    T.run_study("qr", split, data, tmp_path / "resumed", dataclasses.replace(settings, trials=6),
                progress=False)  # fmt: skip
    T.run_study("qr", split, data, tmp_path / "fresh", dataclasses.replace(settings, trials=6),
                progress=False)  # fmt: skip

    def trials(folder):
        study = optuna.load_study(study_name="qr", storage=T.storage_url(folder))
        return [(t.number, t.params, t.value) for t in study.trials]

    resumed, fresh = trials(tmp_path / "resumed"), trials(tmp_path / "fresh")
    assert len(resumed) == 6 and resumed == fresh
    params = [p for _, p, _ in resumed]
    assert params[3:] != params[:3]  # trials 4-6 are not trials 1-3 again
