"""``ot``: the paper's conditional optimal-transport quantile map (CondOT dual min-max).

Two quantile-map networks, each a context MLP u0 = phi(h) followed by a PICNN (paper,
"Modification to CondOT conditioning"):

* g, the transport potential: T(tau, h) = dg/dtau is the conditional quantile function
  Q(tau | h) (paper, "Learning conditional quantiles"); convex in tau, so monotone;
* f, the dual potential on the target side: df/dy maps success probabilities back to levels.

Objectives (paper eq. for l_DOT^f / l_DOT^g, docs/design.md §5), with tau ~ U(0, 1) drawn per
record and y the same record's success_prob:

    g loss: f(T(tau, h), h) - tau * T(tau, h)        (g updated every batch)
    f loss: f(y, h) - f(T(tau, h), h)                (f updated every ``f_every``-th batch)

Why this does not collapse: both networks start at the unconditional optimum. g starts with
dg/dtau = Q0, the marginal quantile function of the training targets, and f with df/dy = Q0^-1
(the marginal CDF), its exact convex conjugate; at that point the g gradient f'(T) - tau is zero
and the min-max only has to learn how the distribution moves with h. The PICNN x-paths start
small, and T is computed by forward-mode slope (one backward pass per update, through g
alone for the g step: f's slope at T is a constant weight there).

References:
    R. Ma, D. Hadfield-Menell, K. Greenewald. Distributional Process Reward Models: Calibrated
    Prediction of Future Rewards via Conditional Optimal Transport. 2025 ("the paper").
    C. Bunne, A. Krause, M. Cuturi. Supervised Training of Conditional Monge Maps. NeurIPS 2022
    (CondOT: the dual objective and the PICNN potentials).
    B. Amos, L. Xu, J. Z. Kolter. Input Convex Neural Networks. ICML 2017 (the PICNN).
    See docs/references.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dprm.config import in_range
from dprm.models.interface import register
from dprm.models.map_calibrator import MapNetConfig, QuantileMapCalibrator, build_net
from dprm.models.training import Batch, Trainer


@dataclass
class OTConfig(MapNetConfig):
    """Architecture (shared by f and g), the alternating schedule and optimisation settings.

    ``lr`` is g's learning rate, ``lr_f`` f's; f's StepLR decays at the same steps as g's (its
    step size is divided by ``f_every``). Adam betas (0.5, 0.9) as in CondOT: with the default
    (0.9, 0.999) momentum the alternating game oscillates (validation WQL ~10 % worse on the
    synthetic worlds, and unstable once f learns faster).
    """

    lr: float = in_range(4e-3, gt=0)
    lr_f: float = in_range(4e-3, gt=0)
    adam_betas: tuple[float, ...] = in_range((0.5, 0.9), ge=0, lt=1)
    f_every: int = in_range(2, ge=1)  # update f once every f_every batches (g every batch)
    # f's curvature outside [0, 1]: keeps T bounded (see QuantileMapNet)
    dual_barrier: float = in_range(10.0, ge=0)


@register("ot")
class OTCalibrator(QuantileMapCalibrator):
    """Conditional quantile function T(tau | h) = d g(tau, h) / d tau learned by CondOT's dual."""

    config_class: ClassVar[type] = OTConfig

    def __init__(self, hidden_dim: int, config: dict[str, Any] | None = None):
        super().__init__(hidden_dim, config)
        # ``self.net`` is g (its gradient is the quantile map); ``self.dual`` is f.
        self.dual = build_net(hidden_dim, self.settings, barrier=self.settings.dual_barrier)

    def initialise(self, trainer: Trainer) -> None:
        """Start at the unconditional OT solution (``init_marginal``)."""
        if self.settings.init_marginal:
            self.init_marginal(trainer.target.numpy())

    def init_marginal(self, targets) -> None:
        """Start at the unconditional OT solution: g' = marginal quantiles, f' = marginal CDF."""
        self.net.init_marginal(targets)
        self.dual.init_marginal(targets, inverse=True)

    def transport_loss(
        self, context_g: torch.Tensor, tau: torch.Tensor, context_f: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """g's objective E f(T, h) - tau T and the transported levels T(tau, h) [b].

        Args:
            context_g: g's context for the batch [b, C].
            tau: source levels [b], one per record.
            context_f: f's context for the batch [b, C], treated as a constant.
        """
        transported = self.net.quantile(context_g, tau)
        # d/d theta_g [f(T) - tau T] = (f'(T) - tau) dT/d theta_g: f's value and slope at T come
        # from one forward pass without a graph, so the backward runs through g alone.
        with torch.no_grad():
            f_of_t, f_slope = self.dual.potential(context_f, transported)
            value = (f_of_t - tau * transported).mean()
        surrogate = ((f_slope - tau) * transported).mean()
        # Same gradient as the objective, and the objective's value for the logs.
        return surrogate + (value - surrogate).detach(), transported

    def dual_loss(
        self, context_f: torch.Tensor, target: torch.Tensor, transported: torch.Tensor
    ) -> torch.Tensor:
        """f's objective E f(y, h) - E f(T, h), with T a constant."""
        f_of_y, _ = self.dual.potential(context_f, target, with_slope=False)
        f_of_t, _ = self.dual.potential(context_f, transported.detach(), with_slope=False)
        return (f_of_y - f_of_t).mean()

    def train_steps(self, trainer: Trainer) -> list[dict]:
        """The alternating min-max: g every batch, f every ``f_every``-th batch."""
        config: OTConfig = self.settings
        g_params = list(self.net.parameters())
        f_params = list(self.dual.parameters())
        opt_g, sched_g = trainer.optimizer(g_params, config.lr)
        opt_f, sched_f = trainer.optimizer(f_params, config.lr_f)
        sched_f.step_size = max(1, config.lr_step_size // config.f_every)

        def step(batch: Batch, index: int) -> dict[str, float]:
            update_f = index % config.f_every == 0
            # f's context is computed once per batch; with gradients only when f is updated.
            with torch.set_grad_enabled(update_f):
                context_f = self.dual.embed(batch.hidden)
            # g step: f's parameters are constants (no gradients computed for them).
            self.dual.requires_grad_(False)
            context_g = self.net.embed(batch.hidden)
            loss_g, transported = self.transport_loss(context_g, batch.tau, context_f.detach())
            norm_g = trainer.update(loss_g, opt_g, sched_g, g_params)
            self.dual.requires_grad_(True)
            logs = {"loss_g": loss_g.item(), "grad_norm_g": norm_g}
            if update_f:
                loss_f = self.dual_loss(context_f, batch.target, transported)
                logs["loss_f"] = loss_f.item()
                logs["grad_norm_f"] = trainer.update(loss_f, opt_f, sched_f, f_params)
            return logs

        return trainer.run(step, desc="ot")
