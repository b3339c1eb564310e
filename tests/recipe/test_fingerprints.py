"""Fingerprints of a recipe's data: what re-runs when a generator setting changes."""

from __future__ import annotations

from dprm.recipe.fingerprints import trajectories_fp, world_data
from dprm.recipe.spec import recipe_from_dict


def _recipe(**generator):
    tables = {
        "generators": [{"name": "g", "model": "m"} | generator],
        "prms": [{"name": "p", "model": "x"}],
    }
    return recipe_from_dict(tables, "r.toml")


def test_a_context_from_the_model_keeps_the_fingerprints_of_an_explicit_4096():
    """``max_model_len`` unset (from the model) and 4096 give the same context on every model
    4096 fits, so a run made with either resumes without generating again."""
    unset, explicit = _recipe(), _recipe(max_model_len=4096)
    assert unset.generators[0].max_model_len is None
    for pool in (False, True):
        assert trajectories_fp(unset, "g", "id", pool) == trajectories_fp(explicit, "g", "id", pool)
    assert world_data(unset, "g__p") == world_data(explicit, "g__p")


def test_the_context_limit_counts_and_the_placement_does_not():
    base = trajectories_fp(_recipe(), "g", "train", False)
    assert trajectories_fp(_recipe(max_model_len=2048), "g", "train", False) != base
    moved = _recipe(gpus=2, device="cuda:1", gpu_memory_utilization=0.5)
    assert trajectories_fp(moved, "g", "train", False) == base


def _graded(timeout: float | None = None, workers: int | None = None):
    grading = {k: v for k, v in (("timeout", timeout), ("workers", workers)) if v is not None}
    tables = {
        "generators": [{"name": "g", "model": "m"}],
        "prms": [{"name": "p", "model": "x"}],
        "grading": grading,
    }
    return recipe_from_dict(tables, "r.toml")


def test_the_grader_timeout_counts_and_its_workers_do_not():
    """A rerun with a longer grader timeout was skipped as finished: answers that had timed
    out (graded wrong) stayed wrong. The default keeps the fingerprints runs already have."""
    from dprm.recipe.fingerprints import labels_fp

    base = _graded()
    longer = _graded(timeout=60.0)
    for pool in (False, True):
        assert trajectories_fp(longer, "g", "id", pool) != trajectories_fp(base, "g", "id", pool)
    assert labels_fp(longer, "g", "train") != labels_fp(base, "g", "train")
    assert world_data(_graded(timeout=5.0), "g__p") == world_data(base, "g__p")
    assert world_data(_graded(workers=7), "g__p") == world_data(base, "g__p")
