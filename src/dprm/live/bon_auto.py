"""``dprm ias``'s ``auto`` allocation fitted for live questions: every budget fixed before
sampling, learnt on a training BoN set scored by the same PRM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dprm.ias.selection.rules import CONTRACT_RULE
from dprm.live.calibrated_prm import CalibratedPRM, States


def auto_budgets(
    cprm: CalibratedPRM, states: States, train_bon: str, cost: float, rule: str = CONTRACT_RULE
) -> np.ndarray:
    """Budgets [Q] of ``dprm ias``'s ``auto`` rule for selection ``rule`` (default the
    contract's, highest last score) for live question states: learnt on ``train_bon`` (scored
    by the same PRM), at mean ``cost``; uniform when the questions' states are unlike the
    training set's (``shift_auc``).

    Raises:
        DataError: the training set's hidden size differs from the PRM's (another PRM scored
            it), or ``rule`` votes and the set has no final answers (BoN contract v1).
    """
    fitted = fit_auto(cprm, states, train_bon, rule)
    return fitted.allocator.budgets(fitted.estimate, cost, fitted.floor_share, cprm.n_max)


@dataclass
class FittedAuto:
    """``auto`` learnt on a training BoN set, for the live questions of one shard.

    Attributes:
        allocator: the rule's allocator (selection-accuracy model g).
        floor_share: the uniform floor share (1 when the live states are unlike the training
            set's).
        estimate: the calibrator's estimate on the live question states.
        train: the training BoN set; train_estimate: the calibrator's estimate on it.
        shifted: the live states are unlike the training set's (the label-free shift check).
    """

    allocator: Any
    floor_share: float
    estimate: Any
    train: Any
    train_estimate: Any
    shifted: bool = False


def fit_auto(
    cprm: CalibratedPRM, states: States, train_bon: str, rule: str = CONTRACT_RULE
) -> FittedAuto:
    """Fit ``auto`` for selection ``rule`` (as ``dprm ias`` does) on ``train_bon`` for ``states``.

    Raises:
        DataError: the training set's hidden size differs from the PRM's (another PRM scored
            it), or ``rule`` votes and the set has no final answers (BoN contract v1).
    """
    from dprm.data import read_bon_set
    from dprm.ias import estimate_from_model
    from dprm.ias.learnt.allocation import SHIFT_AUC, shift_auc
    from dprm.ias.learnt.auto import AutoAllocator, pool_share
    from dprm.ias.selection.rules import Candidates, rule_table
    from dprm.io import DataError
    from dprm.live.calibrated_prm import _StateTable

    train = read_bon_set(train_bon, check_hidden=False)
    if cprm.calibrator.uses_hidden and train.hidden_dim != states.hidden.shape[1]:
        raise DataError(
            train.path,
            f"hidden_dim {train.hidden_dim} but the PRM's states have {states.hidden.shape[1]}: "
            "--train-bon must be scored by the same PRM",
        )
    cands = Candidates.from_bon(train)
    allocator = AutoAllocator(rule_table(cands, rule, n_max=cprm.n_max), pool_share(cands))
    kw = {"beta": cprm.beta, "m": cprm.m_levels}
    train_est = estimate_from_model(cprm.calibrator, train, **kw)
    share, _ = allocator.floor_share(train_est)
    comparable = train.hidden_dim == states.hidden.shape[1] and len(states.hidden) >= 4
    shifted = bool(comparable and shift_auc(train.hidden, states.hidden) > SHIFT_AUC)
    if shifted:  # unlike training
        share = 1.0
    est = estimate_from_model(cprm.calibrator, _StateTable(states.scores, states.hidden), **kw)
    return FittedAuto(allocator, float(share), est, train, train_est, shifted)
