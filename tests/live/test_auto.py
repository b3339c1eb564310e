"""``dprm solve --auto-cost``: live budgets by dprm ias's auto rule (no GPU, no models)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dprm.config import ConfigError


def test_auto_budgets_match_the_offline_rule(tiny_world):
    from dprm.data import read_bon_set
    from dprm.ias import estimate_from_model
    from dprm.ias.learnt.auto import AutoAllocator, pool_share
    from dprm.ias.selection.rules import Candidates, rule_table
    from dprm.live.bon_auto import auto_budgets
    from dprm.live.calibrated_prm import States
    from dprm.models.raw_score import RawScoreCalibrator

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    bon, train = read_bon_set(paths["id/bon"]), read_bon_set(paths["train/bon"])
    calibrator = RawScoreCalibrator(bon.hidden_dim)
    cprm = SimpleNamespace(calibrator=calibrator, beta=0.1, n_max=64, m_levels=100)
    states = States(
        bon.questions["prm_score"].to_numpy(np.float32),
        np.asarray(bon.hidden, np.float32),
        np.zeros(len(bon), bool),
    )
    live = auto_budgets(cprm, states, str(paths["train/bon"]), 0.1)
    assert live.sum() == round(0.1 * 64 * len(bon)) and (live >= 1).all()
    cands = Candidates.from_bon(train)
    offline = AutoAllocator(rule_table(cands, "highest-last"), pool_share(cands))
    share, _ = offline.floor_share(estimate_from_model(calibrator, train))
    np.testing.assert_array_equal(
        live, offline.budgets(estimate_from_model(calibrator, bon), 0.1, share)
    )


def test_auto_settings_fail_fast():
    from dprm.live import SolveConfig

    base = dict(mode="bon", questions="q", generator="g", prm="p", calibrator="c")
    with pytest.raises(ConfigError, match="go together"):
        SolveConfig(**base, auto_cost=0.1)
    with pytest.raises(ConfigError, match="bon only"):
        SolveConfig(**{**base, "mode": "beam"}, auto_cost=0.1, train_bon="t", n_max=64)
    assert SolveConfig(**base, auto_cost=0.1, train_bon="t").auto_cost == 0.1
