"""Which checkpoint a training run keeps (:mod:`dprm.models.checkpoint_selection`)."""

from __future__ import annotations

from dprm.models.checkpoint_selection import CheckpointSelection, eligible_from
from dprm.models.training_config import TrainConfig


def run(
    config: TrainConfig, scores: dict[int, float], wql: dict[int, float] | None = None
) -> tuple[CheckpointSelection, list[int]]:
    """Feed ``scores`` (step -> score, step 0 first; ``wql``: the WQL evaluated beside them)
    until patience stops; the steps seen."""

    def others(step: int) -> dict[str, float]:
        return {} if wql is None else {"wql": wql[step]}

    initial = scores.pop(0)
    selection = CheckpointSelection(config, initial, {"step": 0}, others(0))
    seen = []
    for step, score in scores.items():
        seen.append(step)
        selection.observe(step, score, lambda step=step: {"step": step}, others(step))
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
        "proper_score": None,  # no proper score evaluated beside the calibration area
        "proper_min_step": None,
        "patience_wait": 30.0,  # min(250, max(1.0 x 30, 2 x 10))
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


def test_patience_counts_steps_since_a_score_that_beat_the_best_by_min_delta() -> None:
    config = TrainConfig(
        max_steps=100, eval_every=10, warmup_steps=0, patience=20, patience_fraction=0.0,
        min_delta=0.01,
    )  # fmt: skip
    # 0.195 is lower than 0.2 but not by min_delta: it counts as stale and is not kept
    selection, seen = run(config, {0: 0.3, 10: 0.2, 20: 0.195, 30: 0.25, 40: 0.1})
    assert seen == [10, 20, 30] and selection.exhausted
    assert (selection.best_step, selection.best_score) == (10, 0.2)
    assert selection.low_step == 20  # the minimum of any evaluation, kept or not


# A hand-made validation curve: falls to its minimum at step 175, then rises (the shape of an
# over-fitting calibrator; evaluations every 25 steps, cap 1000).
CURVE = {
    step: 1.0 - 0.002 * step if step <= 175 else 0.65 + 0.004 * (step - 175)
    for step in range(0, 1001, 25)
}


def test_early_stopping_fires_at_twice_the_minimum_and_keeps_it() -> None:
    """Defaults (patience 250 steps, patience_fraction 1), no warm-up: the run stops once the
    steps since the minimum reach min(250, 175) = 175, i.e. at step 350, and keeps step 175."""
    config = TrainConfig(max_steps=1000, eval_every=25, warmup_steps=0)
    selection, seen = run(config, dict(CURVE))
    assert selection.exhausted and seen[-1] == 350
    assert (selection.best_step, selection.best_state) == (175, {"step": 175})
    assert selection.low_step == selection.best_step == 175
    assert selection.summary()["patience_wait"] == 175.0


def test_patience_caps_the_wait_after_a_late_minimum() -> None:
    """Minimum at 600: min(patience 250, 600) = 250 steps later, at 850, the run stops."""
    curve = {s: 1.0 - 0.001 * s if s <= 600 else 0.4 + 0.01 * (s - 600) for s in range(0, 1001, 25)}
    selection, seen = run(TrainConfig(max_steps=1000, eval_every=25, warmup_steps=0), curve)
    assert seen[-1] == 850 and selection.best_step == 600


def test_an_early_minimum_waits_at_least_two_evaluations() -> None:
    curve = {0: 0.5, 25: 0.1, **{s: 0.2 for s in range(50, 1001, 25)}}
    selection, seen = run(TrainConfig(max_steps=1000, eval_every=25, warmup_steps=0), curve)
    assert seen[-1] == 75 and selection.best_step == 25  # max(1 x 25, 2 x 25) = 50 steps


def test_patience_zero_runs_every_step() -> None:
    config = TrainConfig(max_steps=1000, eval_every=25, warmup_steps=0, patience=0)
    selection, seen = run(config, dict(CURVE))
    assert not selection.exhausted and seen[-1] == 1000
    assert selection.best_step == 175  # still keeps the minimum
    assert selection.summary()["patience_wait"] is None


