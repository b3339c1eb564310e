"""Ctrl-C of a ``dprm run`` driver, checked by pid: every process the run started must end."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def _default_sigint() -> None:
    # xdist workers ignore SIGINT and SIG_IGN survives exec: the driver must see Ctrl-C
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def interrupt_run(
    args: list[str],
    ready: Callable[[list[psutil.Process], Path], bool],
    out: Path,
    env: dict[str, str] | None = None,
    start_timeout: float = 120.0,
    end_timeout: float = 30.0,
    sig: int = signal.SIGINT,
) -> tuple[int, set[int], str]:
    """Start ``dprm run ARGS``, send ``sig`` (Ctrl-C; SIGTERM, SIGKILL: the driver's death) to
    the driver alone once ``ready(descendants, out)``, and wait for every process it started to
    end.

    Returns:
        The driver's exit code, the pids seen under it, and its stderr.

    Raises:
        AssertionError: the driver finished before it was ready to be interrupted, or a process
            of the run is still alive ``end_timeout`` seconds after the driver ended (those are
            killed, and named in the message).
    """
    environment = (
        dict(os.environ)
        | {
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1",
        }
        | (env or {})
    )
    log = out.parent / f"{out.name}.stderr"
    with log.open("w") as stderr:
        driver = subprocess.Popen(
            [sys.executable, "-m", "dprm.cli", "run", *args],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=_default_sigint,
            start_new_session=True,  # only the driver gets the signal, not a process group
        )
        seen: dict[int, psutil.Process] = {}
        deadline = time.monotonic() + start_timeout
        try:
            while True:
                assert driver.poll() is None, f"the run ended first: {log.read_text()[-2000:]}"
                assert time.monotonic() < deadline, "the run never got ready to be interrupted"
                try:
                    children = psutil.Process(driver.pid).children(recursive=True)
                except psutil.NoSuchProcess:
                    children = []
                seen |= {p.pid: p for p in children}
                if ready(children, out):
                    break
                time.sleep(0.1)
            os.kill(driver.pid, sig)
            code = driver.wait(timeout=end_timeout)
        except BaseException:
            driver.kill()
            raise
    end = time.monotonic() + end_timeout
    while time.monotonic() < end and any(_alive(p) for p in seen.values()):
        time.sleep(0.1)
    alive = [p for p in seen.values() if _alive(p)]
    described = []
    for p in alive:
        try:
            described.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            p.kill()
        except psutil.NoSuchProcess:
            pass
    assert not described, f"still running after Ctrl-C: {described}"
    return code, set(seen), log.read_text()


def cmdlines(processes: list[psutil.Process]) -> list[str]:
    out = []
    for p in processes:
        with contextlib.suppress(psutil.Error):
            out.append(" ".join(p.cmdline()))
    return out


#: a ``sitecustomize`` for the run's processes: Park files whose path contains
#: ``$DPRM_TEST_ENDLESS`` are never read (the job sleeps for ever, as a long job would)
SITECUSTOMIZE = """
import os

if os.environ.get("DPRM_TEST_ENDLESS"):
    try:
        import dprm.data.park as park
    except Exception:
        park = None
    if park is not None:
        read = park.read_park_json

        def endless(path):
            if os.environ["DPRM_TEST_ENDLESS"] in str(path):
                import time

                while True:
                    time.sleep(0.2)
            return read(path)

        park.read_park_json = endless
"""


def endless_labels(root: Path) -> dict[str, str]:
    """Environment under which the labels job of the ``mathtrain`` Park file never ends by itself
    (a job cancelled by nobody is still there when the test looks; no slow stage before it)."""
    hooks = root / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {
        "DPRM_TEST_ENDLESS": "mathtrain",
        "PYTHONPATH": os.pathsep.join(
            [str(hooks), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
        ),
    }


def stage_started(out: Path, stage: str) -> bool:
    """``stage`` was submitted (SLURM: OUT/slurm/jobs.json lists its array)."""
    import json

    jobs = out / "slurm" / "jobs.json"
    try:
        arrays = json.loads(jobs.read_text())["arrays"]
    except (OSError, ValueError, KeyError):
        return False
    return any(a["stage"] == stage for a in arrays)
