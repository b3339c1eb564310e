"""Which checkpoint a training run keeps (:mod:`dprm.models.checkpoint_selection`)."""

from __future__ import annotations

from dprm.models.checkpoint_selection import CheckpointSelection, eligible_from
from dprm.models.training_config import TrainConfig


def run(config: TrainConfig, scores: dict[int, float]) -> tuple[CheckpointSelection, list[int]]:
    """Feed ``scores`` (step -> score, step 0 first) until patience stops; the steps seen."""
    initial = scores.pop(0)
    selection = CheckpointSelection(config, initial, {"step": 0})
    seen = []
    for step, score in scores.items():
        seen.append(step)
        selection.observe(step, score, lambda step=step: {"step": step})
        if selection.exhausted:
            break
    return selection, seen


def test_warm_up_steps_are_not_kept_but_their_minimum_is_recorded() -> None:
    config = TrainConfig(max_steps=40, eval_every=10, warmup_steps=20, warmup_fraction=1.0)
    assert eligible_from(config) == 20
    selection, _ = run(config, {0: 0.5, 10: 0.1, 20: 0.3, 30: 0.2, 40: 0.25})
    assert (selection.best_step, selection.best_score) == (30, 0.2)
    assert selection.best_state == {"step": 30}
    assert (selection.low_step, selection.low_score) == (10, 0.1)
    assert selection.summary() == {
        "best_step": 30,
        "best_score": 0.2,
        "select_metric": "calibration_area",
        "eligible_from": 20,
        "validation_min_step": 10,
        "validation_min_score": 0.1,
    }


def test_without_warm_up_the_initialisation_competes() -> None:
    config = TrainConfig(max_steps=20, warmup_steps=0)
    selection, _ = run(config, {0: 0.1, 10: 0.2, 20: 0.15})
    assert (selection.best_step, selection.best_state) == (0, {"step": 0})
    assert selection.best_score == 0.1


def test_a_warm_up_longer_than_the_run_leaves_the_last_step() -> None:
    config = TrainConfig(max_steps=20, warmup_steps=400, warmup_fraction=1.0)
    selection, _ = run(config, {0: 0.1, 10: 0.05, 20: 0.3})
    assert eligible_from(config) == 20
    assert (selection.best_step, selection.best_score) == (20, 0.3)  # nothing earlier is kept


def test_patience_counts_eligible_evaluations_that_do_not_beat_best_by_min_delta() -> None:
    config = TrainConfig(max_steps=100, warmup_steps=0, patience=2, min_delta=0.01)
    # 0.195 is lower than 0.2 but not by min_delta: it counts as stale and is not kept
    selection, seen = run(config, {0: 0.3, 10: 0.2, 20: 0.195, 30: 0.25, 40: 0.1})
    assert seen == [10, 20, 30] and selection.exhausted
    assert (selection.best_step, selection.best_score) == (10, 0.2)
    assert selection.low_step == 20  # the minimum of any evaluation, kept or not
