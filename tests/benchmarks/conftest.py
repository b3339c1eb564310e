"""The runner the script smoke tests share: a script run as a user runs it (a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_script(path: Path, args: list[str], tmp_path: Path, env: dict | None = None) -> str:
    """Run ``python PATH ARGS`` in ``tmp_path`` ({tmp} in ARGS is it); fail with its stderr."""
    env = {**os.environ, **(env or {}), "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = subprocess.run(
        [sys.executable, str(path), *args], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"{path.name} {args} exited {done.returncode}:\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.fixture
def run():
    """:func:`run_script`."""
    return run_script
