"""``dprm run RECIPE.toml``: a recipe's data stages, then the stages and report of ``reproduce``.

One machinery for both commands: :func:`dprm.orchestrate.reproduce.run_world_stages` runs the
recipe's real-data stages (:class:`dprm.recipe.stages.RecipeStages`) and then the same train /
evaluate / IAS stages (:data:`dprm.orchestrate.stages.MODEL_STAGES`) on the worlds they wrote;
:func:`dprm.orchestrate.reproduce.finish_run` writes tables, figures, ``results.json`` and
``report.md``. The executor decides only where units run (:mod:`dprm.runner.executors`).

The run directory also holds ``recipe.json``: the resolved recipe, the dprm version and the
executor (rewritten by every invocation; the fingerprints in ``state.json`` decide what reruns).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from dprm.io import write_json
from dprm.orchestrate.reproduce import Outcome, finish_run, run_world_stages
from dprm.orchestrate.stages import MODEL_STAGES
from dprm.recipe.spec import Recipe
from dprm.recipe.stages import RecipeStages, world_data
from dprm.runner.config import REAL_DATA, RunConfig, config_dict
from dprm.runner.executors import make_executor
from dprm.runner.pipeline import Pipeline
from dprm.runner.units import Executor


def run_config(recipe: Recipe, jobs: int = 1) -> RunConfig:
    """The report's run configuration of a recipe (its worlds, calibrators, IAS settings)."""
    return RunConfig(
        grid=f"recipe:{recipe.run.name}",
        generators=[g.name for g in recipe.generators],
        prms=[p.name for p in recipe.prms],
        size=REAL_DATA,
        seeds=list(range(recipe.calibrators.seeds)),
        methods=list(recipe.calibrators.methods),
        overrides={m: dict(v) for m, v in recipe.calibrators.overrides.items()},
        keep_worlds=True,
        jobs=jobs,
        beta=recipe.ias.beta,
        mc_trials=recipe.ias.mc_trials,
        ias_rules=list(recipe.ias.rules),
        vote_trials=recipe.ias.vote_trials,
        ias_sequential=recipe.ias.sequential,
        tune_trials=recipe.calibrators.tune_trials,
    )


def run_recipe(
    recipe: Recipe,
    out: str | Path | None = None,
    *,
    executor: str | Executor = "local",
    progress: bool = True,
    log: Callable[[str], None] = print,
    executor_options: dict | None = None,
) -> Outcome:
    """Run (or resume) a recipe end to end; the report is written even when units fail.

    Args:
        recipe: the loaded recipe (:func:`dprm.recipe.spec.load_recipe`).
        out: run directory (default: the recipe's ``[run] out``).
        executor: ``local``, ``ray`` or ``slurm``, or an executor object (tests, benchmarks).
        progress: progress bars.
        log: warnings and the summary.
        executor_options: extra keyword arguments of the executor (e.g. Ray ``address``).

    Returns:
        The report path and the failed units (rerun the same command to retry them).
    """
    out = Path(out if out is not None else recipe.run.out).absolute()
    started = time.perf_counter()
    # the executor first: one that cannot run here (no SLURM, no Ray) says so before any work
    runner = (
        make_executor(executor, recipe, out, **(executor_options or {}))
        if isinstance(executor, str)
        else executor
    )
    try:
        return _run(recipe, out, runner, started, progress, log)
    finally:
        runner.close()  # also on Ctrl-C: cancels nothing left, shuts down what it started


def _run(recipe: Recipe, out: Path, runner, started: float, progress: bool, log) -> Outcome:
    from dprm import __version__

    out.mkdir(parents=True, exist_ok=True)
    config = run_config(recipe)
    worlds = recipe.worlds
    write_json(
        out / "recipe.json",
        {
            "recipe": recipe.to_dict() | {"run": recipe.to_dict()["run"] | {"out": str(out)}},
            "dprm": __version__,
            "executor": runner.name,
        },
    )
    pipe = Pipeline(
        out,
        config,
        progress,
        log,
        executor=runner,
        world_data={w: world_data(recipe, w) for w in worlds},
        command="dprm run",
        prune=True,  # outputs the recipe no longer asks for leave the run and its report
    )
    resumed = pipe.layout.run_record.exists()
    shards = recipe.run.shards or runner.default_shards
    model_stages = MODEL_STAGES if recipe.bon.n > 0 else MODEL_STAGES[:2]
    run_world_stages(pipe, [worlds], RecipeStages(recipe, shards).world_stages() + model_stages)
    summary = config_dict(config) | {"recipe": recipe.to_dict()}
    return finish_run(pipe, started=started, resumed=resumed, summary_config=summary)
