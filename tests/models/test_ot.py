"""``ot``: the paper's conditional OT map (CondOT dual min-max) against closed forms.

Worlds of 3000 records, small networks, 400 steps (800 at lr 4e-3 for the Gaussian-logit world: with
the default slower f, f_every 4, and weight averaging it needs them; at 400 steps it is 0.055 off,
with f every 2nd step 0.029-0.035; at the default lr 2e-3 the last iterate at 800 steps is 0.038
off, and the calibration-area selection picks step 100, 0.16 off: that criterion cannot tell a still
nearly marginal map from a conditional one, both are calibrated). Tolerances (mean absolute error
over 50 mid-point levels) were set from seeds 0 and 1 with ~1.5x headroom: Beta(2, 5) from the
identity map 0.028 at 800 steps (the identity itself is 0.19 off); from the default marginal start
it stays < 0.01 (the min-max does not drift away from the optimum it starts at); the Gaussian-logit
world 0.024-0.025 at 800 steps, 0.10x the marginal quantile function's error; discrete contexts <=
0.042 per context against numpy's per-context empirical quantiles.

The closed-form tests train one map (``ensemble_size`` 1, ``ONE``): recovering the truth is a
property of each member's min-max, and the default ensemble of 4 costs ~3.4x the time; the
ensemble's own tests (mean of monotone members, seeds, saving) are at the end.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from closed_form import (
    MIDPOINTS,
    STEPS,
    beta25_quantile,
    beta_world,
    discrete_context_world,
    gaussian_logit_quantile,
    gaussian_logit_world,
)

from dprm.config import ConfigError
from dprm.metrics import LEVELS_101
from dprm.models import load
from dprm.models.fit import fit
from dprm.models.ot import OTCalibrator

HIDDEN = np.random.default_rng(9).normal(size=(500, 3)).astype(np.float32)
#: one map, not the default ensemble (module docstring)
ONE = {**STEPS, "ensemble_size": "1"}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def logit_fit():
    with torch.random.fork_rng():
        torch.set_num_threads(1)
        data = gaussian_logit_world(3000, seed=1)
        overrides = {**ONE, "max_steps": "800", "lr": "4e-3", "lr_f": "4e-3"}
        return data, fit("ot", data, overrides=overrides, seed=1, progress=False)


@pytest.mark.parametrize("init_marginal", [False, True])
def test_beta25_unconditional(init_marginal):
    data = beta_world(3000, seed=0)
    # from the identity map: 800 steps at the default lr 2e-3 (0.041 off after 400)
    overrides = {**ONE, "init_marginal": str(init_marginal), "max_steps": "800"}
    if init_marginal:
        overrides["max_steps"] = "150"
    model = fit("ot", data, overrides=overrides, seed=0, progress=False)
    q = model.quantiles(HIDDEN[:50], MIDPOINTS)
    error = np.abs(q - beta25_quantile(MIDPOINTS)[None, :]).mean()
    assert error < (0.01 if init_marginal else 0.04)


@pytest.mark.slow
def test_gaussian_logit_world_matches_closed_form(logit_fit):
    data, model = logit_fit
    truth = gaussian_logit_quantile(HIDDEN, MIDPOINTS)
    marginal = np.quantile(data.records["success_prob"].to_numpy(), MIDPOINTS)
    error = np.abs(model.quantiles(HIDDEN, MIDPOINTS) - truth).mean()
    baseline = np.abs(marginal[None, :] - truth).mean()
    assert error < 0.04 and error < 0.15 * baseline


def test_discrete_contexts_match_empirical_quantiles():
    data, context = discrete_context_world(3000, seed=0)
    model = fit("ot", data, overrides=ONE, seed=0, progress=False)
    y = data.records["success_prob"].to_numpy(np.float64)
    for c in range(3):
        q = model.quantiles(np.eye(3, dtype=np.float32)[c : c + 1], MIDPOINTS)[0]
        assert np.abs(q - np.quantile(y[context == c], MIDPOINTS)).mean() < 0.06, c


def test_monotone_in_unit_interval_and_any_level(logit_fit):
    _, model = logit_fit
    extreme = np.concatenate([HIDDEN, HIDDEN * 20]).astype(np.float32)
    q = model.quantiles(extreme, LEVELS_101)
    assert (np.diff(q, axis=1) >= 0).all() and q.min() >= 0 and q.max() <= 1
    odd = model.quantiles(extreme[:5], [0.123, 0.5, 0.987654])
    assert odd.shape == (5, 3) and (np.diff(odd, axis=1) >= 0).all()
    p = model.point_estimate(extreme)
    assert p.shape == (len(extreme),) and ((p >= 0) & (p <= 1)).all()


def test_save_load_identical_quantiles(logit_fit, tmp_path):
    _, model = logit_fit
    model.save(tmp_path / "ot", extra_files={"history.json": model.history})
    loaded = load(tmp_path / "ot")
    assert isinstance(loaded, OTCalibrator) and loaded.info == model.info
    np.testing.assert_array_equal(
        loaded.quantiles(HIDDEN, LEVELS_101), model.quantiles(HIDDEN, LEVELS_101)
    )
    assert loaded.config == model.config


def test_same_seed_same_weights():
    data = gaussian_logit_world(600, seed=3)
    fast = {"max_steps": "30", "warmup_steps": "10", "eval_every": "10", "batch_size": "64"}
    a = fit("ot", data, overrides=fast, seed=5, progress=False).state_dict()
    b = fit("ot", data, overrides=fast, seed=5, progress=False).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(k.startswith("dual.") for k in a)  # f is saved with g


def test_both_potentials_convex_by_parameterisation(logit_fit):
    """f and g of a trained model (every member): slopes non-decreasing on a fine grid (no clamp
    anywhere)."""
    _, model = logit_fit
    h = model.standardizer(torch.as_tensor(HIDDEN[:64]))
    x = torch.linspace(-0.5, 1.5, 801).expand(64, -1)
    with torch.no_grad():
        for net in (net for pair in model.potentials for net in pair):
            _, slope = net.potential(net.embed(h), x)
            assert (slope.diff(dim=1) >= -1e-5).all()


def test_transport_loss_gradient_is_the_objectives():
    """g's loss backpropagates through g alone, yet its gradient and value are those of
    E f(T, h) - tau T with T = dg/dtau taken by double backward (CondOT), in float64."""
    torch.manual_seed(0)
    model = OTCalibrator(3, {"context_hidden": "8", "picnn_hidden": "8,8"}).double()
    model.init_marginal(np.random.default_rng(0).beta(2, 5, 500))
    for p in model.parameters():  # move off the initial optimum, where the gradient is ~0
        p.data.add_(0.3 * torch.randn_like(p))
    hidden = torch.randn(64, 3, dtype=torch.float64)
    tau = torch.rand(64, dtype=torch.float64)
    context_f = model.dual.embed(hidden).detach()
    g_params = list(model.net.parameters())

    loss, _ = model.transport_loss(model.net.embed(hidden), tau, context_f)
    ours = torch.autograd.grad(loss, g_params, allow_unused=True)

    x = tau.clone().requires_grad_(True)
    potential, _ = model.net.potential(model.net.embed(hidden), x, with_slope=False)
    (slope,) = torch.autograd.grad(potential.sum(), x, create_graph=True)
    f_of_t, _ = model.dual.potential(context_f, slope, with_slope=False)
    reference = (f_of_t - tau * slope).mean()
    expected = torch.autograd.grad(reference, g_params, allow_unused=True)

    torch.testing.assert_close(loss, reference, rtol=0, atol=1e-12)
    assert (
        max(float(e.abs().max()) for e in expected if e is not None) > 1e-4
    )  # a real gradient, not ~0
    for param, got, want in zip(g_params, ours, expected, strict=True):
        # A parameter T does not depend on (e.g. the potential's constant shift) has no gradient.
        zero = torch.zeros_like(param)
        got, want = zero if got is None else got, zero if want is None else want
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)


def test_prm_score_source_monotone_labelled_and_reloads(tmp_path):
    """The PRM-score reading of the source: Q(tau | h) = T(S(tau), h) with S the training
    scores' quantile function; monotone in tau, recorded in the config, saved with S."""
    data = gaussian_logit_world(1500, seed=2)
    overrides = {**ONE, "max_steps": "150", "source": "prm_score"}
    model = fit("ot", data, overrides=overrides, seed=0, progress=False)
    assert model.info["config"]["source"] == "prm_score"
    scores = np.sort(data.records["prm_score"].to_numpy())
    s = model.source_map(torch.tensor([0.0, 0.5, 1.0]))[1].numpy()
    assert abs(s[0] - scores[0]) < 0.02 and abs(s[2] - scores[-1]) < 0.02
    assert abs(s[1] - np.median(scores)) < 0.02  # level 0.5 is the median training score
    q = model.quantiles(HIDDEN, LEVELS_101)
    assert (np.diff(q, axis=1) >= 0).all() and q.min() >= 0 and q.max() <= 1
    truth = gaussian_logit_quantile(HIDDEN, MIDPOINTS)
    marginal = np.quantile(data.records["success_prob"].to_numpy(), MIDPOINTS)
    error = np.abs(model.quantiles(HIDDEN, MIDPOINTS) - truth).mean()
    assert error < 0.5 * np.abs(marginal[None, :] - truth).mean()  # it learned h's effect
    model.save(tmp_path / "ot")
    loaded = load(tmp_path / "ot")
    np.testing.assert_array_equal(loaded.quantiles(HIDDEN, LEVELS_101), q)


