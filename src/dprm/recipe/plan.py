"""The units ``dprm run`` makes for a recipe, counted without running or reading a model.

``dprm run --dry-run`` prints these counts (:func:`planned_stages`); they follow the unit
builders stage by stage (:class:`dprm.recipe.stages.RecipeStages` and
:data:`dprm.orchestrate.stages.MODEL_STAGES`), and ``tests/recipe`` compares them with the
units a real run of the example recipes makes:

* **questions**: one unit per split that needs questions (every split when the first pass is
  generated; else the splits with a BoN pool, :func:`~dprm.recipe.fingerprints.pool_splits`);
* **generate**: per generator, the first pass of every split (``source = "generate"``) and a
  pool per pool split (``train`` too with ``[bon] train``), each cut into
  ``min(shards, questions of the split)`` shards, plus a merge unit where there are two or more;
* **labels**: rollouts of every split per generator (sharded the same way), or Park's released
  labels (one unit per generator and split);
* **embed**: per world, the calibration set of every split and the BoN set of every pool split,
  sharded;
* **train**: per world, method and seed; **evaluate**: those plus the raw PRM score (``base``)
  per world; **ias**: the same per ``id`` / ``ood`` pool (with pools only); **report**: one.

A training that fails at run time has no evaluate / IAS units: the counts are those of a run in
which every unit succeeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dprm.io import DataError
from dprm.llm.questions import NAMED_SETS, PACKAGED_SETS, packaged_path
from dprm.recipe.fingerprints import pool_splits
from dprm.recipe.spec import SPLITS, Recipe
from dprm.runner.layout import IAS_SPLITS

#: questions of the named sets (dprm.llm.questions.NAMED_SETS; math500train = 7500 / 15)
NAMED_SET_QUESTIONS = {
    "math500": 500,
    "math": 5000,
    "math-park": 500,
    "math500train": 500,
    "aime24": 30,
    "aime2024": 30,
    "aime25": 30,
    "aime2025": 30,
}
#: shards per GPU stage of an executor when ``[run] shards = 0`` and the machine cannot tell
#: (SLURM's default; Ray's is one per cluster GPU, known once connected: counted as 1 here)
EXECUTOR_SHARDS = {"slurm": 8, "ray": 1}


@dataclass(frozen=True)
class PlannedStage:
    """One stage of the plan: the runner's stage name, its unit count, what it shows."""

    name: str
    units: int
    label: str
    runs_on: str


def split_questions(recipe: Recipe, split: str) -> int:
    """Questions of one split after ``[questions] every`` and ``limit`` (per set, as
    :func:`dprm.recipe.bodies.make_questions` applies them); 0 for a file that is not there."""
    total = 0
    for name in getattr(recipe.questions, split):
        if name in NAMED_SET_QUESTIONS:
            count = NAMED_SET_QUESTIONS[name]
        elif name in NAMED_SETS:  # a packaged set without a listed size: count its rows
            count = _packaged_rows(name)
        else:
            count = _file_rows(name)
        count = -(-count // recipe.questions.every)
        total += min(count, recipe.questions.limit) if recipe.questions.limit else count
    return total


def _file_rows(name: str) -> int:
    from dprm.llm.questions import read_records

    if not Path(name).is_file():
        return 0
    try:
        return len(read_records(name))
    except (DataError, OSError, ValueError):
        return 0


def _packaged_rows(name: str) -> int:
    """Rows of a packaged question set (the arithmetic world's sets: small, read in ms)."""
    import gzip

    set_name = NAMED_SETS[name][0]
    if set_name not in PACKAGED_SETS:
        return 0
    with gzip.open(packaged_path(set_name), "rb") as handle:
        return sum(1 for line in handle if line.strip())


def resolved_shards(recipe: Recipe, executor: str) -> int:
    """Shards per GPU stage and split: ``[run] shards``, else the executor's default (local:
    one per visible GPU)."""
    if recipe.run.shards:
        return recipe.run.shards
    if executor == "local":
        from dprm.runner.executors.base import visible_gpus

        return max(1, len(visible_gpus()))
    return EXECUTOR_SHARDS.get(executor, 1)


def planned_stages(recipe: Recipe, shards: int) -> list[PlannedStage]:
    """Units per stage of a run of ``recipe`` with ``shards`` shards per GPU stage and split
    (stages without units left out); see the module docstring."""
    r = recipe
    shards = max(1, shards)
    generate = r.data.source == "generate"
    pools = pool_splits(r)
    questions = {s: split_questions(r, s) for s in SPLITS}

    def cut(split: str) -> tuple[int, int]:
        """Shard units and merge units of one output made from ``split``'s questions."""
        count = max(1, min(shards, questions[split]))
        return count, int(count > 1)

    outputs = [s for s in SPLITS if generate] + list(pools)  # first passes and pools
    gens, worlds = len(r.generators), len(r.worlds)
    generated = [cut(s) for s in outputs]
    labelled = [cut(s) if generate else (1, 0) for s in SPLITS]
    embedded = [cut(s) for s in SPLITS] + [cut(s) for s in pools]
    fits = len(r.calibrators.methods) * r.calibrators.seeds
    tuned = f", tuned by {r.calibrators.tune_trials} trials" if r.calibrators.tune_trials else ""
    rows = [
        PlannedStage(
            "questions",
            len([s for s in SPLITS if generate or s in pools]),
            "questions",
            "driver (CPU)",
        ),
        PlannedStage(
            "generate", gens * sum(u for u, _ in generated), "generate", "generator engines"
        ),
        PlannedStage(
            "generate-merge", gens * sum(m for _, m in generated), "generate-merge", "driver (CPU)"
        ),
        PlannedStage(
            "labels",
            gens * sum(u for u, _ in labelled),
            "rollout" if generate else "labels (Park's released)",
            "generator engines + grading" if generate else "CPU",
        ),
        PlannedStage(
            "labels-merge",
            gens * sum(m for _, m in labelled),
            "rollout-merge" if generate else "labels-merge",
            "driver (CPU)",
        ),
        PlannedStage("embed", worlds * sum(u for u, _ in embedded), "embed", "PRM engines"),
        PlannedStage(
            "embed-merge", worlds * sum(m for _, m in embedded), "embed-merge", "driver (CPU)"
        ),
        PlannedStage(
            "train", worlds * fits, f"train ({', '.join(r.calibrators.methods)}{tuned})", "CPU"
        ),
        PlannedStage("evaluate", worlds * (1 + fits), "evaluate", "CPU"),
    ]
    if r.bon.n > 0:
        seq = " + auto-seq" if r.ias.sequential else ""
        count = worlds * len(IAS_SPLITS) * (1 + fits)
        rows.append(PlannedStage("ias", count, f"ias (id, ood{seq})", "CPU"))
    rows.append(PlannedStage("report", 1, "report", "CPU"))
    return [row for row in rows if row.units]
