"""The resumable runner of ``dprm reproduce`` and ``dprm run``: stages of units, run where an
executor says, skipped when ``state.json`` records them with the same fingerprint.

Every stage is a list of :class:`~dprm.runner.units.Unit` objects (one world, one model, one
evaluation, ...). Each unit carries a *fingerprint* of its inputs: the configuration it runs with
and the content hash (or deterministic recipe) of every model and data set it reads. A unit is
skipped only when ``OUT/state.json`` records it with the same fingerprint and its outputs exist;
otherwise it runs again (a changed ``--set`` re-trains a model, and the changed model's content
hash re-runs its evaluation and IAS units). Each unit writes its outputs atomically and is
recorded only after they are complete, so an interrupted run resumes where it stopped. The
paths of a run directory are :class:`~dprm.runner.layout.Layout`'s.

Fingerprints cover contents, not only names: a unit lists the digest of every file it reads
(:meth:`Pipeline.reads`), so labels changed in place re-run what reads them, and each finished
unit records the digest of each output it wrote. An output that differs from its record when
the unit would be reused (truncated, edited) is removed and the unit is redone; the run says so.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from dprm.runner.config import RunConfig
from dprm.runner.executors.local import LocalExecutor
from dprm.runner.layout import Layout
from dprm.runner.state import State
from dprm.runner.units import Executor, Unit


def remove_stale_temporaries(out: Path) -> list[Path]:
    """Remove the ``.NAME.XXXX.tmp`` files and folders of dprm's atomic writers
    (:func:`dprm.io.atomic_path`, :func:`dprm.io.atomic_dir`) under a run directory.

    A writer that finishes renames its temporary onto the final name and one that fails removes
    it, so any left is from a killed process (a figure stage, a worker). Called before a resumed
    run starts: no writer of this run directory is running then.
    """
    stale = sorted(p for p in Path(out).rglob(".*.tmp") if p.name.count(".") >= 3)
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return stale


def _remove_empty_parents(folder: Path, root: Path) -> None:
    """Remove ``folder`` and its ancestors below ``root`` while they are empty."""
    folder = folder.resolve()
    while folder != root and folder.is_relative_to(root):
        try:
            folder.rmdir()
        except OSError:  # not empty (or gone): stop
            return
        folder = folder.parent


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
        prune: at the end of the run (:meth:`prune_unplanned`), remove the outputs and records
            of units no stage of this invocation planned (a recipe that no longer asks for
            them); off for ``reproduce``, whose ``--worlds`` runs part of a grid at a time.
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
        prune: bool = False,
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
        self._changed: dict[str, list[Path]] = {}
        self._reported_reads: set[str] = set()
        self._written: set[str] = set()  # outputs of the units this invocation ran (by name)
        self.prune = prune
        self._planned: set[str] = set()  # keys of the units this invocation's stages listed
        self._planned_outputs: set[str] = set()  # and their outputs (by name)
        self.state.digests.prune()
        if self.layout.state.exists():  # a resume: what an interrupted writer left is garbage
            stale = remove_stale_temporaries(out)
            if stale:
                self.log(
                    f"{command}: removed {len(stale)} temporary file(s) an interrupted run left "
                    f"(e.g. {stale[0].relative_to(out)})"
                )

    def world_dir(self, world: str) -> Path:
        return self.layout.world_dir(world)

    def digest(self, path: Path) -> str | None:
        """The content digest of a file or directory a unit reads (see :class:`FileDigests`)."""
        return self.state.digests.digest(path)

    def reads(self, *paths: Path) -> dict[str, str | None]:
        """``Unit.reads`` of the files and directories a unit reads: name -> content digest."""
        return {self.state.name_of(p): self.digest(p) for p in paths}

    def is_done(self, unit: Unit) -> bool:
        """Recorded with this fingerprint and every output present and as written.

        An output that changed since it was recorded is noted (and said, once): the unit is
        redone, and :meth:`run_stage` removes the changed output first.
        """
        if not self.state.done(unit.key, unit.outputs, unit.fingerprint):
            record = self.state.data["done"].get(unit.key)
            if record is not None and record.get("inputs") != unit.fingerprint:
                self._say_changed_reads(unit, record.get("reads"))
            if record is not None and record.get("inputs") == unit.fingerprint:
                changed = self.state.changed(unit.key, unit.outputs)
                if changed and unit.key not in self._changed:
                    self._changed[unit.key] = changed
                    names = ", ".join(self.state.name_of(p) for p in changed)
                    self.log(
                        f"{self.command}: {unit.key}: output {names} changed since it was "
                        "written (damaged or edited); redoing the unit"
                    )
            return False
        return True

    def _say_changed_reads(self, unit: Unit, before: dict | None) -> None:
        """Say, once per input, that an input a finished unit read changed (content digest).

        An input that another unit of this invocation wrote again is no news (the line named
        what changed first), so one changed input is one line, however far it reaches.
        """
        if not isinstance(before, dict) or not unit.reads:
            return
        said = self._reported_reads | self._written
        for name, now in unit.reads.items():
            if name in before and before[name] != now and name not in said:
                self._reported_reads.add(name)
                self.log(
                    f"{self.command}: input {name} changed since it was read (content digest); "
                    f"redoing the units that read it (first: {unit.key})"
                )

    def _remove_changed(self, unit: Unit) -> None:
        """Remove the changed outputs of a unit about to be redone (only inside the run dir)."""
        root = self.out.resolve()
        for path in self._changed.pop(unit.key, []):
            if not path.resolve().is_relative_to(root):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    def run_stage(self, name: str, units: list[Unit], label: str = "") -> None:
        """Run the units of one stage that are not already done; time the stage."""
        start = time.perf_counter()
        self._planned.update(u.key for u in units)
        self._planned_outputs.update(self.state.name_of(p) for u in units for p in u.outputs)
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
            for unit in todo:
                self._remove_changed(unit)
            if todo:
                self.executor.run(
                    name,
                    todo,
                    lambda unit, seconds, info: self._mark(unit, seconds, info, stats),
                    self._failed,
                    bar,
                )
        stats["seconds"] += time.perf_counter() - start

    def prune_unplanned(self) -> list[str]:
        """Remove the finished units no stage of this invocation listed, and their outputs.

        Called once every stage ran (so every unit the run still asks for is planned): the
        outputs of units a changed recipe no longer has (pools after ``[bon] n = 0``, a dropped
        generator's data) would otherwise stay in the run and in its report. Only paths inside
        the run directory that no planned unit also writes are removed.

        Returns:
            The keys of the units removed.
        """
        root = self.out.resolve()
        gone = sorted(
            k
            for k in self.state.data["done"]
            if k not in self._planned and not k.startswith("report/")
        )
        for key in gone:
            record = self.state.data["done"].pop(key)
            for name in record.get("outputs") or {}:
                if name in self._planned_outputs:
                    continue
                path = Path(name) if Path(name).is_absolute() else self.out / name
                if not path.resolve().is_relative_to(root) or path.resolve() == root:
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                _remove_empty_parents(path.parent, root)
        if gone:
            self.state.save()
            more = f" and {len(gone) - 1} more" if len(gone) > 1 else ""
            self.log(
                f"{self.command}: removed {len(gone)} unit(s) the run no longer asks for, with "
                f"their outputs ({gone[0]}{more})"
            )
        return gone

    def _mark(self, unit: Unit, seconds: float, info: dict, stats: dict) -> None:
        if unit.reads:
            info = info | {"reads": unit.reads}
        self._written.update(self.state.name_of(p) for p in unit.outputs)
        self.state.mark(unit.key, seconds, outputs=unit.outputs, inputs=unit.fingerprint, **info)
        stats["units"] += 1

    def _failed(self, unit: Unit, err: Exception) -> None:
        """Record a failed unit: it is not marked done (a rerun retries it); the report lists it.

        An error whose class says ``refusal`` (a calibrator's collapse guard refusing its map:
        a verdict on the data, which a rerun gives again) is recorded with ``refused``: the
        report lists it apart and it does not fail the run.
        """
        text = f"{type(err).__name__}: {err}".strip()
        refused = bool(getattr(err, "refusal", False))
        self.failures.append(
            {"unit": unit.key, "error": text[:2000]} | ({"refused": True} if refused else {})
        )
        what = "was refused" if refused else "failed"
        self.log(
            f"{self.command}: WARNING: {unit.key} {what} ({text.splitlines()[0][:300]}); continuing without it"
        )

    def unit_fingerprints(self) -> dict[str, list]:
        """(input fingerprint, finish time, output digests) of every finished unit but the report."""
        return {
            k: [v.get("inputs"), v.get("at"), v.get("outputs")]
            for k, v in self.state.data["done"].items()
            if not k.startswith("report/")
        }
