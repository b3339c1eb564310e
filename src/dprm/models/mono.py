"""``mono``: the monotone quantile-map network trained by the integrated pinball loss.

The same :class:`~dprm.models.picnn.QuantileMapNet` as ``ot`` (T = dg/dtau, monotone by
construction), but a single proper objective instead of the dual min-max: tau ~ U(0, 1) per
record and loss rho_tau(y - Q(tau | h)). Averaged over tau this is CRPS / 2 (a strictly proper
scoring rule), whose minimiser is the conditional quantile function. No second network, no
min-max: the stable reference the OT objective is compared against.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from dprm.metrics import pinball_rho
from dprm.models.map_calibrator import MapNetConfig, QuantileMapCalibrator
from dprm.models.registry import register
from dprm.models.training import Batch


@register("mono")
class MonoCalibrator(QuantileMapCalibrator):
    """Q(tau | h) from one monotone quantile-map network fitted by the pinball loss."""

    config_class: ClassVar[type] = MapNetConfig

    @staticmethod
    def loss(model: MonoCalibrator, batch: Batch) -> Tensor:
        """Mean pinball loss at one random level per record (a CRPS estimate / 2)."""
        net = model.net
        quantile = net.quantile(net.embed(batch.hidden), batch.tau)
        return pinball_rho(batch.target, quantile, batch.tau).mean()
