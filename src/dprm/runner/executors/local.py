"""This machine: units in this process, in ``jobs`` spawned worker processes, or one worker
process per visible GPU (:class:`LocalRecipeExecutor`, ``dprm run --executor local``)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dprm.runner.executors.base import call, is_driver_unit, is_gpu_unit, report, visible_gpus
from dprm.runner.units import Fail, Record, Unit
from dprm.workers import record_workers
from dprm.workers import terminate_pool as terminate


@dataclass
class LocalExecutor:
    """This machine: units in this process, or ``jobs`` spawned worker processes.

    Units with ``parallel`` set go to the worker processes when ``jobs > 1`` (torch threads are
    split between them by the stage builders); the rest run here, one after the other.
    """

    jobs: int = 1
    name: str = "local"

    def run(self, stage: str, units: list[Unit], record: Record, fail: Fail, bar: Any) -> None:
        parallel = [u for u in units if u.parallel] if self.jobs > 1 else []
        if len(parallel) > 1:
            self._run_parallel(parallel, record, fail, bar)
        else:
            parallel = []
        for unit in units:
            if unit in parallel:
                continue
            bar.set_postfix_str(unit.key.split("/", 1)[-1][:60], refresh=True)
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                info = unit.run()
            except Exception as err:  # noqa: BLE001 - recorded, reported, the run goes on
                fail(unit, err)
            else:
                info = {"cpu_seconds": round(time.process_time() - c0, 3)} | (info or {})
                record(unit, time.perf_counter() - t0, info)
            bar.update()

    def _run_parallel(self, units: list[Unit], record: Record, fail: Fail, bar: Any) -> None:
        """Run picklable units in ``jobs`` spawned worker processes; record each as it finishes."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(max_workers=min(self.jobs, len(units)), mp_context=ctx)
        try:
            started = {pool.submit(u.run): (u, time.perf_counter()) for u in units}
            record_workers(pool)  # a resume after this driver's death ends them
            for future in as_completed(started):
                unit, t0 = started[future]
                try:
                    info = future.result()
                except Exception as err:  # noqa: BLE001
                    fail(unit, err)
                else:
                    info = info or {}
                    seconds = info.pop("wall_seconds", time.perf_counter() - t0)
                    record(unit, seconds, info)
                bar.set_postfix_str(unit.key.split("/", 1)[-1][:60], refresh=False)
                bar.update()
        except BaseException:  # Ctrl-C, SIGTERM: the workers end with the driver
            terminate(pool)
            raise
        pool.shutdown()


def run_in_driver(units: list[Unit], record: Record, fail: Fail, bar: Any) -> None:
    """Run cheap units here, one after the other (merges, question files)."""
    LocalExecutor(1).run("driver", units, record, fail, bar)


def _pin(queue) -> None:
    """Worker initializer: take one GPU id for the life of the process."""
    os.environ["CUDA_VISIBLE_DEVICES"] = queue.get()


class LocalRecipeExecutor:
    """One machine: all its GPUs (one worker per GPU, shards spread over them) or the CPU."""

    name = "local"

    def __init__(self, recipe: Any, out: Path, jobs: int = 1):
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
            from dprm.runner import engines

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
        try:
            started = {self._pool.submit(call, u.run): u for u in units}
            record_workers(self._pool)  # a resume after this driver's death ends them
            for future in as_completed(started):
                report(started[future], future.result, record, fail, bar)
        except BaseException:  # Ctrl-C, SIGTERM: the workers end with the driver
            terminate(self._pool)
            self._pool = None
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
