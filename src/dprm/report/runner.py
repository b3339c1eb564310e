"""The resumable runner of ``dprm reproduce``: units, their state, fingerprints and the run's layout.

Every stage is a list of :class:`Unit` objects (one world, one model, one evaluation, ...). Each
unit carries a *fingerprint* of its inputs: the configuration it runs with and the content hash
(or deterministic recipe) of every model and data set it reads. A unit is skipped only when
``OUT/state.json`` records it with the same fingerprint and its outputs exist; otherwise it runs
again (a changed ``--set`` re-trains a model, and the changed model's content hash re-runs its
evaluation and IAS units). Each unit writes its outputs atomically and is recorded only after
they are complete, so an interrupted run resumes where it stopped.

Layout of OUT (:class:`Layout` is the only place that knows these paths)::

    state.json  run.json  report.md  results.json
    worlds/{gen}__{prm}/{train,id,ood}/{calib,bon}        (synth; deleted after use for ``paper``)
    models/{gen}__{prm}/{method}/seed{s}/                 (calibrator directories)
    eval/{gen}__{prm}/{method}/seed{s}.json               (metrics + curves per split)
    ias/{gen}__{prm}/{split}/{method}/seed{s}/            (``dprm ias`` outputs: ias_full.csv, ...)
    tables/  figures/
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

from dprm.io import read_json, write_json
from dprm.report.grid import RunConfig, config_dict

#: the reference "method" of the IAS stage (Base and the synthetic truth, plus plain best-of-n)
REFERENCE = "_reference"


def fingerprint(obj: Any) -> str:
    """A short, stable hash of a JSON-able object."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def content_hash(directory: Path) -> str:
    """SHA-256 (16 hex digits) of every file of a directory (names and bytes, sorted)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Layout:
    """The on-disk layout of a run directory (see the module docstring)."""

    out: Path

    def world_dir(self, world: str) -> Path:
        return self.out / "worlds" / world

    def model_dir(self, world: str, method: str, seed: int) -> Path:
        return self.out / "models" / world / method / f"seed{seed}"

    def eval_path(self, world: str, method: str, seed: int) -> Path:
        return self.out / "eval" / world / method / f"seed{seed}.json"

    def ias_dir(self, world: str, split: str, method: str, seed: int) -> Path:
        return self.out / "ias" / world / split / method / f"seed{seed}"

    @property
    def state(self) -> Path:
        return self.out / "state.json"

    @property
    def run_record(self) -> Path:
        return self.out / "run.json"

    @property
    def report(self) -> Path:
        return self.out / "report.md"

    @property
    def results(self) -> Path:
        return self.out / "results.json"

    @property
    def tables(self) -> Path:
        return self.out / "tables"

    @property
    def figures(self) -> Path:
        return self.out / "figures"


# ----------------------------------------------------------------------------- state
class State:
    """``state.json``: completed units (key -> record with fingerprint), written atomically."""

    def __init__(self, out: Path):
        self.path = Layout(out).state
        self.data: dict[str, Any] = (
            read_json(self.path) if self.path.exists() else {"version": 2, "done": {}}
        )

    def done(self, key: str, outputs: list[Path], inputs: str | None = None) -> bool:
        """Recorded, with the same input fingerprint (when given), and every output present."""
        record = self.data["done"].get(key)
        if record is None or (inputs is not None and record.get("inputs") != inputs):
            return False
        return all(p.exists() for p in outputs)

    def mark(self, key: str, seconds: float, **extra) -> None:
        self.data["done"][key] = {
            "seconds": round(seconds, 3),
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **extra,
        }
        write_json(self.path, self.data)


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
    """

    key: str
    outputs: list[Path]
    run: Callable[[], Any]
    inputs: dict[str, Any] = field(default_factory=dict)
    world: str | None = None
    needs_world: bool = True
    parallel: bool = False
    resources: dict[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.inputs)


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
        with ProcessPoolExecutor(max_workers=min(self.jobs, len(units)), mp_context=ctx) as pool:
            started = {pool.submit(u.run): (u, time.perf_counter()) for u in units}
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


