"""What every executor shares: how a unit runs in a worker, how its result is reported, which
units are GPU units and which run in the driver."""

from __future__ import annotations

import os
import time
from typing import Any

from dprm.runner.units import Fail, Record, Unit


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