def test_a_proper_score_passed_over_by_the_warm_up_stops_the_run_at_twice_its_minimum() -> None:
    """binomial on small data (count NLL, warm-up 250): the minimum at 175 is passed over and step
    250 is kept. The validation score's last improvement is the minimum, so the run stops once the
    steps since it reach min(250, 175) = 175 (step 350), two evaluations after the kept step at
    least (300): at 350, not 250 steps after the kept 250."""
    config = TrainConfig(
        max_steps=1000, eval_every=25, warmup_steps=250, warmup_fraction=1.0, select_metric="nll"
    )
    selection, seen = run(config, dict(CURVE))
    assert selection.best_step == 250 and selection.low_step == 175
    assert selection.exhausted and seen[-1] == 350


def test_a_calibration_area_minimum_before_the_warm_up_does_not_shorten_the_run() -> None:
    """qr, mono, ot (calibration area): an early minimum is the marginal initialisation's, not an
    improvement; the wait runs from the kept 250: min(250, 250) steps, the stop at 500."""
    config = TrainConfig(max_steps=1000, eval_every=25, warmup_steps=250, warmup_fraction=1.0)
    selection, seen = run(config, dict(CURVE))
    assert selection.best_step == 250 and selection.low_step == 175
    assert seen[-1] == 500


def test_a_calibration_area_run_stops_when_its_wql_stopped_improving_before_the_kept_step():
    """qr, mono, ot on a small training set: the calibration area's minimum is the marginal
    initialisation's and the WQL evaluated beside it is lowest at step 100 (the model over-fits
    from there on). The warm-up keeps 250 (the calibration area's eligible minimum); neither score
    has improved since, so the run stops once the steps since the WQL's minimum reach
    min(250, 100) and two evaluations after the kept step: at 300, not at 500."""
    config = TrainConfig(
        max_steps=1000, eval_every=25, warmup_steps=250, warmup_fraction=1.0,
        patience_from_wql=True,
    )  # fmt: skip
    wql = {s: 0.10 - 0.0001 * s if s <= 100 else 0.09 + 0.0001 * (s - 100)
           for s in range(0, 1001, 25)}  # fmt: skip
    selection, seen = run(config, dict(CURVE), wql)
    assert selection.best_step == 250 and selection.summary()["proper_min_step"] == 100
    assert selection.summary()["proper_score"] == "wql"
    assert selection.exhausted and seen[-1] == 300
    # a WQL still falling at the kept step: the wait runs from the kept step, as before
    falling = {s: 0.1 - 0.00001 * s for s in range(0, 1001, 25)}
    selection, seen = run(config, dict(CURVE), falling)
    assert seen[-1] == 500 and selection.summary()["proper_min_step"] == 500
    # off (every method but qr): the WQL is not read, the wait runs from the kept step
    off = TrainConfig(max_steps=1000, eval_every=25, warmup_steps=250, warmup_fraction=1.0)
    selection, seen = run(off, dict(CURVE), wql)
    assert seen[-1] == 500 and selection.summary()["proper_score"] is None


def test_an_eligible_score_still_falling_keeps_a_passed_over_run_going() -> None:
    """Minimum 0.1 at step 25 (before the warm-up at 250), long past its wait; after the warm-up
    the score falls (still above the minimum) until step 500: the run keeps each improvement and
    stops two evaluations after the last one, at 550, keeping 500."""
    curve = {0: 0.5, 25: 0.1, **{s: 0.6 for s in range(50, 250, 25)}}
    curve |= {s: 0.6 - 0.0005 * (s - 250) for s in range(250, 501, 25)}
    curve |= {s: 0.5 for s in range(525, 1001, 25)}
    config = TrainConfig(
        max_steps=1000, eval_every=25, warmup_steps=250, warmup_fraction=1.0, select_metric="wql"
    )
    selection, seen = run(config, curve)
    assert (selection.best_step, selection.low_step) == (500, 25)
    assert selection.exhausted and seen[-1] == 550


def test_a_passed_over_minimum_with_patience_off_still_runs_every_step() -> None:
    config = TrainConfig(
        max_steps=1000, eval_every=25, warmup_steps=250, warmup_fraction=1.0, patience=0,
        select_metric="nll",
    )  # fmt: skip
    selection, seen = run(config, dict(CURVE))
    assert not selection.exhausted and seen[-1] == 1000 and selection.best_step == 250
