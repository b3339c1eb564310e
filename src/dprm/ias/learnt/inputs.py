"""What one calibrator contributes to the equal-cost rows: :class:`CalibratorInput`.

Built once per calibrator (:func:`calibrator_input`) from its model and the test and training
BoN sets, then passed down unchanged to ``auto`` (:func:`dprm.ias.curves.equal_cost.auto_rows`),
``auto-seq`` (:func:`dprm.ias.curves.equal_cost.sequential_rows`), the ``*-calibrated`` selection
rules (:func:`dprm.ias.curves.pays.run_pays`) and the peers' curves
(:func:`dprm.ias.peers.curves.set_curves`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dprm.ias.constants import DEFAULT_BETA
from dprm.ias.paper.estimates import Estimate, candidate_estimates, estimate_from_model


@dataclass(frozen=True)
class CalibratorInput:
    """One calibrator's estimates on a test BoN set and on the training BoN set it learns from.

    Attributes:
        label: the name its rows carry (``method`` column; for the peers' curves the prior's
            label: ``calibrated``, ``base``, ``none``, ``truth``).
        test: its question estimates on the test set [Q]; ``test.candidate``: its estimate on
            every test candidate's own state [R] (``bon.responses`` order), or None.
        train: the same on the training set (``train.candidate`` [R_train] or None); None
            without a training set, or for an estimate that has none there.
    """

    label: str
    test: Estimate
    train: Estimate | None = None

    @property
    def test_candidates(self) -> np.ndarray | None:
        """Estimates on the test candidates [R], or None."""
        return self.test.candidate

    @property
    def train_candidates(self) -> np.ndarray | None:
        """Estimates on the training candidates [R_train], or None."""
        return None if self.train is None else self.train.candidate

    @property
    def reads_candidates(self) -> bool:
        """Whether it has candidate estimates on both sets (what ``auto-seq`` and a
        ``*-calibrated`` rule with a training set read)."""
        return self.test_candidates is not None and self.train_candidates is not None


def calibrator_input(
    model,
    bon,
    label: str,
    *,
    train_bon=None,
    beta: float = DEFAULT_BETA,
    test_candidates: bool = False,
    train_candidates: bool = False,
) -> CalibratorInput:
    """A calibrator's :class:`CalibratorInput` on a test set (and a training set).

    Args:
        model: a :class:`dprm.models.interface.Calibrator`.
        bon: the test :class:`dprm.data.contract.BonSet`.
        label: the name its rows carry.
        train_bon: the training BoN set (None: ``train`` is None).
        beta: the level of the point rule for ``levels`` calibrators.
        test_candidates, train_candidates: also its estimates on every candidate of that set
            (:func:`dprm.ias.paper.estimates.candidate_estimates`; BoN contract v2 where the model
            reads hidden states).

    Raises:
        DataError: candidate estimates asked of a set without candidate hidden states, for a
            model that reads them.
    """
    test = estimate_from_model(model, bon, label, beta=beta)
    if test_candidates:
        test = test.with_candidate(candidate_estimates(model, bon))
    train = None
    if train_bon is not None:
        train = estimate_from_model(model, train_bon, label, beta=beta)
        if train_candidates:
            train = train.with_candidate(candidate_estimates(model, train_bon))
    return CalibratorInput(label, test, train)


def reads_states(model, bon) -> bool:
    """Whether ``model``'s candidate estimates on ``bon`` can be computed: the model does not
    read hidden states, or the set has its candidates' (BoN contract v2)."""
    return not model.uses_hidden or bon.response_hidden is not None
