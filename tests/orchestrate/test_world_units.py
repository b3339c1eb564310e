"""A world is present only when every set it promises is: a world killed part-way is completed,
and a reproduction killed while it writes a world resumes to a fresh run's results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dprm.runner.layout import WORLD_SETS

#: runs the tiny grid (isotonic only); ``DPRM_TEST_KILL_AT``: SIGKILL the process as the set
#: whose path ends so is about to be published (its temporary written, not renamed)
DRIVER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from dprm.orchestrate.grid import resolve
    from dprm.orchestrate.reproduce import reproduce

    if os.environ.get("DPRM_TEST_KILL_AT"):
        from dprm.data import set_writer

        real = set_writer.SetWriter.__exit__

        def exit_(self, *args):
            if str(self.path).endswith(os.environ["DPRM_TEST_KILL_AT"]):
                os.kill(os.getpid(), signal.SIGKILL)
            return real(self, *args)

        set_writer.SetWriter.__exit__ = exit_
    cfg = resolve("tiny", methods=["isotonic"], keep_worlds=True, jobs=1)
    cfg.mc_trials = 5
    reproduce(Path(sys.argv[1]), cfg, progress=False, log=lambda s: None)
    """
)


def reproduce_tiny(out: Path, kill_at: str | None = None) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    env.pop("DPRM_TEST_KILL_AT", None)
    if kill_at is not None:
        env["DPRM_TEST_KILL_AT"] = kill_at
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, str(out)], env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert kill_at is not None or result.returncode == 0, result.stderr[-3000:]
    return result.returncode


def results(out: Path) -> dict:
    """results.json without what depends on the invocation (timing, reuse, figure paths)."""
    data = json.loads((out / "results.json").read_text())
    return {k: v for k, v in data.items() if k not in ("run", "figures", "training_curves")}


def test_world_sets_include_the_training_pools():
    """train/bon (the pools `auto` learns on) is one of the sets a world must have."""
    assert ("train", "bon") in WORLD_SETS


def test_a_world_missing_its_last_set_is_completed(tiny_config, tmp_path):
    from dprm.orchestrate.world_units import ensure_world
    from dprm.runner.pipeline import Pipeline

    cfg = tiny_config()
    pipe = Pipeline(tmp_path / "run", cfg, progress=False, log=lambda s: None)
    world = cfg.worlds[0]
    path = ensure_world(pipe, world)
    before = (path / "train" / "bon" / "responses.parquet").read_bytes()
    shutil.rmtree(path / "train" / "bon")
    ensure_world(pipe, world)
    assert (path / "train" / "bon" / "responses.parquet").read_bytes() == before


@pytest.mark.slow
def test_reproduce_killed_while_writing_a_world_resumes_to_a_fresh_run(tmp_path):
    """SIGKILL while a world's train/bon was written: the resume took the world as present,
    never wrote train/bon, and its report lacked the `auto` rows a fresh run has."""
    pytest.importorskip("matplotlib")
    fresh, killed = tmp_path / "fresh", tmp_path / "killed"
    reproduce_tiny(fresh)
    assert reproduce_tiny(killed, kill_at=os.path.join("train", "bon")) == -9
    world = next((killed / "worlds").iterdir())
    assert not (world / "train" / "bon").exists()
    reproduce_tiny(killed)
    assert (world / "train" / "bon" / "meta.json").exists()
    assert results(killed) == results(fresh)