def test_prm_score_source_starts_at_the_marginal_quantiles():
    data = beta_world(2000, seed=0)
    model = OTCalibrator(3, {"source": "prm_score"})

    class Stub:  # what initialise reads from the trainer
        target = torch.as_tensor(data.records["success_prob"].to_numpy(np.float32, copy=True))
        score = torch.as_tensor(data.records["prm_score"].to_numpy(np.float32, copy=True))

    model.initialise(Stub())
    q = model.quantiles(HIDDEN[:20], MIDPOINTS)
    assert np.abs(q - beta25_quantile(MIDPOINTS)[None, :]).mean() < 0.03


def test_unknown_source_is_rejected():
    with pytest.raises(ConfigError, match="source"):
        OTCalibrator(3, {"source": "scores"})


@pytest.fixture(scope="module")
def ensemble_fit():
    with torch.random.fork_rng():
        torch.set_num_threads(1)
        data = gaussian_logit_world(600, seed=3)
        fast = {"max_steps": "40", "warmup_steps": "10", "eval_every": "10", "batch_size": "64"}
        return (
            data,
            fast,
            fit("ot", data, overrides={**fast, "ensemble_size": "3"}, seed=5, progress=False),
        )


def test_ensemble_is_the_mean_of_monotone_members(ensemble_fit):
    """Q(tau | h) = mean_k T_k(tau | h): monotone, in [0, 1], and the members differ."""
    _, _, model = ensemble_fit
    extreme = np.concatenate([HIDDEN, HIDDEN * 20]).astype(np.float32)
    q = model.quantiles(extreme, LEVELS_101)
    assert (np.diff(q, axis=1) >= 0).all() and q.min() >= 0 and q.max() <= 1
    with torch.no_grad():
        hidden = torch.as_tensor(extreme)
        levels = torch.as_tensor(LEVELS_101, dtype=torch.float32)
        members = [
            model.quantile_function(g.embed(model.standardizer(hidden)), g).quantile(levels)
            for g, _ in model.potentials
        ]
    assert len(members) == 3
    np.testing.assert_allclose(q, torch.stack(members).mean(0).numpy(), atol=1e-6)
    assert (members[0] - members[1]).abs().max() > 1e-3  # independent inits and levels


