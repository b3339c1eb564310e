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
timed-out task is requeued by submitit and resumes from its finished parts. ``OUT/slurm/jobs.json``
lists the arrays submitted (stage, job ids, resources, the stage it runs after); submitit's logs
are in ``OUT/slurm/`` (``[executor.slurm] folder``).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import submitit

from dprm.io import write_json
from dprm.runner.executors.base import call, is_driver_unit, is_gpu_unit, report, run_in_driver
from dprm.runner.units import Fail, Record, Unit


class UnitTask(submitit.helpers.Checkpointable):
    """One unit as a SLURM task; requeued with the same work on pre-emption or timeout."""

    def __init__(self, work):
        self.work = work

    def __call__(self) -> dict:
        return call(self.work)


class SlurmExecutor:
    """Runs a recipe's units as SLURM job arrays (see the module docstring).

    Args:
        recipe: the recipe (its ``[executor.slurm]`` table).
        out: the run directory (submitit's folder is under it).
        cluster: submitit cluster (None: detect SLURM; ``"local"`` / ``"debug"``: submitit's
            local executors, for tests and dry runs on one machine).
        poll_s: seconds between checks of running jobs.
    """

    name = "slurm"
    default_shards = 8

    def __init__(self, recipe: Any, out: Path, cluster: str | None = None, poll_s: float = 5.0):
        self.section = recipe.executor.slurm
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
        groups: dict[int, list[Unit]] = {}
        for unit in [u for u in units if not is_driver_unit(u)]:
            gpus = math.ceil(float(unit.resources.get("gpus", 0))) if is_gpu_unit(unit) else 0
            groups.setdefault(gpus, []).append(unit)
        running: dict[Any, Unit] = {}
        for gpus, group in sorted(groups.items()):
            params = self.parameters(stage, gpus)
            self.executor.update_parameters(**params)
            with self.executor.batch():
                jobs = [self.executor.submit(UnitTask(u.run)) for u in group]
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

    def close(self) -> None:
        """Nothing to release: finished jobs hold no resources."""
