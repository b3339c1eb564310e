"""``base`` (registry name, a CLI contract): the raw PRM score as a point calibrator.

The uncalibrated baseline of every table: p_hat = r, the PRM's own score, i.e. the point mass
at r. Nothing is fitted.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dprm.models.interface import Calibrator, PointMass
from dprm.models.registry import register


@register("base")
class RawScoreCalibrator(Calibrator):
    """Returns the PRM score itself; fitting does nothing. Lets every method share one API."""

    kind = "point"
    uses_hidden = False

    def forward(self, hidden: Tensor | None, prm_score: Tensor | None = None) -> PointMass:
        if prm_score is None:
            raise ValueError("the base calibrator needs prm_score")
        return PointMass(torch.as_tensor(prm_score, dtype=torch.float32))

    @classmethod
    def fit_model(cls, train, val, config, seed: int, progress: bool):
        """Nothing to fit: the raw score, an empty history."""
        return cls(train.hidden_dim, {}), []
