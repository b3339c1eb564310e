"""The ``[executor.ray]`` and ``[executor.slurm]`` tables of a recipe: where its units run (the
executors themselves are :data:`dprm.runner.executors.EXECUTORS`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dprm.config import in_range


@dataclass(frozen=True)
class RaySection:
    """Ray executor: ``address`` ``""`` starts a local instance, ``"auto"`` joins ``ray start``."""

    address: str = ""
    cpus_per_task: float = in_range(1.0, gt=0)
    max_retries: int = in_range(3, ge=0)
    #: engines (actors) per GPU stage (0: as many as the cluster's GPUs allow, at least 1)
    workers: int = in_range(0, ge=0)


@dataclass(frozen=True)
class SlurmSection:
    """SLURM executor (submitit): resources of one array task (a GPU-stage task also gets the
    ``gpus`` of its generator or PRM, rounded up)."""

    partition: str = ""
    account: str = ""
    time_min: int = in_range(240, ge=1)
    cpus_per_task: int = in_range(8, ge=1)
    mem_gb: int = in_range(64, ge=1)
    array_parallelism: int = in_range(64, ge=1)
    #: submitit's job folder (logs, pickled tasks), relative to the run directory
    folder: str = "slurm"
    #: "" = SLURM (``sbatch`` must be on PATH); "local" = submitit's local executor, every task
    #: a process on this machine (tests, dry runs): never chosen silently
    cluster: str = ""


@dataclass(frozen=True)
class ExecutorSection:
    ray: RaySection = field(default_factory=RaySection)
    slurm: SlurmSection = field(default_factory=SlurmSection)
