"""Polyak averaging of a model's weights during training (``TrainConfig.ema_decay``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


class WeightAverage:
    """Exponential moving average of a module's floating-point parameters (Polyak averaging).

    For a game such as the OT min-max, the iterates of alternating gradient steps circle and
    jitter around the saddle point instead of settling on it; their running average converges
    where the last iterate keeps oscillating (Polyak and Juditsky 1992; for GANs, Yazici et al.,
    ICLR 2019). The average is debiased as Adam's moments are: after t updates it is
    sum_s d^(t-s) (1 - d) theta_s / (1 - d^t), so it spans ~1 / (1 - d) updates from the start.

    Args:
        module: whose parameters are averaged (shadows are kept here, not in the module).
        decay: d in (0, 1).
    """

    def __init__(self, module: nn.Module, decay: float):
        self.decay, self.updates = float(decay), 0
        self.params = [p for p in module.parameters() if p.is_floating_point()]
        self.biased = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def update(self) -> None:
        """Fold the current parameters into the average."""
        self.updates += 1
        torch._foreach_lerp_(self.biased, [p.detach() for p in self.params], 1.0 - self.decay)

    @contextlib.contextmanager
    def swapped(self) -> Iterator[None]:
        """Within the block the module holds the averaged weights; the live ones come back after.

        Before the first update the average is the current weights (nothing to swap).
        """
        if not self.updates:
            yield
            return
        correction = 1.0 - self.decay**self.updates
        with torch.no_grad():
            live = [p.detach().clone() for p in self.params]
            for p, biased in zip(self.params, self.biased, strict=True):
                p.copy_(biased / correction)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, value in zip(self.params, live, strict=True):
                    p.copy_(value)
