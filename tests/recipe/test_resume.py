"""Content-addressed resume of ``dprm run``: changed labels (in place or by path) re-run exactly
what depends on them and give a fresh run's results; a damaged finished output is redone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from dprm.io import read_json

from .conftest import write_recipe
from .test_park_source import park_recipe

WORLD = "tiny-lm__tiny-prm"


def _flip_in_place(path: Path) -> None:
    """Change labels of a Park ``data.json`` without changing its size or mtime."""
    stat = path.stat()
    text = path.read_text()
    flipped = text.replace("0.125", "0.875")
    assert flipped != text and len(flipped) == len(text)
    path.write_text(flipped)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_mtime_ns == stat.st_mtime_ns and path.stat().st_size == stat.st_size


def _run(recipe_dict: dict, path: Path, out: Path, logs: list[str] | None = None):
    from dprm.recipe import load_recipe, run_recipe

    recipe = load_recipe(write_recipe(path, recipe_dict))
    log = logs.append if logs is not None else (lambda s: None)
    outcome = run_recipe(recipe, out, progress=False, log=log)
    assert outcome.ok, outcome.failures
    return read_json(out / "results.json")


def _metrics(results: dict) -> pd.DataFrame:
    frame = pd.DataFrame(results["metrics"])
    return frame.sort_values(list(frame.columns[:3])).reset_index(drop=True)


def _rerun_units(out: Path) -> set[str]:
    """Units the last invocation ran (not reused), without the report."""
    run = read_json(out / "run.json")
    reused = set(run.get("last_reused_units", run["reused_units"]))
    return {k for k in read_json(out / "state.json")["done"] if k not in reused} - {
        k for k in read_json(out / "state.json")["done"] if k.startswith("report/")
    }


@pytest.mark.slow
def test_labels_changed_in_place_rerun_what_reads_them(tmp_path, tiny_dirs, question_files):
    recipe = park_recipe(tmp_path, tiny_dirs, question_files)
    out = tmp_path / "out"
    before = _run(recipe, tmp_path / "r.toml", out)
    _flip_in_place(tmp_path / "prm_calibration" / "mathtrain" / "Tiny-LM-Instruct" / "data.json")

    after = _run(recipe, tmp_path / "r.toml", out)
    fresh = _run(recipe, tmp_path / "r.toml", tmp_path / "fresh")
    pd.testing.assert_frame_equal(_metrics(after), _metrics(fresh))
    assert not _metrics(after).equals(_metrics(before))  # the flip changed the results
    rerun = _rerun_units(out)
    assert "labels/tiny-lm/train" in rerun
    assert {f"train/{WORLD}/qr/seed0", f"train/{WORLD}/isotonic/seed0"} <= rerun
    # the id and ood labels and their embeddings were not touched
    assert not {k for k in rerun if k.startswith(("labels/tiny-lm/id", "labels/tiny-lm/ood"))}
    assert not {k for k in rerun if k.startswith((f"embed/{WORLD}/id", f"embed/{WORLD}/ood"))}
    # the content digests are recorded in state.json
    done = read_json(out / "state.json")["done"]
    assert any(k.endswith("mathtrain/Tiny-LM-Instruct/data.json") and v
               for k, v in done["labels/tiny-lm/train"]["reads"].items())  # fmt: skip


@pytest.mark.slow
def test_recipe_pointed_at_other_labels_retrains(tmp_path, tiny_dirs, question_files):
    """The train fingerprint depends on the data (the world's data fingerprint is no
    longer overwritten by the split name), so new labels are not scored with old models."""
    recipe = park_recipe(tmp_path, tiny_dirs, question_files)
    out = tmp_path / "out"
    before = _run(recipe, tmp_path / "r.toml", out)
    other = tmp_path / "other_labels"
    shutil.copytree(tmp_path / "prm_calibration", other)
    _flip_in_place(other / "mathtrain" / "Tiny-LM-Instruct" / "data.json")
    moved = recipe | {"data": recipe["data"] | {"park": str(other)}}

    after = _run(moved, tmp_path / "moved.toml", out)
    fresh = _run(moved, tmp_path / "moved.toml", tmp_path / "fresh")
    pd.testing.assert_frame_equal(_metrics(after), _metrics(fresh))
    assert not _metrics(after).equals(_metrics(before))
    assert f"train/{WORLD}/qr/seed0" in _rerun_units(out)


def test_labels_edited_under_out_worlds_are_noticed_and_redone(tmp_path, tiny_dirs, question_files):
    """A calibration set under OUT/worlds/ edited after it was written is the output of an
    embed unit that changed: the run says so, redoes it from the recipe's labels and the
    results are a fresh run's."""
    from dprm.data.contract import read_calibration_set

    recipe = park_recipe(tmp_path, tiny_dirs, question_files)
    out = tmp_path / "out"
    before = _run(recipe, tmp_path / "r.toml", out)
    calib = out / "worlds" / WORLD / "train" / "calib"
    original = read_calibration_set(calib).records
    records = calib / "records.parquet"
    stat = records.stat()
    frame = pd.read_parquet(records)
    frame["success_prob"] = 1.0 - frame["success_prob"]
    frame.to_parquet(records)
    os.utime(records, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    logs: list[str] = []
    after = _run(recipe, tmp_path / "r.toml", out, logs)
    assert any("changed since it was written" in line and "train/calib" in line for line in logs)
    pd.testing.assert_frame_equal(read_calibration_set(calib).records, original)
    pd.testing.assert_frame_equal(_metrics(after), _metrics(before))


def _last_recipe(out: Path):
    """The recipe the shared local run last ran with (other tests change its settings)."""
    from dprm.recipe.spec import recipe_from_dict

    return recipe_from_dict(read_json(out / "recipe.json")["recipe"], str(out / "recipe.json"))


@pytest.mark.slow  # the shared local run of the tiny recipe: about a minute
def test_truncated_finished_output_is_redone(local_run, tmp_path):
    """A truncated ias_full.csv of a finished unit is redone, not published."""
    from dprm.recipe import run_recipe

    _, _, original = local_run
    out = tmp_path / "copy"
    shutil.copytree(original, out)
    target = out / "ias" / WORLD / "id" / "isotonic" / "seed0" / "ias_full.csv"
    lines = target.read_text().splitlines(keepends=True)
    target.write_text("".join(lines[:2]))

    logs: list[str] = []
    outcome = run_recipe(_last_recipe(original), out, progress=False, log=logs.append)
    assert outcome.ok, outcome.failures
    assert any(
        "changed since it was written" in line and "ias_full.csv" in line for line in logs
    ), logs
    assert target.read_text().splitlines(keepends=True) == lines
    assert read_json(out / "results.json")["ias"] == read_json(original / "results.json")["ias"]
    assert _rerun_units(out) == {f"ias/{WORLD}/id/isotonic/seed0"}


@pytest.mark.slow  # the shared local run of the tiny recipe: about a minute
def test_resume_removes_stale_temporaries(local_run, tmp_path):
    """A killed figure stage leaves ``.NAME.XXXX.tmp`` files of the atomic writers; the resumed
    run removes them (and says so)."""
    from dprm.recipe import run_recipe

    _, _, original = local_run
    out = tmp_path / "copy"
    shutil.copytree(original, out)
    stale_file = out / "figures" / ".frontiers_tiny-prm.png.k3j2h1.tmp"
    stale_file.write_bytes(b"half a png")
    stale_dir = out / "models" / WORLD / "qr" / ".seed0.a1b2c3.tmp"
    stale_dir.mkdir()
    (stale_dir / "model.safetensors").write_bytes(b"half a model")

    logs: list[str] = []
    outcome = run_recipe(_last_recipe(original), out, progress=False, log=logs.append)
    assert outcome.ok, outcome.failures
    assert not stale_file.exists() and not stale_dir.exists()
    assert any("temporary file" in line for line in logs), logs
    assert not list(out.rglob(".*.tmp"))


def _recipe_dict(out: Path) -> dict:
    """The resolved recipe a run recorded (tables as dicts)."""
    return read_json(out / "recipe.json")["recipe"]


def _run_resolved(recipe_dict: dict, out: Path, logs: list[str] | None = None) -> dict:
    """:func:`_run` of a resolved recipe (as recorded in recipe.json)."""
    from dprm.recipe import run_recipe
    from dprm.recipe.spec import recipe_from_dict

    recipe = recipe_from_dict(recipe_dict, str(out / "recipe.json"))
    log = logs.append if logs is not None else (lambda s: None)
    outcome = run_recipe(recipe, out, progress=False, log=log)
    assert outcome.ok, outcome.failures
    return read_json(out / "results.json")


def _at(out: Path) -> dict[str, str]:
    """unit -> when it finished, for every unit but the report."""
    done = read_json(out / "state.json")["done"]
    return {k: v["at"] for k, v in done.items() if not k.startswith("report/")}


@pytest.mark.slow  # the shared local run of the tiny recipe: about a minute
def test_pools_dropped_from_the_recipe_leave_the_run_and_its_report(local_run, tmp_path):
    """`[bon] n = 0` after a run with pools: the resumed report still held every IAS and "does
    it pay?" row (a fresh run has none), and every calibrator was trained again (the pools'
    settings were part of the calibrators' fingerprints)."""
    _, _, original = local_run
    out = tmp_path / "copy"
    shutil.copytree(original, out)
    before = _at(out)
    assert read_json(out / "results.json")["ias"]  # the run had IAS rows
    recipe = _recipe_dict(original)
    recipe["bon"] = recipe["bon"] | {"n": 0}
    logs: list[str] = []
    results = _run_resolved(recipe, out, logs)
    assert results["ias"] == [] and results["pays"] == [] and results["uniform"] == []
    assert not (out / "ias").exists()
    assert not list((out / "worlds" / WORLD).glob("*/bon"))
    assert not list((out / "data").rglob("pool.parquet"))
    assert any("no longer asks for" in line for line in logs), logs
    after = _at(out)
    assert not [k for k in after if k.startswith("ias/") or "/pool" in k or k.endswith("/bon")]
    assert not [k for k in after if "/bon/" in k]
    kept = {k: v for k, v in before.items() if k.startswith(("train/", "evaluate/"))}
    assert kept and {k: after[k] for k in kept} == kept  # the calibrators were reused


@pytest.mark.slow  # the shared local run of the tiny recipe: about a minute
def test_a_training_pool_the_recipe_does_not_ask_for_is_never_read(local_run, tmp_path):
    """A train/bon left in the world (by an earlier recipe with `[bon] train = true`) while the
    recipe has no `[bon] train`: `auto` rows were learnt on it."""
    _, _, original = local_run
    out = tmp_path / "copy"
    shutil.copytree(original, out)
    shutil.copytree(out / "worlds" / WORLD / "id" / "bon", out / "worlds" / WORLD / "train" / "bon")
    results = _run_resolved(_recipe_dict(original), out)
    assert "auto" not in {row.get("allocation") for row in results["pays"]}
    assert results["pays"] == read_json(original / "results.json")["pays"]
    assert not [k for k in _rerun_units(out) if k.startswith("ias/")]


#: a ``sitecustomize``: SIGKILL this process as the set whose path ends with
#: ``$DPRM_TEST_KILL_AT`` is about to be published (its temporary written, not yet renamed)
KILL_MID_WRITE = """
import os

if os.environ.get("DPRM_TEST_KILL_AT"):
    import signal

    from dprm.data import set_writer

    real = set_writer.SetWriter.__exit__

    def exit_(self, *args):
        if str(self.path).endswith(os.environ["DPRM_TEST_KILL_AT"]):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, *args)

    set_writer.SetWriter.__exit__ = exit_
"""


@pytest.mark.slow  # a killed and a resumed run of the tiny recipe: minutes
@pytest.mark.parametrize("kill_at", ["train/calib", "ood/bon"])
def test_run_killed_while_writing_a_world_resumes_to_a_fresh_run(local_run, tmp_path, kill_at):
    """SIGKILL to `dprm run` (the local executor: the driver writes the world) while a world's
    set is written; the resumed run equals a fresh run of the same recipe."""
    import subprocess
    import sys

    from .compare import assert_same_outputs

    _, recipe, fresh = local_run
    out = tmp_path / "out"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(KILL_MID_WRITE)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DPRM_TEST_KILL_AT": kill_at}
    env["PYTHONPATH"] = os.pathsep.join([str(hooks), *sys.path])
    argv = [sys.executable, "-m", "dprm.cli", "run", str(recipe), "--executor", "local"]
    argv += ["--out", str(out), "--quiet"]
    killed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (out / "worlds" / WORLD / kill_at / "meta.json").exists()
    env.pop("DPRM_TEST_KILL_AT")
    resumed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_outputs(fresh, out)
    left = read_json(out / "results.json")
    right = read_json(fresh / "results.json")
    for key in ("ias", "pays", "uniform"):
        assert pd.DataFrame(left[key]).round(9).equals(pd.DataFrame(right[key]).round(9)), key
