"""The optimisation settings every gradient-trained calibrator shares.

A method's config (``QRConfig``, ``OTConfig``, ...) subclasses :class:`TrainConfig`; it is read
from the method's TOML table with unknown keys rejected (:func:`dprm.models.fit.resolve_config`).
"""

from __future__ import annotations

from dataclasses import dataclass

from dprm.config import ConfigError, in_range

#: the learning-rate schedules of ``TrainConfig.lr_schedule``
LR_SCHEDULES = ("step", "cosine")


@dataclass
class TrainConfig:
    """Optimisation settings shared by the gradient-trained calibrators.

    Early stopping on the validation score, counted in steps: a run stops once
    ``step - best_step`` reaches its wait, ``min(patience, max(patience_fraction x best_step,
    2 x eval_every))`` (``patience_fraction = 0``: the wait is ``patience``), and the best
    checkpoint (lowest validation score from the warm-up on) is kept. With the defaults a run
    stops by ``2 x best_step`` (at least two evaluations after it), at most ``patience`` = 250
    steps after its last improvement. Under a proper score (``nll``, ``wql``) whose minimum the
    warm-up passed over, the wait runs from that minimum (the run stops by twice its step, two
    evaluations after the kept checkpoint at least); with ``patience_from_wql`` (qr) so does a
    WQL minimum before the kept checkpoint of a run selected by the calibration area.
    ``patience = 0`` turns early stopping off
    (every step up to ``max_steps`` runs). One evaluation embeds every validation row, so it runs every
    ``eval_every`` = 25 steps (:mod:`dprm.models.checkpoint_selection`).
    """

    batch_size: int = in_range(256, ge=1)
    lr: float = in_range(1e-3, gt=0)
    # StepLR: multiply the learning rate by lr_gamma every this many steps
    lr_step_size: int = in_range(500, ge=1)
    lr_gamma: float = in_range(0.5, gt=0)
    weight_decay: float = in_range(0.0, ge=0)
    adam_betas: tuple[float, ...] = in_range((0.9, 0.999), ge=0, lt=1)
    clip_norm: float = in_range(1.0, gt=0)
    max_steps: int = in_range(1000, ge=1)
    eval_every: int = in_range(25, ge=1)
    # early stopping: the longest wait, in steps, after the last improvement (0: off)
    patience: int = in_range(250, ge=0)
    # the wait is also at most this multiple of the best step (0: a fixed wait of `patience`)
    patience_fraction: float = in_range(1.0, ge=0)
    min_delta: float = in_range(1e-4, ge=0)
    select_metric: str = "calibration_area"  # validation score for early stopping / checkpoint
    # Checkpoints before the warm-up are not eligible and do not count towards patience: the
    # marginal initialisation is already marginally calibrated, and on the way from it to the
    # conditional map the calibration area first rises, so early on it prefers untrained maps.
    # The warm-up is min(warmup_steps, warmup_fraction x max_steps) (:func:`eligible_from`):
    # scaled to the step cap, so a short run is not denied its better early checkpoints
    # (docs/calibrators.md, "Checkpoint selection that fits the run").
    warmup_steps: int = 400
    warmup_fraction: float = in_range(0.25, gt=0, le=1)
    # Under the calibration area, also date the last improvement by the WQL evaluated beside
    # it: when the WQL's minimum came before the kept checkpoint, the run stops once the steps
    # since that minimum reach its wait, two evaluations after the kept checkpoint at least
    # (:mod:`dprm.models.checkpoint_selection`). On for qr, whose area plateaus after the
    # warm-up (docs/calibrators.md, "Early stopping and the kept checkpoint").
    patience_from_wql: bool = False
    # Learning-rate multiplier of weights that read the hidden state directly (fan-in D). Adam
    # moves every weight by ~lr whatever its gradient's size, so such a layer's output moves by
    # between lr * sqrt(D) and lr * D per step; <= 0 means auto: sqrt(256 / D), i.e. the rates
    # tuned at D = 256 (0.27x at D = 3584, 2.8x at D = 32).
    input_lr_scale: float = 0.0
    # hold the standardised float32 rows in memory up to this size
    preload_max_gb: float = in_range(4.0, ge=0)
    # Exponential moving average of the weights (Polyak averaging), 0 = off: the averaged
    # weights are the ones evaluated, checkpointed and returned; the optimiser keeps stepping
    # the raw ones. Decay d averages over ~1 / (1 - d) steps (debiased, see WeightAverage).
    ema_decay: float = in_range(0.0, ge=0, lt=1)
    # Learning-rate schedule: "step" (StepLR, lr_step_size / lr_gamma) or "cosine" (cosine
    # decay from lr to lr * lr_gamma over max_steps).
    lr_schedule: str = "step"

    def __post_init__(self) -> None:
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(
                f"lr_schedule must be one of {list(LR_SCHEDULES)}, got {self.lr_schedule!r}"
            )
