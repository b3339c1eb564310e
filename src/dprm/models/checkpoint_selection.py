"""Which validation checkpoint a training run keeps, and when patience stops it.

After a warm-up (:func:`eligible_from`) every evaluation is a candidate: a score lower than the
best by more than ``min_delta`` becomes the kept checkpoint. The run stops once the steps since
that checkpoint reach :func:`patience_wait` (in steps: at most ``patience``, and at most
``patience_fraction`` x the kept step, never under two evaluations), so a default run spends at
most as many steps after its last improvement as before it. The lowest score of any evaluation,
eligible or not, is recorded beside it so a report can say which minimum the warm-up passed over.

Under a proper score (:data:`PROPER_SCORES`: the count NLL, the WQL) a lower score that the
warm-up passed over is a better model set aside as noise (a small validation split), so the
validation score's last improvement is that minimum, not the kept checkpoint: the run then
stops once the steps since the minimum reach ``patience_wait`` of the minimum's step, and at
least two evaluations after the kept checkpoint (an eligible score still falling keeps the run
going). The calibration area's early minima are the marginal initialisation's (perfectly
calibrated and useless: the reason for the warm-up), not an improvement; with
``patience_from_wql`` (qr's default) a run selected by it reads the WQL evaluated beside it
instead: when the WQL's minimum came before the kept checkpoint, neither score has improved
since the kept one, and the run stops on the same clock (docs/calibrators.md, "Early stopping
and the kept checkpoint").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from dprm.models.training_config import TrainConfig

#: validation scores whose minimum before the warm-up is a better model (proper scoring rules):
#: a run stops by twice that minimum's step even when the warm-up kept a later checkpoint
PROPER_SCORES = frozenset({"nll", "wql"})


def eligible_from(config: TrainConfig) -> int:
    """The first step whose checkpoint may be kept: the warm-up scaled to the step cap,
    ``min(warmup_steps, ceil(warmup_fraction x max_steps))`` (0: the initialisation too)."""
    if config.warmup_steps <= 0:
        return 0
    return min(config.warmup_steps, math.ceil(config.warmup_fraction * config.max_steps))


def patience_wait(config: TrainConfig, best_step: int) -> float:
    """Steps without improvement after ``best_step`` that end a run (inf: early stopping off).

    ``min(patience, max(patience_fraction x best_step, 2 x eval_every))``; with
    ``patience_fraction = 0`` just ``patience``; ``patience = 0`` never stops.
    """
    if config.patience <= 0:
        return math.inf
    if config.patience_fraction <= 0:
        return float(config.patience)
    relative = max(config.patience_fraction * best_step, 2.0 * config.eval_every)
    return float(min(config.patience, relative))


class CheckpointSelection:
    """The best eligible checkpoint of one run and its patience count.

    Args:
        config: the run's settings (``select_metric``, ``min_delta``, ``patience``, warm-up and
            ``max_steps``; the last step is always eligible).
        initial_score: the validation score of the initialisation (step 0).
        initial_state: the initialisation's state dict (a copy), kept until a step beats it.
        initial_others: the initialisation's other validation scores (by name).
    """

    def __init__(
        self,
        config: TrainConfig,
        initial_score: float,
        initial_state: dict,
        initial_others: Mapping[str, float] | None = None,
    ):
        self.config = config
        self.eligible_from = eligible_from(config)
        self.best_score = initial_score if self.eligible_from <= 0 else math.inf
        self.best_step = 0
        self.best_state = initial_state
        self.low_score, self.low_step = initial_score, 0  # the minimum, eligible or not
        #: the proper score whose minimum dates the last improvement: the selected one, or
        #: (under the calibration area) the one evaluated beside it, once observed
        self.proper = config.select_metric if config.select_metric in PROPER_SCORES else None
        self.proper_low: tuple[float, int] | None = None  # (its minimum, the step)
        self.last_step = 0
        self.eligible_seen = self.eligible_from <= 0
        self._track_proper(0, initial_score, initial_others or {})

    def observe(
        self,
        step: int,
        score: float,
        snapshot: Callable[[], dict],
        others: Mapping[str, float] | None = None,
    ) -> bool:
        """Record the evaluation of ``step``; ``snapshot()`` copies the weights if they are kept.

        Args:
            others: the other validation scores of this evaluation (by name); a proper one
                dates the last improvement of a run selected by an improper score.

        Returns:
            Whether the step was eligible (before the warm-up it neither counts nor is kept).
        """
        if score < self.low_score:
            self.low_score, self.low_step = score, step
        self._track_proper(step, score, others or {})
        self.last_step = step
        if step < self.eligible_from and step != self.config.max_steps:
            return False
        self.eligible_seen = True
        if score < self.best_score - self.config.min_delta:
            self.best_score, self.best_step = score, step
            self.best_state = snapshot()
        return True

    @property
    def wait(self) -> float:
        """Steps without improvement after the kept checkpoint that end the run."""
        return patience_wait(self.config, self.best_step)

    def _track_proper(self, step: int, score: float, others: Mapping[str, float]) -> None:
        if self.proper is None and self.config.patience_from_wql and "wql" in others:
            self.proper = "wql"  # improper selection: the proper score evaluated beside it
        if self.proper is None:
            return
        value = score if self.proper == self.config.select_metric else others.get(self.proper)
        if value is None or not math.isfinite(value):
            return
        if self.proper_low is None or value < self.proper_low[0]:
            self.proper_low = (value, step)

    @property
    def exhausted(self) -> bool:
        """Whether the run should stop (from the warm-up on): the steps since the kept checkpoint
        reached :attr:`wait`, or, when the proper score's minimum came before the kept checkpoint
        (the warm-up passed over it), the steps since that minimum reached its own wait and two
        evaluations passed since the kept one."""
        if not self.eligible_seen:
            return False
        since_kept = self.last_step - self.best_step
        if since_kept >= self.wait:
            return True
        if self.proper_low is None:
            return False
        low_score, low_step = self.proper_low
        if low_step >= self.best_step:
            return False
        if self.proper == self.config.select_metric and low_score >= self.best_score:
            return False
        floor = 2 * self.config.eval_every
        since_low = self.last_step - low_step
        return since_kept >= floor and since_low >= patience_wait(self.config, low_step)

    def summary(self) -> dict[str, Any]:
        """best_step, best_score, select_metric, eligible_from and the validation minimum."""
        return {
            "best_step": self.best_step,
            "best_score": self.best_score,
            "select_metric": self.config.select_metric,
            # which rule kept it, and the minimum it may have passed over (figures say so)
            "eligible_from": self.eligible_from,
            "validation_min_step": self.low_step,
            "validation_min_score": self.low_score,
            # the proper score that dates the last improvement, and its minimum
            "proper_score": self.proper,
            "proper_min_step": None if self.proper_low is None else self.proper_low[1],
            "patience_wait": None if math.isinf(self.wait) else self.wait,
        }
