"""``--executor slurm`` through submitit's local executor (each task a separate process, as on
a cluster): the Park-labels recipe gives the same calibration sets as the local executor, and
the job arrays it submitted are recorded with their resources and stage order."""

from __future__ import annotations

import signal

import pytest

from dprm.io import read_json

from .conftest import write_recipe
from .test_park_source import park_recipe

pytest.importorskip("submitit")


@pytest.mark.slow
def test_slurm_executor_through_submitit_local(tmp_path, tiny_dirs, question_files):
    import numpy as np
    import pandas as pd

    from dprm.data.contract import read_calibration_set
    from dprm.recipe import load_recipe, run_recipe
    from dprm.runner.executors.slurm import SlurmExecutor

    recipe = load_recipe(
        write_recipe(tmp_path / "r.toml", park_recipe(tmp_path, tiny_dirs, question_files))
    )
    local, slurm = tmp_path / "local", tmp_path / "slurm"
    assert run_recipe(recipe, local, progress=False, log=lambda s: None).ok
    executor = SlurmExecutor(recipe, slurm, cluster="local", poll_s=0.2)
    outcome = run_recipe(recipe, slurm, executor=executor, progress=False, log=lambda s: None)
    assert outcome.ok, outcome.failures

    for split in ("train", "id", "ood"):
        a = read_calibration_set(local / "worlds" / "tiny-lm__tiny-prm" / split / "calib")
        b = read_calibration_set(slurm / "worlds" / "tiny-lm__tiny-prm" / split / "calib")
        pd.testing.assert_frame_equal(a.records, b.records)
        np.testing.assert_array_equal(np.asarray(a.hidden), np.asarray(b.hidden))
    assert (slurm / "report.md").exists()
    assert read_json(slurm / "recipe.json")["executor"] == "slurm"

    arrays = read_json(slurm / "slurm" / "jobs.json")["arrays"]
    stages = [a["stage"] for a in arrays]
    assert stages == ["labels", "embed", "train", "evaluate"]  # merges run in the driver
    assert [a["after"] for a in arrays] == [None, "labels", "embed", "train"]
    embed = arrays[1]
    assert embed["tasks"] == 6 and len(set(embed["job_ids"])) == 6  # 3 splits x 2 shards
    assert embed["resources"]["name"] == "dprm-embed" and embed["resources"]["gpus_per_node"] == 0
    assert embed["resources"]["timeout_min"] == 240


def test_slurm_without_a_scheduler_says_so_before_any_work(
    tmp_path, tiny_dirs, question_files, capsys, monkeypatch
):
    """No sbatch here: one line, exit 2, nothing written (not ten local processes instead)."""
    from dprm.cli import main

    path = write_recipe(tmp_path / "r.toml", park_recipe(tmp_path, tiny_dirs, question_files))
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))
    out = tmp_path / "out"
    assert main(["run", str(path), "--executor", "slurm", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sbatch" in err and "--slurm-cluster local" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGINT, marks=pytest.mark.slow),
        pytest.param(signal.SIGKILL, marks=pytest.mark.slow),
    ],  # fmt: skip
    ids=["int", "kill"],
)
def test_ctrl_c_or_death_of_the_driver_ends_every_job(tmp_path, tiny_dirs, question_files, sig):
    """SIGINT (Ctrl-C) or SIGKILL to the driver alone, in submitit's local mode, while a labels job
    that never ends by itself is running: every process of the run ends (checked by pid)."""
    from .interrupt import cmdlines, endless_labels, interrupt_run, stage_started

    path = write_recipe(tmp_path / "r.toml", park_recipe(tmp_path, tiny_dirs, question_files))
    env = endless_labels(tmp_path)
    out = tmp_path / "out"

    def blocked(children, out) -> bool:
        task = any("submitit.core._submit" in c for c in cmdlines(children))
        return task and stage_started(out, "labels")

    args = [str(path), "--executor", "slurm", "--slurm-cluster", "local", "--out", str(out)]
    code, seen, err = interrupt_run([*args, "--quiet"], blocked, out, env=env, sig=sig)
    assert code == (130 if sig == signal.SIGINT else -signal.SIGKILL), err
    assert len(seen) >= 2  # a controller and its task at least, all gone
