"""Where units run: ``local``, ``ray`` or ``slurm`` (a registry, loaded lazily).

Every executor implements :class:`dprm.runner.units.Executor` (``run(stage, units, record,
fail, bar)``) plus ``name``, ``default_shards`` (shards per GPU stage when the recipe says 0)
and ``close()``. The runner decides what runs; an executor decides where:

- ``local`` (:class:`dprm.runner.executors.local.LocalRecipeExecutor`): this machine. GPU units
  (``resources["gpus"]``) go to one worker process per visible GPU (each pinned to its GPU,
  keeping its engine loaded) when there are several GPUs, else run here; CPU units run here.
- ``ray`` (:mod:`dprm.runner.executors.ray`): GPU units on a pool of engine actors, CPU units as
  Ray tasks; needs the ``[ray]`` extra.
- ``slurm`` (:mod:`dprm.runner.executors.slurm`): one job array per stage through submitit;
  needs the ``[slurm]`` extra.

An executor is built from a recipe (any object with ``executor.ray`` / ``executor.slurm``
tables: the runner does not import :mod:`dprm.recipe`) and the run directory.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

from dprm.config import ConfigError

# re-exported: the preflight and the run import them from here
from dprm.runner.executors.requirements import (  # noqa: F401
    ray_address,
    ray_unreachable,
    slurm_missing,
)

#: executor name -> "module:factory" (imported only when chosen: Ray and submitit are extras)
EXECUTORS = {
    "local": "dprm.runner.executors.local:LocalRecipeExecutor",
    "ray": "dprm.runner.executors.ray:RayExecutor",
    "slurm": "dprm.runner.executors.slurm:SlurmExecutor",
}
#: the extra that provides each executor's engine
EXTRAS = {"ray": ("ray", "ray"), "slurm": ("submitit", "slurm")}


def check_executor(name: str, recipe: Any, **options: Any) -> None:
    """Check, before anything is written, that executor ``name`` can run here.

    Raises:
        ConfigError: an unknown executor, its extra is not installed, (SLURM) no scheduler, or
            (Ray) a cluster address that does not answer.
    """
    if name not in EXECUTORS:
        raise ConfigError(f"unknown executor {name!r}; choose from {sorted(EXECUTORS)}")
    if name in EXTRAS:
        module, extra = EXTRAS[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"--executor {name} needs {module}: pip install 'dprm[{extra}]' (see docs/cluster.md)"
            )
    if name == "slurm":
        from dprm.runner.executors.slurm import resolve_cluster

        resolve_cluster(recipe, options.get("cluster"))
    if name == "ray":
        address = ray_address(recipe, options.get("address"))
        reason = ray_unreachable(address)
        if reason is not None:
            raise ConfigError(
                f"--executor ray: the cluster at {address!r} cannot be joined: {reason}; start "
                "it (`ray start --head`) or fix --address / [executor.ray] address"
            )


def make_executor(name: str, recipe: Any, out: Path, **options: Any):
    """Build the executor ``name`` for a recipe run in ``out``.

    Raises:
        ConfigError: see :func:`check_executor`.
    """
    check_executor(name, recipe, **options)
    module, _, factory = EXECUTORS[name].partition(":")
    return getattr(importlib.import_module(module), factory)(recipe, out, **options)
