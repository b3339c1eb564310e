"""Which validation checkpoint a training run keeps, and when patience stops it.

After a warm-up (:func:`eligible_from`) every evaluation is a candidate: a score lower than the
best by more than ``min_delta`` becomes the kept checkpoint, any other counts towards
``patience``. The lowest score of any evaluation, eligible or not, is recorded beside it so a
report can say which minimum the warm-up passed over (docs/calibrators.md, "Checkpoint
selection that fits the run").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dprm.models.training_config import TrainConfig


def eligible_from(config: TrainConfig) -> int:
    """The first step whose checkpoint may be kept: the warm-up scaled to the step cap,
    ``min(warmup_steps, ceil(warmup_fraction x max_steps))`` (0: the initialisation too)."""
    if config.warmup_steps <= 0:
        return 0
    return min(config.warmup_steps, math.ceil(config.warmup_fraction * config.max_steps))


class CheckpointSelection:
    """The best eligible checkpoint of one run and its patience count.

    Args:
        config: the run's settings (``select_metric``, ``min_delta``, ``patience``, warm-up and
            ``max_steps``; the last step is always eligible).
        initial_score: the validation score of the initialisation (step 0).
        initial_state: the initialisation's state dict (a copy), kept until a step beats it.
    """

    def __init__(self, config: TrainConfig, initial_score: float, initial_state: dict):
        self.config = config
        self.eligible_from = eligible_from(config)
        self.best_score = initial_score if self.eligible_from <= 0 else math.inf
        self.best_step = 0
        self.best_state = initial_state
        self.low_score, self.low_step = initial_score, 0  # the minimum, eligible or not
        self.stale = 0

    def observe(self, step: int, score: float, snapshot: Callable[[], dict]) -> bool:
        """Record the evaluation of ``step``; ``snapshot()`` copies the weights if they are kept.

        Returns:
            Whether the step was eligible (before the warm-up it neither counts nor is kept).
        """
        if score < self.low_score:
            self.low_score, self.low_step = score, step
        if step < self.eligible_from and step != self.config.max_steps:
            return False
        if score < self.best_score - self.config.min_delta:
            self.best_score, self.best_step, self.stale = score, step, 0
            self.best_state = snapshot()
        else:
            self.stale += 1
        return True

    @property
    def exhausted(self) -> bool:
        """Whether ``patience`` eligible evaluations in a row have not improved on the best."""
        return self.stale >= self.config.patience

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
        }
