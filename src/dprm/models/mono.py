"""``mono``: the monotone quantile-map network trained by the integrated pinball loss.

The same :class:`~dprm.models.picnn.QuantileMapNet` as ``ot`` (T = dg/dtau, monotone by
construction), but a single proper objective instead of the dual min-max: tau ~ U(0, 1) per
record and loss rho_tau(y - Q(tau | h)). Averaged over tau this is CRPS / 2 (a strictly proper
scoring rule), whose minimiser is the conditional quantile function. No second network, no
min-max: the stable reference the OT objective is compared against.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from dprm.data.contract import CalibrationSet
from dprm.models.base import register
from dprm.models.map_calibrator import MapNetConfig, QuantileMapCalibrator
from dprm.trainer import Batch, Trainer


def pinball(target: Tensor, quantile: Tensor, tau: Tensor) -> Tensor:
    """rho_tau(y - q) = max(tau u, (tau - 1) u), elementwise."""
    u = target - quantile
    return (tau * u).maximum((tau - 1.0) * u)


@register("mono")
class MonoCalibrator(QuantileMapCalibrator):
    """Q(tau | h) from one monotone quantile-map network fitted by the pinball loss."""

    config_class: ClassVar[type] = MapNetConfig

    @staticmethod
    def loss(model: MonoCalibrator, batch: Batch) -> Tensor:
        """Mean pinball loss at one random level per record (a CRPS estimate / 2)."""
        net = model.net
        quantile = net.quantile(net.embed(batch.hidden), batch.tau)
        return pinball(batch.target, quantile, batch.tau).mean()

    @classmethod
    def fit_model(
        cls,
        train: CalibrationSet,
        val: CalibrationSet,
        config: MapNetConfig,
        seed: int,
        progress: bool,
    ) -> tuple[MonoCalibrator, list[dict]]:
        torch.manual_seed(seed)
        model = cls(train.hidden_dim, vars(config))
        trainer = Trainer(model, train, val, config, seed=seed, progress=progress)
        if config.init_marginal:
            model.net.init_marginal(trainer.target.numpy())
        history = trainer.fit_loss(cls.loss, desc="mono")
        model.info["training"] = trainer.summary
        return model, history
