"""``dprm reproduce``: synth -> train -> evaluate -> ias -> tables, figures, report.md.

The orchestration only: :mod:`dprm.orchestrate.grid` resolves what to run,
:mod:`dprm.orchestrate.stages` lists the units of each stage, :mod:`dprm.runner` runs them
resumably (state, fingerprints, the on-disk layout, run.json) and :mod:`dprm.report.document`
renders the results.
Worlds are processed in batches: ``demo`` keeps all its (small) worlds and runs stage by stage
over all of them; ``paper`` handles one world at a time and deletes its synthetic data (~700 MB at
3584 dims) once its evaluations and IAS sweeps are done (regenerated deterministically if a
later run needs it again).

:func:`run_world_stages` and :func:`finish_run` are the shared machinery: ``dprm run`` (a recipe,
:mod:`dprm.recipe`) runs its real-data stages and then the same train / evaluate / IAS stages
and report through them; synthetic worlds are just another data source.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dprm.io import read_json
from dprm.orchestrate.stages import WORLD_STAGES
from dprm.orchestrate.world_units import ensure_world
from dprm.report.document import write_outputs
from dprm.runner.config import RunConfig, config_dict
from dprm.runner.fingerprints import fingerprint
from dprm.runner.pipeline import Pipeline
from dprm.runner.record import run_record, write_run_record
from dprm.runner.units import Unit


@dataclass
class Outcome:
    """What a ``reproduce`` invocation produced: the report and the units that failed."""

    report: Path
    failures: list[dict[str, str]]

    @property
    def ok(self) -> bool:
        return not self.failures


#: ``(stage name, units of one world)`` pairs, run stage by stage over a batch of worlds
WorldStages = tuple[tuple[str, Callable[[Pipeline, str], list[Unit]]], ...]


def run_world_stages(
    pipe: Pipeline,
    batches: list[list[str]],
    world_stages: WorldStages,
    *,
    prepare: Callable[[Pipeline, str], object] | None = None,
    after_batch: Callable[[Pipeline, list[str]], None] | None = None,
) -> None:
    """Run ``world_stages`` over each batch of worlds (the shared loop of every data source).

    Args:
        pipe: the pipeline (state, executor, layout).
        batches: worlds processed together, batch after batch.
        world_stages: the stages; each builder is called when its stage starts, so it sees the
            outputs of the stages before it.
        prepare: called for each world a unit needs (``needs_world``) and that is not done, before
            every stage but the first (e.g. regenerate a deleted synthetic world).
        after_batch: called with each finished batch (e.g. delete its synthetic worlds).
    """
    for i, batch in enumerate(batches):
        label = "" if len(batches) == 1 else f" [{i + 1}/{len(batches)} {batch[0]}]"
        for position, (name, make) in enumerate(world_stages):
            # work shared by several worlds (a generator's rollouts) is one unit (same key, same work)
            units = list({u.key: u for w in batch for u in make(pipe, w)}.values())
            if prepare is not None and position > 0:
                needed = {u.world for u in units if u.needs_world and not pipe.is_done(u)}
                for w in sorted(needed - {None}):
                    prepare(pipe, w)
            pipe.run_stage(name, units, label)
        if after_batch is not None:
            after_batch(pipe, batch)


def finish_run(pipe: Pipeline, *, started: float, resumed: bool, summary_config: dict) -> Outcome:
    """The report stage: tables, figures, results.json, report.md and run.json.

    Skipped when no unit's inputs changed since the last complete report (``summary_config`` is
    the run's configuration as recorded; a change to it also redoes the report).
    """
    layout = pipe.layout
    if pipe.prune:
        pipe.prune_unplanned()
    key = "report/" + fingerprint([summary_config, sorted(pipe.unit_fingerprints().items())])
    outputs = [layout.report, layout.results, layout.run_record]
    if not pipe.failures and pipe.state.done(key, outputs):
        pipe.timing["report"] = {"seconds": 0.0, "units": 0, "skipped": 1}
        run = read_json(layout.run_record)
        run.update(
            resumed=True,
            last_invocation_s=round(time.perf_counter() - started, 2),
            last_stage_timing=pipe.timing,
            last_reused_units=sorted(pipe.reused),
        )
    else:
        t0 = time.perf_counter()
        run = run_record(pipe, started_at=started, resumed=resumed)
        write_outputs(pipe, run)
        run["wall_time_s"] = round(time.perf_counter() - started, 2)
        pipe.state.data["done"] = {
            k: v for k, v in pipe.state.data["done"].items() if not k.startswith("report/")
        }
        if not pipe.failures:  # run.json is rewritten by every invocation: not verified
            pipe.state.mark(key, time.perf_counter() - t0, outputs=[layout.report, layout.results])
    write_run_record(layout, run)
    summary = ", ".join(f"{k} {v['seconds']:.1f}s" for k, v in pipe.timing.items())
    pipe.log(f"{pipe.command}: wall time {time.perf_counter() - started:.1f}s ({summary})")
    pipe.log(f"report: {layout.report}")
    return Outcome(layout.report, pipe.failures)


def _delete_worlds(pipe: Pipeline, batch: list[str]) -> None:
    for w in batch:
        shutil.rmtree(pipe.world_dir(w), ignore_errors=True)


def reproduce(
    out: str | Path,
    config: RunConfig,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> Outcome:
    """Run (or resume) the whole reproduction; the report is written even when units fail."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    pipe = Pipeline(out, config, progress, log)
    resumed = pipe.layout.run_record.exists()
    worlds = config.worlds
    run_world_stages(
        pipe,
        [worlds] if config.keep_worlds else [[w] for w in worlds],
        WORLD_STAGES,
        prepare=ensure_world,
        after_batch=None if config.keep_worlds else _delete_worlds,
    )
    return finish_run(pipe, started=started, resumed=resumed, summary_config=config_dict(config))
