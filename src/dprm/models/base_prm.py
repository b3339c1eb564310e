"""``base``: the uncalibrated PRM score as a degenerate calibrator (point mass at r)."""

from __future__ import annotations

import torch
from torch import Tensor

from dprm.models.base import Calibrator, PointMass, register


@register("base")
class BaseCalibrator(Calibrator):
    """Returns the PRM score itself; fitting does nothing. Lets every method share one API."""

    kind = "point"
    uses_hidden = False

    def forward(self, hidden: Tensor | None, prm_score: Tensor | None = None) -> PointMass:
        if prm_score is None:
            raise ValueError("the base calibrator needs prm_score")
        return PointMass(torch.as_tensor(prm_score, dtype=torch.float32))
