"""The Ray executor: GPU units on a pool of engine actors, CPU units as Ray tasks.

- **GPU stages** (generate, rollout, embed shards): a pool of :class:`EngineWorker` actors, each
  with ``gpus`` GPUs of its ``[[generators]]`` / ``[[prms]]`` table (``tensor_parallel_size``
  GPUs for a vLLM replica). An actor keeps the engine it loaded (:mod:`dprm.runner.engines`), so
  shards of the same model reuse it. Shards are handed out one at a time to whichever actor is
  free: the work balances itself across the cluster.
- **CPU stages** (Park labels, train, evaluate, IAS): Ray tasks of ``cpus_per_task`` CPUs;
  the engine actors are released first. Merges of shards and question files run in the driver
  (cheap, and the engine actors stay up from generation to rollouts).
- **Faults**: actors restart (``max_restarts=-1``) and a call lost with its actor is retried
  (``max_task_retries``); tasks are retried (``max_retries``). A retried unit resumes from its
  finished parts, and parts and outputs are written atomically under fixed names, so an output
  is written once: no holes, no duplicates (merges check the keys).
- **Progress**: one bar per stage in the driver (units done / total) and the Ray dashboard.
- **Interrupts**: Ctrl-C (or SIGTERM) of the driver cancels its tasks (``ray.cancel``, forced),
  kills its actors and shuts down the local instance it started: no worker outlives the run.

Connects to an existing cluster (``--address auto`` after ``ray start``, or
``[executor.ray] address``) or starts a local instance.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Any

import ray

from dprm.runner.executors.base import call, is_driver_unit, is_gpu_unit, report
from dprm.runner.executors.local import run_in_driver
from dprm.runner.units import Fail, Record, Unit


class EngineWorker:
    """A Ray actor that runs units and keeps one loaded engine between them."""

    def run(self, work) -> dict:
        return call(work)

    def pid(self) -> int:
        return os.getpid()


class RayExecutor:
    """Runs a recipe's units on Ray (see the module docstring).

    Args:
        recipe: the recipe (its ``[executor.ray]`` table).
        out: the run directory (unused: outputs are on a shared file system).
        address: cluster address (overrides the recipe's; ``None``: the recipe's, else a local
            instance is started).
        num_cpus: CPUs of a local instance started here (default: all).
    """

    name = "ray"

    def __init__(
        self, recipe: Any, out: Path, address: str | None = None, num_cpus: int | None = None
    ):
        self.section = recipe.executor.ray
        address = address if address is not None else (self.section.address or None)
        self._owns = not ray.is_initialized()
        if self._owns:
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address is None and num_cpus is not None:
                options["num_cpus"] = num_cpus
            ray.init(address=address, **options)
        resources = ray.cluster_resources()
        self.cluster_gpus = float(resources.get("GPU", 0.0))
        self.cluster_cpus = float(resources.get("CPU", 1.0))
        self.default_shards = max(1, int(self.cluster_gpus) or int(self.cluster_cpus))
        self._actors: dict[float, list] = {}
        self._inflight: set = set()  # object refs of tasks not yet collected

    # ------------------------------------------------------------------ actors
    def _pool_size(self, gpus: float) -> int:
        if self.section.workers:
            return self.section.workers
        if gpus > 0:
            return max(1, int(self.cluster_gpus // gpus))
        return max(1, int(self.cluster_cpus // self.section.cpus_per_task))

    def actors(self, gpus: float, wanted: int) -> list:
        """Up to ``wanted`` engine actors with ``gpus`` GPUs each (kept between stages)."""
        pool = self._actors.setdefault(gpus, [])
        size = min(self._pool_size(gpus), max(1, wanted))
        worker = ray.remote(EngineWorker).options(
            num_cpus=self.section.cpus_per_task,
            num_gpus=gpus,
            max_restarts=-1,
            max_task_retries=self.section.max_retries,
        )
        while len(pool) < size:
            pool.append(worker.remote())
        return pool[:size]

    def release_actors(self) -> None:
        """Kill every engine actor (their GPUs and CPUs go back to the cluster)."""
        for pool in self._actors.values():
            for actor in pool:
                ray.kill(actor)
        self._actors.clear()

    # ------------------------------------------------------------------ run
    def run(self, stage: str, units: list[Unit], record: Record, fail: Fail, bar: Any) -> None:
        try:
            self._run(units, record, fail, bar)
        except BaseException:  # Ctrl-C, SIGTERM, an error here: nothing keeps running
            self.cancel()
            raise

    def cancel(self) -> None:
        """Cancel every task in flight (forced: their worker processes end) and kill the actors.

        On a local instance this driver started, the tasks are left to ``close()``'s shutdown,
        which ends every worker: a forced cancel racing with a task that is just finishing
        aborts the driver in Ray 2.60 ("Tried to complete task that was not pending"), and an
        aborted driver cannot shut its instance down.
        """
        if self._owns:
            self._inflight.clear()
        for ref in list(self._inflight):
            # an actor call cannot be force-cancelled (ValueError): its actor is killed below
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        self._inflight.clear()
        self.release_actors()

    def _run(self, units: list[Unit], record: Record, fail: Fail, bar: Any) -> None:
        gpu_units = sorted(
            (u for u in units if is_gpu_unit(u)), key=lambda u: u.resources["engine"]
        )
        run_in_driver([u for u in units if is_driver_unit(u)], record, fail, bar)
        cpu_units = [u for u in units if not is_gpu_unit(u) and not is_driver_unit(u)]
        by_gpus: dict[float, list[Unit]] = {}
        for unit in gpu_units:
            by_gpus.setdefault(float(unit.resources.get("gpus", 0)), []).append(unit)
        for gpus, todo in by_gpus.items():
            self._run_on_actors(self.actors(gpus, len(todo)), todo, record, fail, bar)
        if cpu_units:
            self.release_actors()  # engines are not needed by CPU work; free their resources
            task = ray.remote(call).options(
                num_cpus=self.section.cpus_per_task, max_retries=self.section.max_retries
            )
            inflight = {task.remote(u.run): u for u in cpu_units}
            self._inflight |= set(inflight)
            self._collect(inflight, record, fail, bar)

    def _run_on_actors(self, actors: list, units: list[Unit], record, fail, bar) -> None:
        """Hand units to free actors one at a time until all are done (dynamic balancing)."""
        pending, idle = list(units), list(actors)
        inflight: dict = {}
        busy: dict = {}
        while pending or inflight:
            while pending and idle:
                actor, unit = idle.pop(0), pending.pop(0)
                ref = actor.run.remote(unit.run)
                inflight[ref], busy[ref] = unit, actor
                self._inflight.add(ref)
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                self._inflight.discard(ref)
                report(inflight.pop(ref), functools.partial(ray.get, ref), record, fail, bar)
                idle.append(busy.pop(ref))

    def _collect(self, inflight: dict, record, fail, bar) -> None:
        while inflight:
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                self._inflight.discard(ref)
                report(inflight.pop(ref), functools.partial(ray.get, ref), record, fail, bar)

    def close(self) -> None:
        self.release_actors()
        if self._owns:
            started = _ray_descendants()
            ray.shutdown()
            _end(started)  # agents of the local instance may outlive its raylet for a while


def _ray_descendants() -> list:
    """This process's descendants that belong to Ray (GCS, raylet, agents, workers)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with Ray
        return []
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "ray" in " ".join(process.cmdline()) or process.name().startswith("ray"):
                found.append(process)
        except psutil.Error:
            continue
    return found


def _end(processes: list, grace_s: float = 5.0) -> None:
    """Wait for ``processes`` to end after ``ray.shutdown()``; terminate, then kill, the rest."""
    if not processes:
        return
    import psutil

    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(alive, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
