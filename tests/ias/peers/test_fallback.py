"""What auto-seq runs under a shift, decided before drawing (dprm.ias.peers.fallback): the peer of the
offline choice and the level of its knob that spends the target cost on the training pools."""

from __future__ import annotations

import numpy as np
import pytest

from dprm.ias.peers.fallback import level_for_target, shift_fallback
from dprm.ias.peers.methods import CALIBRATOR_FREE, PEERS, DrawView


def test_level_for_target_bisects_between_the_sweep_levels():
    """A threshold knob whose mean draws are 2 + 20 (level - 0.2) up to 0.9, never-stop at inf."""
    levels = np.array([0.2, 0.5, 0.9, np.inf])
    draws = np.array([2.0, 8.0, 16.0, 64.0])

    def spend(level):
        return 64.0 if not np.isfinite(level) else 2 + 20 * (level - 0.2)

    assert level_for_target(spend, levels, draws, 5.0) == pytest.approx(0.35, abs=1e-6)
    assert spend(level_for_target(spend, levels, draws, 5.0)) <= 5.0
    assert level_for_target(spend, levels, draws, 1.0) == 0.2  # below the sweep: its cheapest
    assert level_for_target(spend, levels, draws, 64.0) == np.inf
    assert level_for_target(spend, levels, draws, 30.0) == 0.9  # beside never-stop: finite
    # a cost that moves in steps: the largest level that stays within the target
    steps = np.array([0.6, 0.75, 0.875, 0.9])
    step_draws = np.array([1.0, 1.0, 3.0, 5.0])

    def step_spend(level):
        return 1.0 if level <= 0.75 else 3.0 if level <= 0.875 else 5.0

    level = level_for_target(step_spend, steps, step_draws, 2.0)
    assert 0.75 - 1e-6 <= level <= 0.75 and step_spend(level) == 1.0
    # the sweep's order does not matter, only its draws
    assert level_for_target(spend, levels[::-1], draws[::-1], 5.0) == pytest.approx(0.35, abs=1e-6)


@pytest.fixture(scope="module")
def train_cands(tiny_world):
    from dprm.data import read_bon_set
    from dprm.ias.selection.rules import Candidates

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    return Candidates.from_bon(read_bon_set(paths["train/bon"], check_hidden=False))


@pytest.mark.parametrize("rule", ["highest-last", "majority"])
def test_the_fallback_is_the_offline_choice(train_cands, rule):
    from dprm.ias.peers.curves import choose_fallback, training_scores
    from dprm.ias.selection.draws import table_weight
    from dprm.ias.selection.rules import uses_answers
    from dprm.ias.sequential.floor import SEQ_TRAIN_TRIALS, training_replay

    weight = table_weight(train_cands, rule, None)
    fb = shift_fallback(train_cands, weight, rule, 0.1, 64)
    replay = training_replay(train_cands, weight, uses_answers(rule), SEQ_TRAIN_TRIALS, 0)
    peer, scores = choose_fallback(train_cands, weight, rule, training_scores(train_cands, None),
                                   SEQ_TRAIN_TRIALS, 0, 64, replay)  # fmt: skip
    assert fb.peer == peer and peer in CALIBRATOR_FREE
    np.testing.assert_equal(fb.scores, scores)
    if PEERS[peer].budget_matched:  # vote-lead: the target mean draws, exactly
        assert fb.level == fb.training_draws == 0.1 * 64


@pytest.mark.parametrize("peer", ["score-raw", "adaptive-consistency", "vote-lead"])
def test_a_peer_runs_at_the_level_that_spends_the_target_on_the_training_pools(
    train_cands, peer, monkeypatch
):  # fmt: skip
    import dprm.ias.peers.fallback
    from dprm.ias.peers.curves import training_scores
    from dprm.ias.sequential.floor import SEQ_TRAIN_TRIALS, training_replay

    monkeypatch.setattr(dprm.ias.peers.fallback, "best_fallback", lambda *a, **k: (peer, {}))
    weight = train_cands.weights["last"]
    for cost in (0.05, 0.1, 0.25):
        target = cost * 64
        fb = shift_fallback(train_cands, weight, "highest-last", cost, 64)
        assert fb.peer == peer
        if PEERS[peer].budget_matched:
            assert fb.level == fb.training_draws == target
            continue
        orders, _ = training_replay(train_cands, weight, False, SEQ_TRAIN_TRIALS, 0)
        view = DrawView.from_pools(train_cands.answer, train_cands.weights["last"],
                                   train_cands.size, orders, n_max=64)  # fmt: skip
        spent = float(PEERS[peer].budgets(view, [fb.level]).mean())
        assert spent == pytest.approx(fb.training_draws)
        levels = np.asarray(PEERS[peer].levels(view, training_scores(train_cands, None)))
        sweep = PEERS[peer].budgets(view, levels).mean(axis=(1, 2))  # [L] mean draws
        if target <= sweep.min():  # the sweep cannot spend so little: its cheapest level
            assert fb.level == levels[np.argmin(sweep)]
            continue
        # the cost grows with the level: at least the dearest sweep level within the target,
        # never more than the target
        assert sweep[sweep <= target].max() - 1e-9 <= spent <= target + 1e-9


def test_without_answers_the_fallback_is_uniform(train_cands):
    import dataclasses

    v1 = dataclasses.replace(train_cands, answer=None)
    fb = shift_fallback(v1, v1.weights["last"], "highest-last", 0.25, 64)
    assert (fb.peer, fb.level, fb.training_draws, fb.scores) == ("uniform", 16.0, 16.0, {})
