"""Fault matrix, reads and ends: every input read safely (one line, exit 2), a signal that
ends any command through its cleanup, the calibrator's provenance checked by every command.

Every case works on copies under ``tmp_path``; the signal case runs ``dprm`` in a subprocess.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dprm.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from fixtures.cli_errors import one_line_error  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def mine(world, model_dir, tmp_path):
    """Private copies of a calibration set, a BoN set and a calibrator."""
    root = tmp_path / "w"
    return {
        "root": root,
        "calib": Path(shutil.copytree(world["id/calib"], root / "calib")),
        "bon": Path(shutil.copytree(world["id/bon"], root / "bon")),
        "model": Path(shutil.copytree(model_dir, tmp_path / "model")),
    }


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}


# ----------------------------------------------------------------------------- signals
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["term", "hup"])
def test_a_signal_ends_train_with_one_line_and_no_lock(mine, tmp_path, sig):
    """SIGTERM to `dprm train` exited 143 silently and left its .lock behind."""
    out = tmp_path / "model-out"
    argv = ["train", "--method", "ot", "--data", str(mine["calib"]), "--out", str(out)]
    argv += ["--set", "max_steps=100000", "--set", "eval_every=100000", "--no-progress"]
    train = subprocess.Popen(
        [sys.executable, "-m", "dprm.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        lock = tmp_path / ".model-out.lock"
        deadline = time.monotonic() + 120
        while not lock.exists():  # it holds --out: it is past its checks
            assert train.poll() is None, train.stderr.read()
            assert time.monotonic() < deadline, "never took its lock"
            time.sleep(0.1)
        time.sleep(1.0)
        train.send_signal(sig)
        _, err = train.communicate(timeout=120)
    finally:
        if train.poll() is None:
            train.kill()
    assert train.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and signal.Signals(sig).name in lines[0], err
    assert "interrupted" in lines[0] and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "w"]  # no lock, no output
