"""The SLURM executor: one job array per stage and resource kind, submitted through submitit.

The driver (``dprm run --executor slurm``, on a login node or in a small job of its own) walks
the stages like every executor: it submits the not-yet-done units of a stage as one job array
(``executor.batch()``: GPU shards with their engine's GPUs, CPU units without), waits for the
array, records the finished units in ``state.json``, then submits the next stage. Merges of
shards and question files run in the driver itself (seconds of I/O: not worth a queued job). A stage's
array is submitted only after the stage before it finished (its units read that stage's
outputs and, for train / evaluate / IAS, depend on which models exist), which is the dependency
``afterok`` would express, without a job left pending forever behind a failed one.

Every task is a :class:`UnitTask`, a ``submitit.helpers.Checkpointable``: a pre-empted or
timed-out task is requeued by submitit and resumes from its finished parts.

**No scheduler, no silent fallback**: without ``sbatch`` on PATH the executor refuses to start
(submitit would otherwise run every task as a local process) unless the recipe's
``[executor.slurm] cluster = "local"`` (or ``dprm run --slurm-cluster local``) asks for
submitit's local executor (tests, dry runs on one machine). **Interrupts**: Ctrl-C (or SIGTERM)
of the driver cancels every job it submitted and waits for them to end; a task whose driver
dies on the same machine (submitit's local mode) or whose parent process dies ends itself. ``OUT/slurm/jobs.json``
lists the arrays submitted (stage, job ids, resources, the stage it runs after); submitit's logs
are in ``OUT/slurm/`` (``[executor.slurm] folder``).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import submitit

from dprm.config import ConfigError
from dprm.io import write_json
from dprm.runner.executors.base import call, is_driver_unit, is_gpu_unit, report
from dprm.runner.executors.local import run_in_driver
from dprm.runner.executors.requirements import slurm_missing
from dprm.runner.units import Fail, Record, Unit

#: clusters of submitit's AutoExecutor a recipe may name ("" = SLURM)
CLUSTERS = ("slurm", "local", "debug")
#: seconds a cancelled job gets to end before it is terminated, then killed (local mode)
CANCEL_GRACE_S = 5.0


def _watch(driver: tuple[str, int], interval: float = 0.5) -> None:
    """End this task when its parent process dies, or its driver on this machine does.

    A task outlives neither: nobody would record its result (the driver resumes it next time).
    """
    parent = os.getppid()
    host, pid = driver

    def gone(p: int) -> bool:
        try:
            os.kill(p, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    while True:
        time.sleep(interval)
        if os.getppid() != parent or (host == socket.gethostname() and gone(pid)):
            os._exit(1)


class UnitTask(submitit.helpers.Checkpointable):
    """One unit as a SLURM task; requeued with the same work on pre-emption or timeout."""

    def __init__(self, work, driver: tuple[str, int] | None = None):
        self.work = work
        self.driver = driver if driver is not None else (socket.gethostname(), os.getpid())

    def __call__(self) -> dict:
        threading.Thread(target=_watch, args=(self.driver,), daemon=True).start()
        return call(self.work)


def resolve_cluster(recipe: Any, cluster: str | None = None) -> str:
    """The submitit cluster a run asks for, checked before any work (nothing written yet).

    Args:
        recipe: the recipe (its ``[executor.slurm] cluster``).
        cluster: the command line's choice, which wins over the recipe's.

    Raises:
        ConfigError: an unknown cluster, or SLURM asked for on a machine without a scheduler
            (no ``sbatch`` / ``srun`` on PATH): never a silent fallback to local processes.
    """
    cluster = cluster or getattr(recipe.executor.slurm, "cluster", "") or "slurm"
    if cluster not in CLUSTERS:
        raise ConfigError(f"[executor.slurm] cluster = {cluster!r}; expected one of {CLUSTERS}")
    missing = slurm_missing()
    if cluster == "slurm" and missing:
        raise ConfigError(
            f"--executor slurm: no SLURM scheduler on this machine ({' and '.join(missing)} "
            "not on PATH); run the driver on a SLURM login node, or ask for submitit's local "
            'mode ([executor.slurm] cluster = "local" or --slurm-cluster local)'
        )
    return cluster


class SlurmExecutor:
    """Runs a recipe's units as SLURM job arrays (see the module docstring).

    Args:
        recipe: the recipe (its ``[executor.slurm]`` table).
        out: the run directory (submitit's folder is under it).
        cluster: submitit cluster (None: the recipe's ``[executor.slurm] cluster``, default
            SLURM; ``"local"`` / ``"debug"``: submitit's local executors, for tests and dry
            runs on one machine).
        poll_s: seconds between checks of running jobs.

    Raises:
        ConfigError: SLURM is asked for but there is no scheduler here (no ``sbatch``/``srun``).
    """

    name = "slurm"
    default_shards = 8

    def __init__(self, recipe: Any, out: Path, cluster: str | None = None, poll_s: float = 5.0):
        self.section = recipe.executor.slurm
        cluster = resolve_cluster(recipe, cluster)
        self.cluster = cluster
        self.folder = Path(out) / self.section.folder
        self.executor = submitit.AutoExecutor(folder=self.folder / "%j", cluster=cluster)
        self.poll_s = poll_s
        self.arrays: list[dict[str, Any]] = []
        self._previous: str | None = None

    def parameters(self, stage: str, gpus: int) -> dict[str, Any]:
        """submitit parameters of one array (SLURM flags for ``sbatch``)."""
        s = self.section
        params: dict[str, Any] = {
            "name": f"dprm-{stage}",
            "timeout_min": s.time_min,
            "cpus_per_task": s.cpus_per_task,
            "mem_gb": s.mem_gb,
            "gpus_per_node": gpus,
            "slurm_array_parallelism": s.array_parallelism,
        }
        if s.partition:
            params["slurm_partition"] = s.partition
        if s.account:
            params["slurm_account"] = s.account
        return params

    def run(self, stage: str, units: list[Unit], record: Record, fail: Fail, bar: Any) -> None:
        run_in_driver([u for u in units if is_driver_unit(u)], record, fail, bar)
        running: dict[Any, Unit] = {}
        try:
            self._submit_and_wait(stage, units, running, record, fail, bar)
        except BaseException:  # Ctrl-C, SIGTERM, an error here: no job outlives the driver
            self.cancel(list(running))
            raise

    def _submit_and_wait(self, stage, units, running: dict, record, fail, bar) -> None:
        groups: dict[int, list[Unit]] = {}
        for unit in [u for u in units if not is_driver_unit(u)]:
            gpus = math.ceil(float(unit.resources.get("gpus", 0))) if is_gpu_unit(unit) else 0
            groups.setdefault(gpus, []).append(unit)
        driver = (socket.gethostname(), os.getpid())
        for gpus, group in sorted(groups.items()):
            params = self.parameters(stage, gpus)
            self.executor.update_parameters(**params)
            with self.executor.batch():
                jobs = [self.executor.submit(UnitTask(u.run, driver)) for u in group]
            running |= dict(zip(jobs, group, strict=True))
            self.arrays.append({
                "stage": stage, "tasks": len(group), "job_ids": [j.job_id for j in jobs],
                "after": self._previous, "resources": params,
                "units": [u.key for u in group],
            })  # fmt: skip
            write_json(self.folder / "jobs.json", {"arrays": self.arrays})
        if running:
            self._previous = stage
        while running:
            for job in [j for j in running if j.done()]:
                report(running.pop(job), job.result, record, fail, bar)
            if running:
                time.sleep(self.poll_s)

    def cancel(self, jobs: list) -> None:
        """Cancel jobs (``scancel`` on SLURM) and, in local mode, wait until their processes end.

        submitit's local job is a controller process that stops its task on SIGINT (what
        ``job.cancel()`` sends); one that does not end within :data:`CANCEL_GRACE_S` is sent
        SIGTERM (forwarded to its task), then SIGKILL.
        """
        for job in jobs:
            with contextlib.suppress(Exception):  # a job that ended meanwhile, scancel hiccups
                job.cancel(check=False)
        # submitit keeps the controller of a local job as ``_process`` (no public handle)
        processes = [p for p in (getattr(j, "_process", None) for j in jobs) if p is not None]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            deadline = time.monotonic() + CANCEL_GRACE_S
            while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
                time.sleep(0.05)
            alive = [p for p in processes if p.poll() is None]
            if not alive:
                return
            for p in alive:
                p.send_signal(sig)
        for p in processes:
            p.wait(timeout=CANCEL_GRACE_S)

    def close(self) -> None:
        """Nothing to release: finished jobs hold no resources."""
