"""``qr``: the paper's quantile-regression baseline (Park et al. 2025, 11 levels).

One linear layer h -> M outputs, a sigmoid each, trained with the pinball loss summed over the
fixed levels. Levels are fitted independently, so quantiles may cross: that is the point of the
baseline, and ``dprm evaluate`` reports the crossing rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from dprm.config import from_dict, in_range, to_dict
from dprm.metrics import LEVELS_11, pinball_rho
from dprm.models.interface import FixedLevels
from dprm.models.registry import register
from dprm.models.training import Batch, TrainConfig, TrainedCalibrator, Trainer


@dataclass
class QRConfig(TrainConfig):
    """Levels of the QR head plus the shared optimisation settings."""

    levels: tuple[float, ...] = in_range(tuple(float(t) for t in LEVELS_11), ge=0, le=1)
    # Start each output at the training targets' marginal quantile (clipped away from 0 / 1
    # where the sigmoid saturates) instead of 0.5: same optimum, fewer wasted steps.
    init_marginal: bool = True
    # its calibration area is flat after the warm-up (full batch, marginal start): stop when the
    # WQL beside it stopped improving too (kept checkpoints level or better on development draws)
    patience_from_wql: bool = True


@register("qr")
class QRCalibrator(TrainedCalibrator):
    """Quantiles sigmoid(W h_std + b) [n, M] at fixed levels (may cross)."""

    kind = "levels"
    config_class: ClassVar[type] = QRConfig

    def __init__(self, hidden_dim: int, config: dict[str, Any] | None = None):
        resolved = from_dict(QRConfig, dict(config or {}), source="qr config")
        super().__init__(hidden_dim, to_dict(resolved))
        levels = np.asarray(resolved.levels, dtype=np.float64)
        if levels.ndim != 1 or len(levels) < 2 or (np.diff(levels) <= 0).any():
            raise ValueError(f"qr levels must be strictly increasing, got {resolved.levels}")
        self._levels = levels  # exact (float64) for lookups; the buffer is float32
        self.register_buffer("levels", torch.as_tensor(levels, dtype=torch.float32))
        self.head = nn.Linear(hidden_dim, len(levels))

    @property
    def fixed_levels(self) -> np.ndarray:
        return self._levels.copy()

    def forward_standardized(
        self, hidden_std: Tensor, prm_score: Tensor | None = None
    ) -> FixedLevels:
        return FixedLevels(torch.sigmoid(self.head(hidden_std)), self.levels)

    def forward(self, hidden: Tensor, prm_score: Tensor | None = None) -> FixedLevels:
        logits = self.standardizer.linear(hidden, self.head)
        return FixedLevels(torch.sigmoid(logits), self.levels)

    @staticmethod
    def loss(model: QRCalibrator, batch: Batch) -> Tensor:
        """Pinball loss averaged over records and the fixed levels."""
        quantiles = torch.sigmoid(model.head(batch.hidden))  # [b, M]
        return pinball_rho(batch.target[:, None], quantiles, model.levels[None, :]).mean()

    def initialise(self, trainer: Trainer) -> None:
        """Start at the marginal quantiles of the training targets (``init_marginal``)."""
        if self.config["init_marginal"]:
            self.init_marginal(trainer.target.numpy())

    @torch.no_grad()
    def init_marginal(self, targets: np.ndarray) -> None:
        q = np.quantile(np.asarray(targets, np.float64), self.fixed_levels)
        q = np.clip(q, 0.02, 0.98)
        self.head.weight.zero_()
        self.head.bias.copy_(torch.as_tensor(np.log(q / (1 - q)), dtype=torch.float32))