def test_ensemble_deterministic_given_seed_and_saved_whole(ensemble_fit, tmp_path):
    data, fast, model = ensemble_fit
    again = fit("ot", data, overrides={**fast, "ensemble_size": "3"}, seed=5, progress=False)
    a, b = model.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(k.startswith("members_g.1.") for k in a) and any(
        k.startswith("members_f.1.") for k in a
    )
    model.save(tmp_path / "ens")
    loaded = load(tmp_path / "ens")
    assert loaded.config["ensemble_size"] == 3
    np.testing.assert_array_equal(
        loaded.quantiles(HIDDEN, LEVELS_101), model.quantiles(HIDDEN, LEVELS_101)
    )


def test_single_map_keeps_its_weight_names_and_old_configs_load(tmp_path):
    """ensemble_size 1 is the map as before (same weight names); a config saved before the key
    existed loads as one map whatever the default is."""
    data = gaussian_logit_world(600, seed=3)
    fast = {"max_steps": "20", "warmup_steps": "10", "eval_every": "10", "batch_size": "64"}
    model = fit("ot", data, overrides={**fast, "ensemble_size": "1"}, seed=5, progress=False)
    assert {k.split(".")[0] for k in model.state_dict()} == {"standardizer", "net", "dual"}
    model.save(tmp_path / "old")
    path = tmp_path / "old" / "config.json"
    saved = json.loads(path.read_text())
    del saved["config"]["ensemble_size"]  # as written before ensemble_size existed
    path.write_text(json.dumps(saved))
    loaded = load(tmp_path / "old")
    assert loaded.settings.ensemble_size == 1
    np.testing.assert_array_equal(
        loaded.quantiles(HIDDEN, LEVELS_101), model.quantiles(HIDDEN, LEVELS_101)
    )


def test_shared_batches_members_differ_by_init_and_levels_only():
    """With shared batches member 0 trains exactly as a single map would; with independent
    ones it starts as the single map (same seed, built first) but sees other batches."""
    data = gaussian_logit_world(600, seed=3)
    # no averaging and only the last step eligible: every member's last iterate is returned
    fast = {"max_steps": "20", "warmup_steps": "20", "eval_every": "10", "batch_size": "64"}
    fast["ema_decay"] = "0"
    single = fit("ot", data, overrides={**fast, "ensemble_size": "1"}, seed=5, progress=False)
    single = single.state_dict()
    for batches, same in (("shared", True), ("independent", False)):
        overrides = {**fast, "ensemble_size": "2", "ensemble_batches": batches}
        pair = fit("ot", data, overrides=overrides, seed=5, progress=False).state_dict()
        assert all(k in pair for k in single)
        assert all(torch.equal(pair[k], single[k]) for k in single) == same, batches


def test_ensemble_settings_are_checked():
    with pytest.raises(ConfigError, match="ensemble_size"):
        OTCalibrator(3, {"ensemble_size": 0})
    with pytest.raises(ConfigError, match="ensemble_batches"):
        OTCalibrator(3, {"ensemble_size": 2, "ensemble_batches": "bootstrap"})
