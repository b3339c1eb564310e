"""Worker pools that end with their driver: an interrupt (Ctrl-C, SIGTERM, SIGHUP) or an error
in the process that started them terminates them now, instead of waiting for their work.

A driver killed outright (SIGKILL, the OOM killer) runs no handler: its workers would keep
running and writing into its run folder. So a run's driver records its workers' pids in the
folder (:func:`recorded_in`, :func:`record_workers`), and the next driver of that folder ends
the live ones before it starts (:func:`end_orphans`).

No dprm import here: the runner's executors and ``dprm tune --jobs`` both use it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def terminate_pool(pool: Any) -> None:
    """Stop a process pool now: pending work cancelled, running workers terminated, then killed.

    ``shutdown()`` alone waits for the running work to finish (minutes for a training); the
    pool's worker processes are only reachable through its ``_processes`` attribute.
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()


@contextlib.contextmanager
def ended_on_exit(pool: Any) -> Iterator[Any]:
    """While active, any exception (``KeyboardInterrupt`` included) terminates ``pool``'s
    workers before it propagates (:func:`terminate_pool`)."""
    try:
        yield pool
    except BaseException:
        terminate_pool(pool)
        raise


# ----------------------------------------------------------------------------- one owner per folder
#: the record, in a run folder, of the worker processes its driver started (pid, create time)
WORKERS_FILE = ".dprm-workers.json"
#: the run folder whose driver this process is (set by :func:`recorded_in`), else None
_RECORD_FOLDER: Path | None = None


@contextlib.contextmanager
def recorded_in(folder: str | os.PathLike) -> Iterator[None]:
    """While active, :func:`record_workers` notes every worker pool's processes in
    ``folder/.dprm-workers.json``, so that a driver resuming the folder after this one died
    (SIGKILL: no handler ran) can end the workers it left (:func:`end_orphans`). The record is
    removed when the block ends normally or by an exception (the workers are gone then)."""
    global _RECORD_FOLDER
    previous, _RECORD_FOLDER = _RECORD_FOLDER, Path(folder)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            (Path(folder) / WORKERS_FILE).unlink()
        _RECORD_FOLDER = previous


def _read_record(path: Path) -> list[dict]:
    try:
        entries = json.loads(path.read_text()).get("workers", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("pid"), int)]


def record_workers(pool: Any) -> None:
    """Add the processes of ``pool`` (a ``ProcessPoolExecutor``) to the driver's record
    (a no-op outside :func:`recorded_in`)."""
    if _RECORD_FOLDER is None:
        return
    import psutil

    path = _RECORD_FOLDER / WORKERS_FILE
    entries = {e["pid"]: e for e in _read_record(path)}
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(psutil.Error, ValueError):
            started = psutil.Process(process.pid).create_time()
            entries[process.pid] = {"pid": process.pid, "create_time": started}
    record = {"driver": os.getpid(), "workers": sorted(entries.values(), key=lambda e: e["pid"])}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record) + "\n")
    os.replace(tmp, path)


def end_orphans(folder: str | os.PathLike, grace: float = 5.0) -> list[int]:
    """End the live workers a dead driver of ``folder`` left (call with the folder's lock held).

    A recorded pid is ended only when the process running under it now started at the recorded
    time (so a pid reused by an unrelated process is left alone), and never this process or its
    ancestors: SIGTERM, then SIGKILL after ``grace`` seconds.

    Returns:
        The pids ended.
    """
    import psutil

    path = Path(folder) / WORKERS_FILE
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    ours = []
    for entry in _read_record(path):
        try:
            process = psutil.Process(entry["pid"])
            if process.pid in mine or abs(process.create_time() - entry["create_time"]) > 0.05:
                continue
        except (psutil.Error, KeyError, TypeError):
            continue
        ours.append(process)
    for process in ours:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(ours, timeout=grace)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=grace)
    with contextlib.suppress(OSError):
        path.unlink()
    return [p.pid for p in ours]
