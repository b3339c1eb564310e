"""PICNN and QuantileMapNet: convexity by parameterisation, forward-mode slope, initialisation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dprm.models.picnn import (
    PICNN,
    MonotoneInterpolant,
    QuantileMapNet,
    marginal_quantile_knots,
)

SEEDS = st.integers(0, 2**31 - 1)


def random_picnn(seed: int, context_dim: int = 5, hidden=(7, 6, 5)) -> PICNN:
    """A PICNN with *every* parameter redrawn at random (large scales, any sign)."""
    torch.manual_seed(seed)
    net = PICNN(context_dim, hidden, x_init_scale=1.0).double()
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0.0, 2.0)
    return net


def random_map_net(seed: int, barrier: float = 3.0) -> QuantileMapNet:
    torch.manual_seed(seed)
    net = QuantileMapNet(
        6,
        context_hidden=(8,),
        context_dim=4,
        picnn_hidden=(6, 5),
        n_knots=9,
        x_init_scale=1.0,
        barrier=barrier,
    ).double()
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0.0, 1.5)
    rng = np.random.default_rng(seed)
    net.init_marginal(rng.beta(0.5, 0.8, 200), inverse=bool(seed % 2))
    return net


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS)
def test_picnn_is_convex_along_random_segments(seed):
    net = random_picnn(seed)
    gen = torch.Generator().manual_seed(seed)
    n = 64
    context = torch.randn(n, 5, generator=gen, dtype=torch.float64) * 2
    a = torch.randn(n, generator=gen, dtype=torch.float64) * 3
    b = torch.randn(n, generator=gen, dtype=torch.float64) * 3
    t = torch.rand(n, 9, generator=gen, dtype=torch.float64)
    g_a, _ = net(a, context)
    g_b, _ = net(b, context)
    g_mid, _ = net(t * a[:, None] + (1 - t) * b[:, None], context)
    chord = t * g_a[:, None] + (1 - t) * g_b[:, None]
    scale = 1.0 + torch.stack([g_a.abs(), g_b.abs()]).amax(0)[:, None]
    assert (chord - g_mid >= -1e-9 * scale).all()


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS)
def test_second_derivative_is_non_negative(seed):
    net = random_picnn(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    context = torch.randn(128, 5, generator=gen, dtype=torch.float64) * 2
    x = (torch.randn(128, generator=gen, dtype=torch.float64) * 3).requires_grad_(True)
    _, slope = net(x, context)
    (second,) = torch.autograd.grad(slope.sum(), x)
    assert (second >= -1e-10).all()


@settings(max_examples=15, deadline=None)
@given(seed=SEEDS)
def test_quantile_map_net_is_convex_and_monotone(seed):
    """Base potential (scaled), PICNN and barrier together: still convex, T non-decreasing."""
    net = random_map_net(seed)
    gen = torch.Generator().manual_seed(seed)
    context = net.embed(torch.randn(32, 6, generator=gen, dtype=torch.float64))
    x = torch.linspace(-0.5, 1.5, 401, dtype=torch.float64).expand(32, -1)
    potential, slope = net.potential(context, x)
    assert (slope.diff(dim=1) >= -1e-10).all()
    # discrete convexity: second differences of the potential on a uniform grid (random weights
    # make potentials of ~1e4 from cancelling larger terms: allow float64 rounding relative to it)
    rounding = 1e-9 * (1 + potential.abs().amax(dim=1, keepdim=True))
    assert (potential.diff(dim=1).diff(dim=1) >= -rounding).all()


@pytest.mark.parametrize("shape", [(50,), (7, 11)])
@pytest.mark.parametrize("wild", [False, True])
def test_forward_slope_equals_autograd_float64(shape, wild):
    """Forward-mode slope = reverse-mode autograd to 1e-8 (relative to the slope's scale)."""
    if wild:  # every parameter redrawn with std 2: slopes reach ~1e3, so compare relatively
        net = random_picnn(3)
    else:
        torch.manual_seed(3)
        net = PICNN(5, (16, 16, 8), x_init_scale=1.0).double()
    gen = torch.Generator().manual_seed(0)
    context = torch.randn(shape[0], 5, generator=gen, dtype=torch.float64)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_(True)
    potential, slope = net(x, context)
    assert potential.shape == slope.shape == x.shape
    (reference,) = torch.autograd.grad(potential.sum(), x)
    scale = max(1.0, reference.abs().max().item())
    torch.testing.assert_close(slope, reference, atol=1e-8 * scale, rtol=0)


def test_map_net_slope_equals_autograd_including_base_and_barrier():
    net = random_map_net(4)
    gen = torch.Generator().manual_seed(1)
    context = net.embed(torch.randn(40, 6, generator=gen, dtype=torch.float64))
    # points inside, at and outside the knots and [0, 1]
    x = (torch.rand(40, 13, generator=gen, dtype=torch.float64) * 2.4 - 0.7).requires_grad_(True)
    potential, slope = net.potential(context, x)
    (reference,) = torch.autograd.grad(potential.sum(), x)
    scale = max(1.0, reference.abs().max().item())
    torch.testing.assert_close(slope, reference, atol=1e-8 * scale, rtol=0)


def test_monotone_interpolant_matches_numpy_and_its_integral():
    base = MonotoneInterpolant(6).double()
    knots_x = torch.tensor([0.0, 0.1, 0.3, 0.35, 0.8, 1.0], dtype=torch.float64)
    values = torch.tensor([0.0, 0.0, 0.2, 0.6, 0.61, 0.95], dtype=torch.float64)
    base.set_knots(knots_x, values)
    x = torch.linspace(-0.5, 1.5, 2001, dtype=torch.float64)
    potential, slope = base(x)
    np.testing.assert_allclose(
        slope.numpy(), np.interp(x.numpy(), knots_x.numpy(), values.numpy()), atol=1e-12
    )
    # potential = integral of the slope from the first knot (trapezoid on a fine grid)
    integral = np.concatenate([[0.0], np.cumsum(0.5 * (slope[1:] + slope[:-1]).numpy() * 1e-3)])
    np.testing.assert_allclose(
        potential.numpy() - potential[500].item(), integral - integral[500], atol=1e-6
    )
    assert abs(potential[500].item()) < 1e-12  # G0(x_0) = 0 at x_0 = 0
    with pytest.raises(ValueError, match="strictly increasing"):
        base.set_knots(torch.zeros(6, dtype=torch.float64), values)


def test_marginal_knots_are_strictly_increasing_with_atoms():
    y = np.repeat(np.arange(9) / 8, [400, 50, 30, 20, 20, 20, 30, 50, 80])
    levels, values = marginal_quantile_knots(y, 65)
    assert (np.diff(values) > 0).all()
    empirical = np.quantile(y, levels)
    assert np.abs(values - empirical).max() <= 0.05 + 1e-12
    # a single repeated value still gives a valid, strictly increasing map
    _, flat = marginal_quantile_knots(np.full(10, 0.25), 5)
    assert (np.diff(flat) > 0).all()


def test_initial_map_is_the_marginal_quantile_function():
    """At init T(tau | h) = Q0(tau) within 1e-2 for any h; Q0 = targets' quantiles within 5 %."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    targets = rng.beta(2.0, 5.0, 5000)
    net = QuantileMapNet(64)
    net.init_marginal(targets)
    hidden = torch.randn(500, 64)  # standardised hidden states
    levels = torch.linspace(0, 1, 101)
    with torch.no_grad():
        t_map = net.quantile_levels(net.embed(hidden), levels)
    empirical = torch.as_tensor(np.quantile(targets, levels.numpy()), dtype=torch.float32)
    base = net.marginal_map(levels)[1]
    assert (t_map - base).abs().max() < 1e-2
    # Q0 is the piecewise-linear interpolation of 65 knots of the (5 % linearised) quantiles
    assert (base - empirical).abs().mean() < 1e-2
    knots = net.marginal_map.knot_x.numpy()
    at_knots = net.marginal_map(torch.as_tensor(knots))[1].numpy()
    assert np.abs(at_knots - np.quantile(targets, knots)).max() <= 0.05 * np.ptp(targets) + 1e-6
    # the dual's init is the inverse map: Q0^-1(Q0(tau)) = tau
    dual = QuantileMapNet(64)
    dual.init_marginal(targets, inverse=True)
    roundtrip = dual.marginal_map(base)[1]
    torch.testing.assert_close(roundtrip, levels, atol=1e-5, rtol=0)


def test_quantile_levels_chunks_agree_with_one_pass():
    net = random_map_net(7)
    context = net.embed(torch.randn(37, 6, dtype=torch.float64))
    levels = torch.linspace(0, 1, 9, dtype=torch.float64)
    whole = net.quantile(context, levels.expand(37, 9))
    net._chunk_elements = 20  # forces one row per chunk
    chunked = net.quantile_levels(context, levels)
    torch.testing.assert_close(chunked, whole)
    per_record = net.quantile(context, levels[3].expand(37))
    torch.testing.assert_close(per_record, whole[:, 3])


@pytest.mark.parametrize("hidden", [(), (6,), (7, 5)])
def test_skipping_slope_or_potential_changes_nothing_else(hidden):
    torch.manual_seed(0)
    net = PICNN(5, hidden, x_init_scale=1.0).double()
    context = torch.randn(9, 5, dtype=torch.float64)
    for x in (torch.rand(9, dtype=torch.float64), torch.rand(9, 4, dtype=torch.float64)):
        potential, slope = net(x, context)
        only_potential, none = net(x, context, with_slope=False)
        none_too, only_slope = net(x, context, with_potential=False)
        assert none is None and none_too is None
        torch.testing.assert_close(only_potential, potential, rtol=0, atol=1e-12)
        torch.testing.assert_close(only_slope, slope, rtol=0, atol=1e-12)
