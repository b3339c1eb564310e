"""``auto``: every question's budget fixed before drawing, from curves predicted by the
calibrated distribution, with the selection-accuracy model and the uniform floor share learnt on
a training BoN set (:class:`AutoAllocator`)."""

from __future__ import annotations

import numpy as np

from dprm.ias.constants import N_MAX
from dprm.ias.learnt.allocation import SelectionModel, auto_budgets, choose_floor_share
from dprm.ias.paper.estimates import Estimate, estimate_samples
from dprm.ias.selection.rules import Candidates, RuleTable


def mean_budget(cost: float, n_max: int) -> float:
    """The mean draws per question of a target cost (mean draws / n_max), in [1, n_max]."""
    return float(np.clip(cost * n_max, 1.0, n_max))


def pool_share(cands: Candidates) -> np.ndarray:
    """[Q] share of correct candidates in each pool."""
    return cands.correct.sum(axis=1) / cands.size


class AutoAllocator:
    """``auto`` for one rule: fitted on a training BoN set, applied to any estimate.

    Args:
        train_table: the rule's true accuracy curves on the training pools [Q_train, n_max].
        train_share: [Q_train] the training pools' share of correct candidates.
    """

    def __init__(self, train_table: RuleTable, train_share: np.ndarray):
        self.curves = np.asarray(train_table.mean, dtype=np.float64)
        self.share = np.asarray(train_share, dtype=np.float64)
        self.model = SelectionModel.fit(self.share, self.curves)

    def floor_share(self, train_estimate: Estimate, seed: int = 0) -> tuple[float, dict]:
        """The uniform floor share for a calibrator, by cross-fitting on the training pools."""
        return choose_floor_share(
            self.share, self.curves, estimate_samples(train_estimate), seed=seed
        )

    def predicted(self, estimate: Estimate) -> np.ndarray:
        """Predicted accuracy-vs-n curves of the selected answer [Q, n_max] for an estimate."""
        return self.model.expected_curve(estimate_samples(estimate))

    def budgets(
        self,
        estimate: Estimate,
        cost: float,
        floor_share: float,
        n_max: int = N_MAX,
        predicted: np.ndarray | None = None,
    ):
        """The ``auto`` budgets [Q] of a test estimate at a target cost (``predicted``: the
        curves of :meth:`predicted`, if the caller already has them)."""
        predicted = self.predicted(estimate) if predicted is None else predicted
        return auto_budgets(predicted[:, :n_max], mean_budget(cost, n_max), floor_share)
