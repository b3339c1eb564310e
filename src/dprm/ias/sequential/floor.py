"""The one floor-share procedure of ``auto-seq``: fit the policy on the training pools and
choose, per target cost, the uniform floor share it does best with there (:func:`fit_sequential`).

``dprm ias --sequential`` (:func:`dprm.ias.curves.equal_cost.sequential_rows`), the peers' comparison
(:func:`dprm.ias.peers.curves.auto_seq_curve`) and the live ``dprm solve --auto-seq``
(:func:`dprm.live.bon_seq.fit_sequential`) all call :func:`fit_sequential`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dprm.ias.constants import N_MAX
from dprm.ias.learnt.allocation import SelectionModel
from dprm.ias.learnt.auto import mean_budget
from dprm.ias.paper.estimates import Estimate, estimate_samples
from dprm.ias.selection.draws import draw_orders, outcome_accuracy, rule_outcomes
from dprm.ias.selection.rules import Candidates, uses_answers
from dprm.ias.sequential.policy import SequentialAuto

#: the uniform floor shares ``auto-seq`` chooses from, per rule and target cost, on the
#: training pools (:func:`sequential_floor_shares`; 1: uniform)
SEQ_FLOOR_SHARES = (0.0, 0.25, 0.5, 1.0)
#: draw orders per training question of that choice
SEQ_TRAIN_TRIALS = 8


@dataclass
class SequentialFit:
    """``auto-seq`` fitted for one rule on a training BoN set.

    Attributes:
        seq: the fitted allocator (selection model, candidate likelihood, answers' CRP).
        floor_shares: the floor share per target cost, chosen on the training pools.
        majority: the policy indexes the majority vote's race (the rule is ``majority`` and
            the policy reads answers).
    """

    seq: SequentialAuto
    floor_shares: list[float]
    majority: bool


def fit_sequential(
    model: SelectionModel,
    train_cands: Candidates,
    train_est: Estimate,
    train_weight: np.ndarray,
    costs: Sequence[float],
    rule: str,
    *,
    read_answers: bool,
    n_max: int = N_MAX,
    seed: int = 0,
    replay: tuple[np.ndarray, np.ndarray] | None = None,
    trials: int = SEQ_TRAIN_TRIALS,
) -> SequentialFit:
    """Fit ``auto-seq`` for ``rule`` on the training pools and choose its floor share per cost.

    Args:
        model: the rule's selection-accuracy model g (fitted on the training pools).
        train_cands, train_est: the training pools and the calibrator's estimate on them
            (``candidate`` set); train_weight: the rule's candidate weights there [Q, K].
        costs: target costs (mean draws / n_max).
        read_answers: the policy reads the draws' final answers (the training pools carry
            them, and so do the draws it will read).
        rule: a ``highest-*`` rule gets the highest-score index (the policy reads each draw's
            score ``train_weight`` there, and the rule's weights where it runs:
            :mod:`dprm.ias.sequential.pick`); a vote keeps the curves (``majority`` with
            answers: the race).
        replay: the training pools' draw orders and outcomes (:func:`training_replay`) when
            the caller has them; else drawn here with ``trials`` orders per question.
    """
    seq = SequentialAuto.fit(
        model, estimate_samples(train_est), train_cands.gather(train_est.candidate, 0.5),
        train_cands.correct, train_cands.row >= 0, train_cands.answer if read_answers else None,
        None if uses_answers(rule) else train_weight,
    )  # fmt: skip
    majority = seq.answers is not None and rule == "majority"
    replay = replay or training_replay(train_cands, train_weight, uses_answers(rule), trials, seed)
    shares, _ = sequential_floor_shares(
        seq, train_cands, train_est, train_weight, costs, vote=uses_answers(rule),
        majority=majority, n_max=n_max, seed=seed, replay=replay,
    )  # fmt: skip
    return SequentialFit(seq, shares, majority)


def sequential_floor_shares(
    seq: SequentialAuto,
    train_cands: Candidates,
    train_est: Estimate,
    train_weight: np.ndarray,
    costs: Sequence[float],
    *,
    vote: bool = False,
    majority: bool = False,
    n_max: int = N_MAX,
    trials: int = SEQ_TRAIN_TRIALS,
    seed: int = 0,
    replay: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[list[float], np.ndarray]:
    """The floor share of ``auto-seq`` at each target cost, chosen on the training pools.

    The policy runs on the training questions (their calibrated priors, candidate estimates
    and, when ``seq`` reads answers, answers) over ``trials`` draw orders, once per share of
    :data:`SEQ_FLOOR_SHARES`, and the share of the highest accuracy under the rule wins (ties:
    the larger share, nearer uniform). Where the policy does not pay on the training pools
    (a weak calibrator, a rule whose curves it models poorly) this sends it to uniform.

    Args:
        seq: the fitted policy; train_cands, train_est (``candidate`` set): the training pools
            and the calibrator's estimate on them; train_weight: the rule's candidate weights
            on them [Q, K].
        majority: the rule is a majority vote (with answers: the race index,
            :meth:`dprm.ias.sequential.SequentialPolicy.race_wins`).
        replay: the training pools' draw orders and the rule's outcomes on them
            (:func:`training_replay`), when the caller has them (they do not depend on the
            calibrator).

    Returns:
        (share per cost, training accuracy [len(costs), len(SEQ_FLOOR_SHARES)]).
    """
    orders, outcomes = replay or training_replay(train_cands, train_weight, vote, trials, seed)
    mean_budgets = [mean_budget(c, n_max) for c in costs]
    answers = train_cands.answer if seq.answers is not None else None
    pairs = [(mb, share) for share in SEQ_FLOOR_SHARES for mb in mean_budgets]
    budgets = seq.budgets(
        estimate_samples(train_est), train_cands.gather(train_est.candidate, 0.5),
        train_cands.size, orders, [mb for mb, _ in pairs], [sh for _, sh in pairs], n_max,
        answer=answers, majority=majority and answers is not None,
        score=train_weight if seq.pick is not None else None,
    )  # fmt: skip
    acc = np.array([outcome_accuracy(outcomes, b)[0] for b in budgets])
    acc = acc.reshape(len(SEQ_FLOOR_SHARES), len(costs)).T  # [cost, share]
    best = [SEQ_FLOOR_SHARES[int(np.flatnonzero(row >= row.max() - 1e-12).max())] for row in acc]
    return best, acc


def training_replay(
    train_cands: Candidates, train_weight: np.ndarray, vote: bool, trials: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Draw orders of the training pools (not the test set's: seed + 1) and the rule's outcomes
    on them, for :func:`sequential_floor_shares`."""
    orders = draw_orders(train_cands.size, trials, seed + 1)
    return orders, rule_outcomes(train_cands, train_weight, orders, vote, seed + 1)
