"""Partially input-convex networks with a forward-mode slope, and the quantile-map network.

A :class:`PICNN` (Amos et al. 2017, as used by CondOT, Bunne et al. 2022) is a scalar potential
g(x, u) that is convex in the scalar x for every context u. Convexity comes from the
parameterisation, not from a clamp someone must remember to call:

* z-path weights are ``softplus`` of free parameters (non-negative), times positive context
  gates ``softplus(.)``;
* activations are ``softplus`` (convex and non-decreasing);
* x enters every layer affinely (any sign), plus a non-negative quadratic at the output.

A non-negative combination of convex functions fed through a convex non-decreasing function is
convex, so every unit, and the output, is convex in x (Amos et al. 2017, Prop. 1).

The transport map is T(x, u) = dg/dx (paper, "Conditional Optimal Transport"). x is a scalar,
so the slope is carried through the forward pass next to the value (forward-mode
differentiation): dz_k/dx = softplus'(pre_k) * dpre_k/dx. Training a loss on T then needs one
ordinary backward pass instead of ``autograd.grad(create_graph=True)`` followed by a second.

:class:`QuantileMapNet` is the reusable calibrator network: a context MLP u0 = phi(h) (paper,
"Modification to CondOT conditioning") followed by a PICNN plus a fixed convex marginal potential,
so that T(tau | h) starts at the marginal quantile function of the training targets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: softplus^-1(1): a raw parameter with this value gives a softplus gate of exactly 1.
_SOFTPLUS_INV_ONE = math.log(math.e - 1.0)


def _softplus_inverse(value: float) -> float:
    return value + math.log(-math.expm1(-value))


class PICNNLayer(nn.Module):
    """One PICNN layer: pre = (z * gate(u)) @ softplus(W)^T + x * x_coefficient(u) + shift(u).

    Args:
        context_dim: C, width of the context u.
        in_width: width of the previous layer's z (0 for the first layer, which has no z-path).
        out_width: width of this layer.
        x_init_scale: standard deviation of the x coefficients at initialisation; small values
            make the layer start nearly constant in x.
    """

    def __init__(self, context_dim: int, in_width: int, out_width: int, x_init_scale: float):
        super().__init__()
        self.in_width = in_width
        # Coefficient of x per unit: any sign, the term stays affine in x.
        self.x_coefficient = nn.Linear(context_dim, out_width)
        nn.init.normal_(self.x_coefficient.weight, std=x_init_scale / math.sqrt(context_dim))
        nn.init.zeros_(self.x_coefficient.bias)
        # Context-only offset per unit.
        self.shift = nn.Linear(context_dim, out_width)
        if in_width:
            # Positive per-unit gate on the incoming z: softplus keeps it > 0 (convexity).
            self.z_gate = nn.Linear(context_dim, in_width)
            nn.init.normal_(self.z_gate.weight, std=0.1 / math.sqrt(context_dim))
            nn.init.constant_(self.z_gate.bias, _SOFTPLUS_INV_ONE)
            # Free parameters of the non-negative z-path weights (softplus reparameterisation);
            # initialised so the effective weights average 1 / in_width.
            raw = torch.empty(out_width, in_width).uniform_(0.5, 1.5) / in_width
            self.z_weight_raw = nn.Parameter(raw.expm1().log())

    @property
    def z_weight(self) -> Tensor:
        """Non-negative z-path weights [out_width, in_width]."""
        return F.softplus(self.z_weight_raw)

    def forward(
        self, x: Tensor, z: Tensor | None, dz: Tensor | None, context: Tensor
    ) -> tuple[Tensor | None, Tensor | None]:
        """Pre-activation and its x-derivative.

        Args:
            x: [n, L, 1] scalar inputs.
            z, dz: [n, L, in_width] previous activations and their x-derivatives (both None for
                the first layer). After the first layer, ``z`` None skips the value and ``dz``
                None skips the slope.
            context: [n, C].

        Returns:
            (pre, dpre), each [n, L, out_width] or None where skipped.
        """
        coef = self.x_coefficient(context)[:, None, :]  # [n, 1, out]
        first = not self.in_width
        pre = None
        if first or z is not None:
            pre = torch.addcmul(self.shift(context)[:, None, :], x, coef)
        if first:
            return pre, coef.expand_as(pre)
        gate = F.softplus(self.z_gate(context))  # [n, in]
        if x.shape[1] == 1:
            # One input per context (training): one shared matmul over the batch. Value and
            # slope go through the same linear z-path (the slope by linearity).
            weight = self.z_weight.t()
            gate = gate[:, None, :]
            value = None if z is None else pre + (z * gate) @ weight
            return value, None if dz is None else coef + (dz * gate) @ weight
        # Many inputs per context (inference at L levels): fold the positive gate into one
        # weight matrix per context, then a batched matmul-add per path.
        weight = gate[:, :, None] * self.z_weight.t()[None]  # [n, in, out]
        value = None if z is None else torch.baddbmm(pre, z, weight)
        if dz is None:
            return value, None
        return value, torch.baddbmm(coef.expand(-1, x.shape[1], -1), dz, weight)


class PICNN(nn.Module):
    """Scalar potential g(x, u), convex in x for every context u, with forward-mode slope.

    Args:
        context_dim: C, width of the context u.
        hidden: widths of the hidden layers.
        x_init_scale: scale of the x coefficients at initialisation (1 for a generic random
            network; small to start nearly constant in x).
        curvature_init: initial coefficient c of the output's quadratic term c(u) x^2 / 2.
    """

    def __init__(
        self,
        context_dim: int,
        hidden: Sequence[int] = (32, 32),
        x_init_scale: float = 1.0,
        curvature_init: float = 0.01,
    ):
        super().__init__()
        widths = [0, *hidden]
        self.layers = nn.ModuleList(
            PICNNLayer(context_dim, widths[i], widths[i + 1], x_init_scale)
            for i in range(len(hidden))
        )
        self.output = PICNNLayer(context_dim, widths[-1], 1, x_init_scale)
        # Non-negative curvature gate: adds c(u) x^2 / 2 (convex) so T can be steep anywhere.
        self.curvature = nn.Linear(context_dim, 1)
        nn.init.zeros_(self.curvature.weight)
        nn.init.constant_(self.curvature.bias, _softplus_inverse(curvature_init))

    def forward(
        self, x: Tensor, context: Tensor, with_slope: bool = True, with_potential: bool = True
    ) -> tuple[Tensor | None, Tensor | None]:
        """Potential g(x, u) and slope dg/dx.

        Args:
            x: [n] (one input per context) or [n, L] (L inputs per context).
            context: [n, C].
            with_slope: False skips the forward-mode slope (returned as None), e.g. to take
                dg/dx by ``autograd.grad`` instead, as CondOT does.
            with_potential: False skips what only the potential needs (the last hidden layer's
                activation values and the output's value path), for the map T alone.

        Returns:
            (potential, slope), each shaped like ``x`` (or None where skipped).
        """
        squeeze = x.dim() == 1
        x3 = (x[:, None] if squeeze else x)[..., None]  # [n, L, 1]
        z = dz = None
        for i, layer in enumerate(self.layers):
            pre, dpre = layer(x3, z, dz, context)
            last = i == len(self.layers) - 1
            z = F.softplus(pre) if with_potential or not last else None
            if with_slope:  # softplus' = sigmoid (chain rule, forward mode)
                dz = torch.sigmoid(pre) * dpre
        pre, dpre = self.output(x3, z, dz, context)
        curv = F.softplus(self.curvature(context))[:, None, :]  # [n, 1, 1]
        potential = (pre + 0.5 * curv * x3 * x3)[..., 0] if with_potential else None
        slope = (dpre + curv * x3)[..., 0] if with_slope else None
        if squeeze:
            return tuple(None if t is None else t[:, 0] for t in (potential, slope))
        return potential, slope


class MonotoneInterpolant(nn.Module):
    """Fixed convex potential G0 whose derivative is a piecewise-linear non-decreasing map.

    G0'(x) interpolates knots (x_k, v_k), x strictly increasing, v non-decreasing, and extends
    as the constant v_0 / v_K outside [x_0, x_K], so G0 is convex on the whole line. G0 is the
    exact integral of that map (piecewise quadratic), G0(x_0) = 0.
    """

    def __init__(self, n_knots: int):
        super().__init__()
        grid = torch.linspace(0.0, 1.0, n_knots)
        self.register_buffer("knot_x", grid.clone())
        self.register_buffer("knot_value", grid.clone())  # identity map until set

    @torch.no_grad()
    def set_knots(self, knot_x: Tensor, knot_value: Tensor) -> None:
        knot_x = torch.as_tensor(knot_x, dtype=self.knot_x.dtype)
        knot_value = torch.as_tensor(knot_value, dtype=self.knot_value.dtype)
        if knot_x.shape != self.knot_x.shape or knot_value.shape != self.knot_value.shape:
            raise ValueError(f"expected {len(self.knot_x)} knots")
        if not bool((knot_x.diff() > 0).all()) or not bool((knot_value.diff() >= 0).all()):
            raise ValueError("knots must have strictly increasing x and non-decreasing values")
        self.knot_x.copy_(knot_x)
        self.knot_value.copy_(knot_value)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(G0(x), G0'(x)), each shaped like ``x``."""
        kx, kv = self.knot_x.to(x.dtype), self.knot_value.to(x.dtype)
        width = kx.diff()
        rate = kv.diff() / width  # slope of G0' on each segment
        # Potential at each knot: cumulative trapezoid of the map.
        at_knot = torch.cat([kx.new_zeros(1), torch.cumsum(0.5 * (kv[1:] + kv[:-1]) * width, 0)])
        idx = (torch.searchsorted(kx, x.detach().contiguous(), right=True) - 1).clamp(
            0, len(kx) - 2
        )
        offset = x - kx[idx]
        inside = torch.minimum(offset.clamp(min=0.0), width[idx])
        slope = kv[idx] + rate[idx] * inside
        potential = (
            at_knot[idx]
            + kv[idx] * inside
            + 0.5 * rate[idx] * inside**2
            + slope * (offset - inside)
        )
        return potential, slope


def marginal_quantile_knots(
    targets: np.ndarray, n_knots: int, linear_mix: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    """Knots (tau_k, q_k) of a strictly increasing approximation of the targets' quantiles.

    q = (1 - linear_mix) * empirical quantile + linear_mix * (min + (max - min) * tau): the
    small linear part keeps q strictly increasing when the targets have atoms (k / n success
    rates), so its inverse (the marginal CDF) is a finite-slope map too.

    Returns:
        levels [n_knots] and values [n_knots], float64.
    """
    targets = np.asarray(targets, dtype=np.float64)
    levels = np.linspace(0.0, 1.0, n_knots)
    if targets.size == 0:
        return levels, levels.copy()
    empirical = np.quantile(targets, levels)
    low, high = float(empirical[0]), float(empirical[-1])
    span = max(high - low, 1e-2)  # a single repeated value still gets a small spread
    values = (1.0 - linear_mix) * empirical + linear_mix * (low + span * levels)
    return levels, values


class QuantileMapNet(nn.Module):
    """T(tau | h) = s(u) * Q0(tau) + dg/dtau(tau, u) with u = phi(h): monotone in tau.

    The potential is s(u) * G0(tau) + g(tau, u): G0 is a fixed convex potential whose derivative
    Q0 is the marginal quantile function of the training targets (:meth:`init_marginal`),
    s(u) = softplus(.) > 0 a context scale, g a :class:`PICNN`. Both parts are convex in tau, so
    T is non-decreasing in tau for every h by construction.

    At initialisation s = 1 and the PICNN's x-path is scaled by ``x_init_scale``, so
    T(tau | h) = Q0(tau) + O(x_init_scale + curvature_init) for every h: the map starts at the
    unconditional OT solution instead of CondOT's ~100x-off-scale start.

    With ``inverse=True`` in :meth:`init_marginal` the same network starts at the marginal CDF
    (the inverse map): that is the dual potential f of the min-max, whose gradient maps targets
    back to levels.

    Args:
        hidden_dim: D, width of the (standardised) hidden states.
        context_hidden: hidden widths of the context MLP phi.
        context_dim: C, width of u0 = phi(h).
        picnn_hidden: hidden widths of the PICNN.
        n_knots: knots of the piecewise-linear marginal map Q0.
        x_init_scale: initial scale of the PICNN's x coefficients.
        curvature_init: initial coefficient of the PICNN's quadratic term.
        barrier: curvature kappa of a fixed convex barrier kappa/2 * dist(x, [0, 1])^2. Zero for
            the quantile map (tau never leaves [0, 1]); positive for the dual potential f, so
            f' -> +-inf outside [0, 1] and g's objective f(T) - tau T is bounded below: without
            it a saturating f' (a CDF) lets g push T to infinity.
    """

    def __init__(
        self,
        hidden_dim: int,
        context_hidden: Sequence[int] = (64,),
        context_dim: int = 16,
        picnn_hidden: Sequence[int] = (32,),
        n_knots: int = 65,
        x_init_scale: float = 0.05,
        curvature_init: float = 0.001,
        barrier: float = 0.0,
    ):
        super().__init__()
        self.barrier = float(barrier)
        widths = [hidden_dim, *context_hidden]
        mlp: list[nn.Module] = []
        for a, b in zip(widths[:-1], widths[1:], strict=True):
            mlp += [nn.Linear(a, b), nn.SiLU()]
        mlp.append(nn.Linear(widths[-1], context_dim))
        self.context_mlp = nn.Sequential(*mlp)
        self.picnn = PICNN(context_dim, picnn_hidden, x_init_scale, curvature_init)
        # The output's affine x-term learns at once from zero; starting it at zero keeps the
        # initial map on Q0.
        nn.init.zeros_(self.picnn.output.x_coefficient.weight)
        nn.init.zeros_(self.picnn.output.x_coefficient.bias)
        self.marginal_map = MonotoneInterpolant(n_knots)
        # Positive scale of the marginal map per context; starts at exactly 1.
        self.marginal_scale = nn.Linear(context_dim, 1)
        nn.init.zeros_(self.marginal_scale.weight)
        nn.init.constant_(self.marginal_scale.bias, _SOFTPLUS_INV_ONE)
        self._chunk_elements = 1 << 21
        self._max_width = max([1, *picnn_hidden])

    @torch.no_grad()
    def init_marginal(
        self, targets: np.ndarray, inverse: bool = False, source: np.ndarray | None = None
    ) -> None:
        """Set Q0 to the marginal quantile function of ``targets`` (its CDF if ``inverse``).

        Args:
            targets: training targets [N].
            inverse: start at the inverse map (targets -> source), for the dual potential f.
            source: the source points [n_knots] (strictly increasing) that the levels of the
                knots map to, when the map's input is not tau itself but a fixed monotone
                function of it (the PRM-score source of ``ot``); default: the levels.
        """
        levels, values = marginal_quantile_knots(targets, len(self.marginal_map.knot_x))
        if source is not None:
            levels = np.asarray(source, dtype=np.float64)
        if inverse:
            self.marginal_map.set_knots(torch.as_tensor(values), torch.as_tensor(levels))
        else:
            self.marginal_map.set_knots(torch.as_tensor(levels), torch.as_tensor(values))

    def embed(self, hidden_std: Tensor) -> Tensor:
        """Context u0 = phi(h) [n, C] from standardised hidden states [n, D]."""
        return self.context_mlp(hidden_std)

    def potential(
        self, context: Tensor, x: Tensor, with_slope: bool = True, with_potential: bool = True
    ) -> tuple[Tensor | None, Tensor | None]:
        """Potential and its x-derivative (the map), each shaped like ``x`` ([n] or [n, L]).

        ``with_slope=False`` skips the forward-mode slope and ``with_potential=False`` the
        potential (returned as None).
        """
        marginal_potential, marginal_slope = self.marginal_map(x)
        scale = F.softplus(self.marginal_scale(context))  # [n, 1]
        if x.dim() == 1:
            scale = scale[:, 0]
        learned_potential, learned_slope = self.picnn(x, context, with_slope, with_potential)
        potential = slope = None
        if self.barrier:  # only f has one; g's hot path skips it
            below, above = (-x).clamp(min=0.0), (x - 1.0).clamp(min=0.0)
        if with_potential:
            potential = scale * marginal_potential + learned_potential
            if self.barrier:
                potential = potential + 0.5 * self.barrier * (below**2 + above**2)
        if with_slope:
            slope = scale * marginal_slope + learned_slope
            if self.barrier:
                slope = slope + self.barrier * (above - below)
        return potential, slope

    def quantile(self, context: Tensor, tau: Tensor) -> Tensor:
        """T(tau | h): tau [n] (one level per record) or [n, L] -> same shape."""
        return self.potential(context, tau, with_potential=False)[1]

    def quantile_levels(self, context: Tensor, levels: Tensor) -> Tensor:
        """T at shared levels [L] for every context: [n, L], computed in row chunks.

        The context is embedded once by the caller; chunks keep the [rows, L, width]
        activations small enough to stay in cache.
        """
        n, n_levels = context.shape[0], levels.shape[0]
        levels = levels.to(context.dtype)
        rows = max(1, self._chunk_elements // max(1, n_levels * self._max_width))
        out = [self.quantile(c, levels.expand(c.shape[0], n_levels)) for c in context.split(rows)]
        return torch.cat(out) if out else context.new_zeros(n, n_levels)
