"""A unit of work, and the protocol of the executors that run units.

Every stage of a run (``dprm reproduce``, ``dprm run``) is a list of :class:`Unit` objects (one
world, one model, one evaluation, ...); :class:`dprm.runner.pipeline.Pipeline` decides which of
them run (fingerprints, state) and an :class:`Executor` decides where.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dprm.runner.fingerprints import fingerprint


@dataclass
class Unit:
    """One resumable piece of work.

    Attributes:
        key: stable name, ``stage/world/...``.
        outputs: files ``run()`` writes (all must exist for the unit to count as done).
        run: the work; returns a dict of extra facts to record (or None).
        inputs: what the result depends on (config, content hashes of models and data sets it
            reads); its fingerprint is recorded and compared on resume.
        world: the world whose synthetic data ``run`` reads, if ``needs_world``.
        parallel: ``run`` is picklable and may go to a worker process (``--jobs``).
        resources: what one run needs from an executor: ``{"gpus": 1}`` marks a GPU unit
            (model engines, one per worker); empty = a CPU unit.
        reads: the content digest of every file or directory ``run`` reads (path -> digest,
            :meth:`dprm.runner.pipeline.Pipeline.reads`), part of the fingerprint: data changed
            in place re-runs the unit even when every setting and path is the same.
    """

    key: str
    outputs: list[Path]
    run: Callable[[], Any]
    inputs: dict[str, Any] = field(default_factory=dict)
    world: str | None = None
    needs_world: bool = True
    parallel: bool = False
    resources: dict[str, Any] = field(default_factory=dict)
    reads: dict[str, str | None] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.inputs | {"reads": self.reads} if self.reads else self.inputs)


#: ``record(unit, seconds, info)`` and ``fail(unit, error)``: how an executor reports back
Record = Callable[[Unit, float, dict], None]
Fail = Callable[[Unit, Exception], None]


class Executor(Protocol):
    """Runs the not-yet-done units of one stage and reports each as it finishes.

    The runner decides *what* runs (fingerprints, state, stage order); an executor only decides
    *where*: in this process, in worker processes, on a Ray cluster or as SLURM jobs. Each
    finished unit is reported with ``record`` (the runner then marks it done in state.json), each
    failed one with ``fail`` (not marked: a rerun retries it).
    """

    name: str

    def run(self, stage: str, units: list[Unit], record: Record, fail: Fail, bar: Any) -> None: ...
