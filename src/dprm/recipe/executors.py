"""Where a recipe's units run: ``local``, ``ray`` or ``slurm`` (a registry, loaded lazily).

Every executor implements :class:`dprm.report.runner.Executor` (``run(stage, units, record,
fail, bar)``) plus ``name``, ``default_shards`` (shards per GPU stage when the recipe says 0)
and ``close()``. The runner decides what runs; an executor decides where:

- ``local`` (:class:`LocalRecipeExecutor`): this machine. GPU units (``resources["gpus"]``) go
  to one worker process per visible GPU (each pinned to its GPU, keeping its engine loaded) when
  there are several GPUs, else run here; CPU units run here.
- ``ray`` (:mod:`dprm.recipe.ray_executor`): GPU units on a pool of engine actors, CPU units as
  Ray tasks; needs the ``[ray]`` extra.
- ``slurm`` (:mod:`dprm.recipe.slurm_executor`): one job array per stage through submitit;
  needs the ``[slurm]`` extra.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import time
from pathlib import Path
from typing import Any

from dprm.config import ConfigError
from dprm.recipe.spec import Recipe
from dprm.report.runner import Fail, LocalExecutor, Record, Unit

#: executor name -> "module:factory" (imported only when chosen: Ray and submitit are extras)
EXECUTORS = {
    "local": "dprm.recipe.executors:LocalRecipeExecutor",
    "ray": "dprm.recipe.ray_executor:RayExecutor",
    "slurm": "dprm.recipe.slurm_executor:SlurmExecutor",
}
#: the extra that provides each executor's engine
EXTRAS = {"ray": ("ray", "ray"), "slurm": ("submitit", "slurm")}


def make_executor(name: str, recipe: Recipe, out: Path, **options: Any):
    """Build the executor ``name`` for a recipe run in ``out``.

    Raises:
        ConfigError: an unknown executor, or its extra is not installed.
    """
    if name not in EXECUTORS:
        raise ConfigError(f"unknown executor {name!r}; choose from {sorted(EXECUTORS)}")
    if name in EXTRAS:
        module, extra = EXTRAS[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"--executor {name} needs {module}: pip install 'dprm[{extra}]' (see docs/cluster.md)"
            )
    module, _, factory = EXECUTORS[name].partition(":")
    return getattr(importlib.import_module(module), factory)(recipe, out, **options)


def visible_gpus() -> list[str]:
    """Ids of the GPUs this process may use (``CUDA_VISIBLE_DEVICES`` order), [] on CPU."""
    import torch

    if not torch.cuda.is_available():
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed:
        return [d.strip() for d in listed.split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


def is_gpu_unit(unit: Unit) -> bool:
    """A unit that loads a model engine (generator or PRM)."""
    return "engine" in unit.resources


def is_driver_unit(unit: Unit) -> bool:
    """A unit that runs in the driver process whatever the executor (see stages.DRIVER)."""
    return bool(unit.resources.get("driver"))


def run_in_driver(units: list[Unit], record: Record, fail: Fail, bar: Any) -> None:
    """Run cheap units here, one after the other (merges, question files)."""
    LocalExecutor(1).run("driver", units, record, fail, bar)


def report(unit: Unit, result, record: Record, fail: Fail, bar: Any) -> None:
    """Record a finished unit (``result()`` returns :func:`call`'s dict) or its failure."""
    try:
        info = result()
    except Exception as err:  # noqa: BLE001 - recorded, reported, the run goes on
        cause = getattr(err, "cause", None)  # Ray wraps the worker's exception
        fail(unit, cause if isinstance(cause, Exception) else err)
    else:
        record(unit, info.pop("wall_seconds"), info)
    bar.set_postfix_str(unit.key.split("/", 1)[-1][:60], refresh=False)
    bar.update()


def _pin(queue) -> None:
    """Worker initializer: take one GPU id for the life of the process."""
    os.environ["CUDA_VISIBLE_DEVICES"] = queue.get()


class UnitError(RuntimeError):
    """A unit failed in a worker: its error type and message, in a form any engine can ship back
    (some library errors take several arguments and cannot be rebuilt on the other side)."""


def call(run) -> Any:
    """Run one unit's work in a worker (process, actor, job); time it and say where it ran."""
    import socket

    t0 = time.perf_counter()
    try:
        info = run() or {}
    except Exception as err:
        raise UnitError(f"{type(err).__name__}: {err}") from None
    where = {"host": socket.gethostname(), "pid": os.getpid()}
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        where["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return info | where | {"wall_seconds": round(time.perf_counter() - t0, 3)}


class LocalRecipeExecutor:
    """One machine: all its GPUs (one worker per GPU, shards spread over them) or the CPU."""

    name = "local"

    def __init__(self, recipe: Recipe, out: Path, jobs: int = 1):
        self.gpus = visible_gpus()
        self.cpu = LocalExecutor(jobs)
        self.default_shards = max(1, len(self.gpus))
        self._pool = None

    def run(self, stage: str, units: list[Unit], record: Record, fail: Fail, bar: Any) -> None:
        gpu_units = [u for u in units if is_gpu_unit(u)]
        if len(self.gpus) > 1 and len(gpu_units) > 1:
            self._run_on_gpus(gpu_units, record, fail, bar)
            units = [u for u in units if not is_gpu_unit(u)]
        if not gpu_units and not all(is_driver_unit(u) for u in units):
            from dprm.recipe import engines

            engines.release()  # a CPU stage (not merges): no engine is needed any more here
        self.cpu.run(stage, units, record, fail, bar)

    def _run_on_gpus(self, units: list[Unit], record: Record, fail: Fail, bar: Any) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            queue = ctx.Manager().Queue()
            for gpu in self.gpus:
                queue.put(gpu)
            self._pool = ProcessPoolExecutor(
                len(self.gpus), mp_context=ctx, initializer=_pin, initargs=(queue,)
            )
        started = {self._pool.submit(call, u.run): u for u in units}
        for future in as_completed(started):
            report(started[future], future.result, record, fail, bar)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
