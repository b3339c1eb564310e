"""What ``auto-seq`` runs under a detected shift, for one rule and target cost, as a run can
decide it before drawing: the calibrator-free peer chosen on the training pools
(:func:`dprm.ias.peer_curves.choose_fallback`, the choice of ``dprm ias --sequential`` and
``dprm ias --peers``) and the level of its knob that spends the target mean draws on the
training pools (:func:`shift_fallback`).

Offline the peer's cost-accuracy curve on the test pools is read at the target cost (a mixture
of two levels, :func:`dprm.ias.equal_cost.curve_mixture`); a live run
(``dprm solve --auto-seq``) cannot read the test pools, so it runs the peer at the level found
here. A budget-matched peer (``vote-lead``) spends the target exactly; a stopping rule spends
what it stops at on the live questions (its level spends the target on the training pools).
A training set without final answers (BoN contract v1) has no answer-reading peer to choose:
the fallback is ``uniform``, as offline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dprm.ias.auto import mean_budget
from dprm.ias.constants import N_MAX
from dprm.ias.peer_curves import choose_fallback, peer_curve, training_scores
from dprm.ias.peers import PEERS, DrawView
from dprm.ias.rules import Candidates, uses_answers
from dprm.ias.sequential.floor import SEQ_TRAIN_TRIALS, training_replay


@dataclass
class ShiftFallback:
    """The peer ``auto-seq`` falls back to and the level it runs at.

    Attributes:
        peer: a calibrator-free peer of :data:`dprm.ias.peers.CALIBRATOR_FREE`, or ``uniform``.
        level: its knob's level (``uniform`` / ``vote-lead``: the target mean draws).
        training_draws: the mean draws per question it spends at ``level`` on the training
            pools.
        scores: peer -> its mean training accuracy at the report costs (the choice's basis;
            empty for ``uniform``).
    """

    peer: str
    level: float
    training_draws: float
    scores: dict[str, float] = field(default_factory=dict)


def level_at_draws(levels: np.ndarray, draws: np.ndarray, target: float) -> float:
    """The knob level whose mean draws is ``target``, linear between the two sweep levels
    around it (levels sorted by their draws), clamped to the sweep's ends; an infinite level
    (never stop) next to the target gives its finite neighbour.

    Args:
        levels: [L] the sweep's levels; draws: [L] their mean draws per question.
        target: the mean draws to spend.
    """
    order = np.argsort(draws, kind="stable")
    x, lv = np.asarray(draws, dtype=np.float64)[order], np.asarray(levels, np.float64)[order]
    if target <= x[0]:
        return float(lv[0])
    if target >= x[-1]:
        return float(lv[-1])
    j = int(np.searchsorted(x, target, side="right"))
    lo, hi = lv[j - 1], lv[j]
    if not np.isfinite(lo) or not np.isfinite(hi):
        return float(lo if np.isfinite(lo) else hi)
    w = 0.0 if x[j] <= x[j - 1] else (target - x[j - 1]) / (x[j] - x[j - 1])
    return float(lo + w * (hi - lo))


def shift_fallback(
    train_cands: Candidates,
    train_weight: np.ndarray,
    rule: str,
    cost: float,
    n_max: int = N_MAX,
    seed: int = 0,
    trials: int = SEQ_TRAIN_TRIALS,
    replay: tuple[np.ndarray, np.ndarray] | None = None,
) -> ShiftFallback:
    """The fallback of ``auto-seq`` under a shift for ``rule`` at target ``cost``, chosen on
    the training pools only (their draw orders: :func:`training_replay`).

    Args:
        train_cands: the training pools; train_weight: the rule's candidate weights there.
        cost: target mean draws / n_max.
        trials, seed: the training pools' draw orders (as ``dprm ias --sequential``).
    """
    target = mean_budget(cost, n_max)
    if train_cands.answer is None:
        return ShiftFallback("uniform", target, target)
    scores = training_scores(train_cands, None)
    replay = replay or training_replay(train_cands, train_weight, uses_answers(rule), trials, seed)
    peer, by_peer = choose_fallback(
        train_cands, train_weight, rule, scores, trials, seed, n_max, replay
    )
    if PEERS[peer].budget_matched:
        return ShiftFallback(peer, target, target, by_peer)
    orders, outcomes = replay
    view = DrawView.from_pools(
        train_cands.answer, train_cands.weights["last"], train_cands.size, orders, n_max=n_max
    )
    curve = peer_curve(peer, view, outcomes, scores)
    level = level_at_draws(curve.levels, curve.draws.mean(axis=1), target)
    spent = float(PEERS[peer].budgets(view, [level]).mean())
    return ShiftFallback(peer, level, spent, by_peer)
