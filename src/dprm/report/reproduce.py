"""``dprm reproduce``: synth -> train -> evaluate -> ias -> tables, figures, report.md.

The orchestration only: :mod:`dprm.report.grid` resolves what to run, :mod:`dprm.report.stages`
builds the units of each stage, :mod:`dprm.report.runner` runs them resumably (state,
fingerprints, the on-disk layout, run.json) and :mod:`dprm.report.document` renders the results.
Worlds are processed in batches: ``demo`` keeps all its (small) worlds and runs stage by stage
over all of them; ``paper`` handles one world at a time and deletes its synthetic data (~700 MB at
3584 dims) once its evaluations and IAS sweeps are done (regenerated deterministically if a
later run needs it again).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dprm.io import read_json
from dprm.report import stages
from dprm.report.document import write_outputs
from dprm.report.grid import RunConfig, config_dict
from dprm.report.runner import Pipeline, fingerprint, run_record, write_run_record


@dataclass
class Outcome:
    """What a ``reproduce`` invocation produced: the report and the units that failed."""

    report: Path
    failures: list[dict[str, str]]

    @property
    def ok(self) -> bool:
        return not self.failures


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
    layout = pipe.layout
    resumed = layout.run_record.exists()
    worlds = config.worlds
    batches = [worlds] if config.keep_worlds else [[w] for w in worlds]
    for i, batch in enumerate(batches):
        label = "" if len(batches) == 1 else f" [{i + 1}/{len(batches)} {batch[0]}]"
        for name, make in stages.WORLD_STAGES:
            units = [u for w in batch for u in make(pipe, w)]
            needed = {u.world for u in units if u.needs_world and not pipe.is_done(u)}
            if name != "synth":
                for w in sorted(needed - {None}):
                    stages.ensure_world(pipe, w)
            pipe.run_stage(name, units, label)
        if not config.keep_worlds:
            for w in batch:
                shutil.rmtree(pipe.world_dir(w), ignore_errors=True)
    # the report stage: skipped when no unit's inputs changed since the last complete report
    key = "report/" + fingerprint([config_dict(config), sorted(pipe.unit_fingerprints().items())])
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
        if not pipe.failures:
            pipe.state.mark(key, time.perf_counter() - t0)
    write_run_record(layout, run)
    summary = ", ".join(f"{k} {v['seconds']:.1f}s" for k, v in pipe.timing.items())
    log(f"dprm reproduce: wall time {time.perf_counter() - started:.1f}s ({summary})")
    log(f"report: {layout.report}")
    return Outcome(layout.report, pipe.failures)
