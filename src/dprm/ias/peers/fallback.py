"""What ``auto-seq`` runs under a detected shift, for one rule and target cost, as a run can
decide it before drawing: the calibrator-free peer chosen on the training pools
(:func:`dprm.ias.peers.curves.choose_fallback`, the choice of ``dprm ias --sequential`` and
``dprm ias --peers``) and the level of its knob that spends the most mean draws within the
target on the training pools (:func:`shift_fallback`).

Offline the peer's cost-accuracy curve on the test pools is read at the target cost (a mixture
of two levels, :func:`dprm.ias.curves.equal_cost.curve_mixture`); a live run
(``dprm solve --auto-seq``) cannot read the test pools, so it runs the peer at the level found
here. A budget-matched peer (``vote-lead``) spends the target exactly; a stopping rule spends
what it stops at on the live questions (at most the target on the training pools).
A training set without final answers (BoN contract v1) has no answer-reading peer to choose:
the fallback is ``uniform``, as offline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dprm.ias.constants import N_MAX
from dprm.ias.learnt.auto import mean_budget
from dprm.ias.peers.curves import best_fallback, training_peer_curves, training_scores
from dprm.ias.peers.methods import PEERS
from dprm.ias.selection.rules import Candidates
from dprm.ias.sequential.floor import SEQ_TRAIN_TRIALS


@dataclass
class ShiftFallback:
    """The peer ``auto-seq`` falls back to and the level it runs at.

    Attributes:
        peer: a calibrator-free peer of :data:`dprm.ias.peers.methods.CALIBRATOR_FREE`, or ``uniform``.
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


def level_for_target(
    spend: Callable[[float], float],
    levels: np.ndarray,
    draws: np.ndarray,
    target: float,
    steps: int = 30,
) -> float:
    """The knob level that spends the most mean draws within ``target``, by bisection between
    the two sweep levels around it (the spend is monotone in the level between them).

    Args:
        spend: level -> mean draws per question at that level.
        levels: [L] the sweep's levels; draws: [L] their mean draws.
        target: the mean draws to spend.
        steps: bisection steps.

    Returns:
        below the sweep's cheapest draws, its cheapest level; above its dearest, its dearest;
        next to an infinite level (never stop), the finite neighbour; else the largest level
        found with spend <= target (a knob whose cost moves in steps stops at a step).
    """
    order = np.argsort(draws, kind="stable")
    x, lv = np.asarray(draws, dtype=np.float64)[order], np.asarray(levels, np.float64)[order]
    if target <= x[0]:
        return float(lv[0])
    if target >= x[-1]:
        return float(lv[-1])
    j = int(np.searchsorted(x, target, side="right"))  # x[j - 1] <= target < x[j]
    lo, hi = float(lv[j - 1]), float(lv[j])
    if not np.isfinite(hi):
        return lo
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if spend(mid) <= target + 1e-9:
            lo = mid
        else:
            hi = mid
    return lo


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

    A stopping rule's level is the one that spends the most within the target on the training
    pools (:func:`level_for_target`); where no level spends so little, its cheapest level (a
    live run caps the total anyway).

    Args:
        train_cands: the training pools; train_weight: the rule's candidate weights there.
        cost: target mean draws / n_max.
        trials, seed: the training pools' draw orders (as ``dprm ias --sequential``).
    """
    target = mean_budget(cost, n_max)
    if train_cands.answer is None:
        return ShiftFallback("uniform", target, target)
    scores = training_scores(train_cands, None)
    view, curves = training_peer_curves(
        train_cands, train_weight, rule, scores, trials, seed, n_max, replay
    )
    peer, by_peer = best_fallback(curves, n_max)
    if PEERS[peer].budget_matched:
        return ShiftFallback(peer, target, target, by_peer)
    curve = curves[peer]

    def spend(level: float) -> float:
        return float(PEERS[peer].budgets(view, [level]).mean())

    level = level_for_target(spend, curve.levels, curve.draws.mean(axis=1), target)
    spent = spend(level)
    return ShiftFallback(peer, level, spent, by_peer)
