"""``mono``: the monotone quantile map trained by the integrated pinball loss.

Worlds of 3000 records, small networks, 400 steps. Tolerances (mean absolute error over 50
mid-point levels) were set from seeds 0 and 1 with ~1.5x headroom: Beta(2, 5) from the identity
map 0.023 (the identity itself is 0.19 off); the Gaussian-logit world 0.019-0.020, 0.08x the
marginal quantile function's error; discrete contexts <= 0.038 per context.
"""

from __future__ import annotations

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

from dprm.metrics import pinball_rho as pinball
from dprm.models import load
from dprm.models.fit import fit

pytestmark = pytest.mark.usefixtures("one_thread")


def test_pinball_is_the_check_loss():
    y = torch.tensor([0.2, 0.2, 0.8])
    q = torch.tensor([0.5, 0.1, 0.8])
    tau = torch.tensor([0.9, 0.9, 0.3])
    torch.testing.assert_close(pinball(y, q, tau), torch.tensor([0.1 * 0.3, 0.9 * 0.1, 0.0]))


def test_beta25_from_the_identity_map():
    """Training alone (no marginal initialisation) turns U(0, 1) into Beta(2, 5)."""
    data = beta_world(3000, seed=0)
    model = fit("mono", data, overrides={**STEPS, "init_marginal": "false"}, seed=0, progress=False)
    q = model.quantiles(np.zeros((1, 3), np.float32), MIDPOINTS)[0]
    identity_error = np.abs(MIDPOINTS - beta25_quantile(MIDPOINTS)).mean()
    error = np.abs(q - beta25_quantile(MIDPOINTS)).mean()
    assert error < 0.035 < identity_error / 5


def test_gaussian_logit_world_matches_closed_form(tmp_path):
    data = gaussian_logit_world(3000, seed=1)
    model = fit("mono", data, overrides=STEPS, seed=1, progress=False)
    hidden = np.random.default_rng(9).normal(size=(500, 3)).astype(np.float32)
    truth = gaussian_logit_quantile(hidden, MIDPOINTS)
    q = model.quantiles(hidden, MIDPOINTS)
    marginal = np.quantile(data.records["success_prob"].to_numpy(), MIDPOINTS)
    error, baseline = np.abs(q - truth).mean(), np.abs(marginal[None, :] - truth).mean()
    assert error < 0.03 and error < 0.15 * baseline
    assert (np.diff(model.quantiles(hidden * 10, np.linspace(0, 1, 101)), axis=1) >= 0).all()
    model.save(tmp_path / "m")
    np.testing.assert_array_equal(load(tmp_path / "m").quantiles(hidden, MIDPOINTS), q)


def test_discrete_contexts_match_empirical_quantiles():
    data, context = discrete_context_world(3000, seed=0)
    model = fit("mono", data, overrides=STEPS, seed=0, progress=False)
    y = data.records["success_prob"].to_numpy(np.float64)
    for c in range(3):
        q = model.quantiles(np.eye(3, dtype=np.float32)[c : c + 1], MIDPOINTS)[0]
        assert np.abs(q - np.quantile(y[context == c], MIDPOINTS)).mean() < 0.06, c
