"""What each output of a recipe's data stages depends on: the fingerprints of its units.

Each fingerprint chains the settings of every stage before it (questions -> first pass ->
labels -> PRM embedding), so a changed setting re-runs exactly what depends on it; the content
of what a unit reads joins it separately (``Unit.reads``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dprm.llm.generate import REFERENCE_CONTEXT
from dprm.llm.grading import timeout_fingerprint
from dprm.recipe.layout import split_world
from dprm.recipe.sections import SPLITS
from dprm.recipe.spec import Recipe
from dprm.runner.layout import IAS_SPLITS

#: settings of an engine spec that change where it runs, not what it outputs (a served
#: generator's address, key and concurrency included)
PLACEMENT = (
    "gpus", "gpu_memory_utilization", "device", "base_url", "api_key_env", "max_in_flight",
)  # fmt: skip


def engine_settings(spec: Any) -> dict[str, Any]:
    """The settings of a generator or PRM spec that change its outputs (all but placement).

    A generator's ``max_model_len = None`` (from the model) is recorded as the reference's 4096:
    the two give the same context on every model 4096 fits (a smaller one refuses 4096), so runs
    made when 4096 was the default keep their fingerprints.
    """
    settings = {k: v for k, v in dataclasses.asdict(spec).items() if k not in PLACEMENT}
    if "max_model_len" in settings and settings["max_model_len"] is None:
        settings["max_model_len"] = REFERENCE_CONTEXT
    return settings


def questions_fp(recipe: Recipe, split: str) -> dict[str, Any]:
    q = recipe.questions
    return {"sets": list(getattr(q, split)), "limit": q.limit, "every": q.every}


def sampling_settings(recipe: Recipe, n: int, max_new_tokens: int | None = None) -> dict[str, Any]:
    """``[sampling]`` with ``n`` (and ``max_new_tokens``) of the stage that samples."""
    s = dataclasses.asdict(recipe.sampling) | {"n": n}
    if max_new_tokens is not None:
        s["max_new_tokens"] = max_new_tokens
    return s


def trajectories_fp(recipe: Recipe, generator: str, split: str, pool: bool) -> dict[str, Any]:
    """Questions, generator and sampling, and the grader timeout (a longer one can grade
    answers that timed out right; see :func:`dprm.llm.grading.timeout_fingerprint`)."""
    n = recipe.bon.n if pool else recipe.sampling.n
    return {
        "questions": questions_fp(recipe, split),
        "generator": engine_settings(recipe.generator(generator)),
        "sampling": sampling_settings(recipe, n),
    } | timeout_fingerprint(recipe.grading.timeout)


def labels_fp(recipe: Recipe, generator: str, split: str) -> dict[str, Any]:
    if recipe.data.source == "park":
        g = recipe.generator(generator)
        return {
            "park": recipe.data.park,
            "datasets": list(recipe.data.park_datasets(split)),
            "policy": g.park_name or g.name,
            "rollouts": recipe.data.park_rollouts,
        }
    return {
        "trajectories": trajectories_fp(recipe, generator, split, pool=False),
        "rollout": dataclasses.asdict(recipe.rollout),
    } | timeout_fingerprint(recipe.grading.timeout)  # the rollouts are graded too


def prm_fp(recipe: Recipe, prm: str) -> dict[str, Any]:
    return engine_settings(recipe.prm(prm)) | {"questions_per_part": recipe.run.questions_per_part}


def pool_splits(recipe: Recipe) -> tuple[str, ...]:
    """The splits that get a BoN pool: ``id`` / ``ood`` (and ``train`` with ``[bon] train``)."""
    if recipe.bon.n <= 0:
        return ()
    return (("train",) if recipe.bon.train else ()) + tuple(IAS_SPLITS)


def world_data(recipe: Recipe, world: str) -> dict[str, Any]:
    """The fingerprint of a world's data (every split's calibration set and BoN set)."""
    generator, prm = split_world(world)
    out: dict[str, Any] = {}
    for split in SPLITS:
        out[f"{split}/calib"] = {"labels": labels_fp(recipe, generator, split)} | {
            "prm": prm_fp(recipe, prm)
        }
    if recipe.bon.n > 0:
        for split in pool_splits(recipe):
            out[f"{split}/bon"] = {
                "pool": trajectories_fp(recipe, generator, split, pool=True),
                "prm": prm_fp(recipe, prm),
            }
    return out
