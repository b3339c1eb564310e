"""``dprm run --executor ray`` on one shared local Ray instance: same outputs as local, row for
row, although an engine actor is killed in the middle of a rollout shard and a task worker in the
middle of training."""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from dprm.io import read_json

from .compare import assert_same_outputs
from .conftest import tiny_recipe, write_recipe

ray = pytest.importorskip("ray")


@pytest.fixture(scope="session")
def ray_instance():
    """One local Ray instance for the whole test session (2 CPUs, no dashboard)."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import tests
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local instance
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGINT, marks=pytest.mark.slow),
        pytest.param(signal.SIGTERM, marks=pytest.mark.slow),
    ],  # fmt: skip
    ids=["int", "term"],
)
def test_ctrl_c_leaves_no_ray_process(tmp_path, tiny_dirs, question_files, sig):
    """SIGINT (Ctrl-C) or SIGTERM to a driver that started its own Ray instance, while a labels task
    that never ends by itself is running: every Ray process (GCS, raylet, workers) ends with
    it, checked by pid."""
    from .interrupt import cmdlines, endless_labels, interrupt_run
    from .test_park_source import park_recipe

    path = write_recipe(tmp_path / "r.toml", park_recipe(tmp_path, tiny_dirs, question_files))
    env = endless_labels(tmp_path)
    out = tmp_path / "out"

    def blocked(children, out) -> bool:  # Ray runs the labels tasks
        return any("ray::call" in c for c in cmdlines(children))

    args = [str(path), "--executor", "ray", "--out", str(out), "--quiet"]
    code, seen, err = interrupt_run(
        args, blocked, out, env=env | {"RAY_AUTH_MODE": "disabled"}, sig=sig
    )
    assert code != 0, err
    assert len(seen) >= 3  # GCS, raylet and workers at least, all gone


def die_after_first_part(marker: str, parts: str, work):
    """The first time: run ``work`` but kill this process once its first part is stored."""
    if not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))

        def watch():
            while not any(Path(parts).glob("part-*")):
                time.sleep(0.005)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
    return work()


def die_at_start(marker: str, work):
    """The first time: kill this process before doing anything."""
    if not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        os._exit(1)
    return work()


def _killing_executor(recipe, out: Path, markers: Path):
    """The Ray executor, with a kill planted in the first rollout shard and the first training."""
    from dprm.runner.executors.ray import RayExecutor

    class Killing(RayExecutor):
        def run(self, stage, units, record, fail, bar):
            for unit in units:
                if unit.key == "rollout/tiny-lm/train/shard000-of-002":
                    final = unit.outputs[0]
                    parts = final.parent / f".{final.name}.parts"
                    unit.run = functools.partial(
                        die_after_first_part, str(markers / "rollout"), str(parts), unit.run
                    )
                if unit.key == "train/tiny-lm__tiny-prm/isotonic/seed0":
                    unit.run = functools.partial(die_at_start, str(markers / "train"), unit.run)
            super().run(stage, units, record, fail, bar)

    return Killing(recipe, out)


@pytest.mark.slow
def test_ray_matches_local_row_for_row_despite_killed_workers(
    ray_instance, local_run, tiny_dirs, question_files, tmp_path
):
    from dprm.recipe import load_recipe, run_recipe

    path = write_recipe(tmp_path / "tiny.toml", tiny_recipe(tiny_dirs, question_files))
    recipe = load_recipe(path)
    out, markers = tmp_path / "out", tmp_path / "markers"
    markers.mkdir()
    outcome = run_recipe(
        recipe, out, executor=_killing_executor(recipe, out, markers), progress=False,
        log=lambda s: None,
    )  # fmt: skip
    assert outcome.ok, outcome.failures
    # both kills happened, in Ray worker processes (not here)
    for name in ("rollout", "train"):
        assert int((markers / name).read_text()) != os.getpid()
    # the killed shard was retried and resumed: its output is complete and written once
    assert not list((out / "data" / "tiny-lm" / "train").glob(".*parts"))
    assert_same_outputs(local_run[2], out)
    assert read_json(out / "recipe.json")["executor"] == "ray"
    assert (out / "report.md").exists()
    assert read_json(out / "state.json")["done"].keys() >= {
        "train/tiny-lm__tiny-prm/isotonic/seed0",
        "rollout/tiny-lm/train/merge",
    }