class Pipeline:
    """Runs units stage by stage with a progress bar per stage and per-stage timing.

    Args:
        out: the run directory.
        config: what decides the outputs of the train / evaluate / IAS stages.
        progress: progress bars.
        log: where warnings and the summary go.
        executor: where units run (default :class:`LocalExecutor` with ``config.jobs``).
        world_data: world -> fingerprint of its data, for worlds that are not synthetic (a
            recipe's real-data worlds); synthetic worlds are fingerprinted by name and size.
        command: the command named in messages.
    """

    def __init__(
        self,
        out: Path,
        config: RunConfig,
        progress: bool = True,
        log: Callable[[str], None] = print,
        executor: Executor | None = None,
        world_data: dict[str, Any] | None = None,
        command: str = "dprm reproduce",
    ):
        self.out, self.config, self.progress, self.log = out, config, progress, log
        self.executor = executor if executor is not None else LocalExecutor(config.jobs)
        self.world_data = dict(world_data or {})
        self.command = command
        self.layout = Layout(out)
        self.state = State(out)
        self.timing: dict[str, dict[str, float]] = {}
        self.failures: list[dict[str, str]] = []
        self.reused: list[str] = []

    def world_dir(self, world: str) -> Path:
        return self.layout.world_dir(world)

    def is_done(self, unit: Unit) -> bool:
        return self.state.done(unit.key, unit.outputs, unit.fingerprint)

    def run_stage(self, name: str, units: list[Unit], label: str = "") -> None:
        """Run the units of one stage that are not already done; time the stage."""
        start = time.perf_counter()
        todo = [u for u in units if not self.is_done(u)]
        self.reused += [u.key for u in units if u not in todo]
        stats = self.timing.setdefault(name, {"seconds": 0.0, "units": 0, "skipped": 0})
        stats["skipped"] += len(units) - len(todo)
        with tqdm(
            total=len(units),
            initial=len(units) - len(todo),
            desc=f"{name}{label}",
            unit="job",
            disable=not self.progress,
            leave=True,
        ) as bar:
            if todo:
                self.executor.run(
                    name,
                    todo,
                    lambda unit, seconds, info: self._mark(unit, seconds, info, stats),
                    self._failed,
                    bar,
                )
        stats["seconds"] += time.perf_counter() - start

    def _mark(self, unit: Unit, seconds: float, info: dict, stats: dict) -> None:
        self.state.mark(unit.key, seconds, inputs=unit.fingerprint, **info)
        stats["units"] += 1

    def _failed(self, unit: Unit, err: Exception) -> None:
        """Record a failed unit: it is not marked done (a rerun retries it); the report lists it."""
        text = f"{type(err).__name__}: {err}".strip()
        self.failures.append({"unit": unit.key, "error": text[:2000]})
        self.log(
            f"{self.command}: WARNING: {unit.key} failed ({text.splitlines()[0][:300]}); continuing without it"
        )

    def unit_fingerprints(self) -> dict[str, list]:
        """(input fingerprint, finish time) of every finished unit except the report."""
        return {
            k: [v.get("inputs"), v.get("at")]
            for k, v in self.state.data["done"].items()
            if not k.startswith("report/")
        }


# ----------------------------------------------------------------------------- run record
def versions() -> dict[str, str]:
    import numpy
    import pandas
    import torch

    from dprm.version import __version__

    out = {
        "dprm": __version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pandas": pandas.__version__,
        "python": platform.python_version(),
    }
    try:
        import matplotlib

        out["matplotlib"] = matplotlib.__version__
    except ImportError:  # pragma: no cover
        pass
    return out


def resolved_train_configs(layout: Layout, config: RunConfig) -> dict[str, Any]:
    """The resolved hyper-parameters of each method, read back from its first saved model."""
    configs = {}
    for method in config.methods:
        for world in config.worlds:
            path = layout.model_dir(world, method, config.seeds[0]) / "config.json"
            if path.exists():
                configs[method] = read_json(path).get("config", {})
                break
    return configs


def _by_stage(unit_seconds: dict[str, float]) -> dict[str, float]:
    """Seconds of all recorded units per stage (the key's first component), all invocations."""
    out: dict[str, float] = {}
    for key, seconds in unit_seconds.items():
        stage = key.split("/", 1)[0]
        out[stage] = round(out.get(stage, 0.0) + float(seconds), 2)
    return out


def run_record(pipe: Pipeline, *, started_at: float, resumed: bool) -> dict[str, Any]:
    """The content of ``run.json``: configuration, versions, timing, reused units."""
    unit_seconds = {k: v["seconds"] for k, v in pipe.state.data["done"].items()}
    return {
        "config": config_dict(pipe.config),
        "versions": versions(),
        "train_configs": resolved_train_configs(pipe.layout, pipe.config),
        "wall_time_s": round(time.perf_counter() - started_at, 2),
        "stage_timing": pipe.timing,
        "unit_seconds_total": round(sum(unit_seconds.values()), 2),
        "unit_seconds_by_stage": _by_stage(unit_seconds),
        "reused_units": sorted(pipe.reused),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "resumed": resumed,
    }


def write_run_record(layout: Layout, run: dict[str, Any]) -> None:
    """Write ``run.json`` (the only writer of that file; strict JSON)."""
    write_json(layout.run_record, run, allow_nan=False)
