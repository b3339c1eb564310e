"""What the budget rules need from a calibrator: per-question point values or quantiles."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dprm.ias.constants import BETA_GRID, DEFAULT_BETA, M_LEVELS, N_MAX
from dprm.ias.paper.budgets import (
    budget_from_curve,
    clipped,
    success_curve_mixture,
    success_curve_point,
)
from dprm.metrics import midpoint_levels, true_quantiles


@dataclass(frozen=True)
class Estimate:
    """What the budget rules need from one calibrator on one BoN set (immutable: a variant is a
    new estimate, e.g. :meth:`with_candidate`).

    Attributes:
        method: display name.
        kind: ``point`` | ``levels`` | ``distribution`` (as :class:`dprm.models.interface.Calibrator`).
        p: [Q] value for the point rule (point: p_hat; levels: Q(beta)); None for distributions.
        q_mid: [Q, M] quantiles at the M mid-point levels (distribution only).
        levels: [L] quantile levels available for the tau and beta sweeps (distribution: the
            M mid-points; levels: the trained levels; point: none).
        q_levels: [Q, L] quantiles at ``levels``.
        beta: the level behind ``p`` for ``levels`` calibrators.
        candidate: [R] the calibrator's point estimate on each candidate's own state
            (:func:`candidate_estimates`, ``bon.responses`` order), or None; the paper's
            reading of the beta rule (``beta-cal`` allocation) needs it.
    """

    method: str
    kind: str
    p: np.ndarray | None = None
    q_mid: np.ndarray | None = None
    levels: np.ndarray | None = None
    q_levels: np.ndarray | None = None
    beta: float | None = None
    candidate: np.ndarray | None = None

    def with_candidate(self, candidate: np.ndarray | None) -> Estimate:
        """The same estimate with candidate estimates [R] (``bon.responses`` order)."""
        return replace(self, candidate=candidate)

    def budgets(self, C, n_max: int = N_MAX, curve: np.ndarray | None = None) -> np.ndarray:
        """Budgets by the rule of this kind (mixture for distributions, point otherwise).

        Args:
            C: a target or targets [len(C)].
            n_max: the largest budget.
            curve: :meth:`success_curve` ``(n_max)`` if the caller already has it [Q, n_max].

        Returns:
            int64 [len(C), Q], or [Q] for scalar C.
        """
        C = np.asarray(C, dtype=np.float64)
        curve = self.success_curve(n_max) if curve is None else curve
        probs = self.success_probs()[None]  # [1, Q, M]: near ties are decided exactly
        return budget_from_curve(curve[None], C.reshape(-1, 1), probs).reshape(C.shape + (-1,))

    def success_probs(self) -> np.ndarray:
        """The clipped per-draw success probabilities behind the rule's curve [Q, M] (M = 1
        for the point rule)."""
        if self.kind == "distribution":
            return clipped(self.q_mid)
        return clipped(self.p)[:, None]

    def success_curve(self, n_max: int = N_MAX) -> np.ndarray:
        """P(at least one success in n draws) under this estimate, [Q, n_max] (the rule's curve)."""
        if self.kind == "distribution":
            return success_curve_mixture(self.q_mid, n_max)
        return success_curve_point(self.p, n_max)

    def quantiles_at(self, levels: Sequence[float]) -> np.ndarray | None:
        """Quantiles [Q, len(levels)] at ``levels`` if all are available (to 1e-6), else None."""
        if self.levels is None:
            return None
        diff = np.abs(np.asarray(levels, dtype=np.float64)[:, None] - self.levels[None, :])
        if (diff.min(axis=1) > 1e-6).any():
            return None
        return self.q_levels[:, diff.argmin(axis=1)]


def _distribution_estimate(
    name: str, quantiles: Callable[[np.ndarray], np.ndarray], m: int
) -> Estimate:
    """A distribution estimate: quantiles at the M mid-points, then at ``BETA_GRID``.

    Args:
        name: display name.
        quantiles: levels [L] -> quantiles [Q, L].
        m: number of mid-point levels M.

    Returns:
        an :class:`Estimate` with ``q_mid`` [Q, M] and ``q_levels`` [Q, M + len(BETA_GRID)].
    """
    levels = np.concatenate([midpoint_levels(m), BETA_GRID])
    q = quantiles(levels)
    return Estimate(name, "distribution", q_mid=q[:, :m], levels=levels, q_levels=q)


def estimate_from_model(
    model, bon, name: str | None = None, *, beta: float = DEFAULT_BETA, m: int = M_LEVELS
) -> Estimate:
    """Map any calibrator kind to the per-question estimate the rules need.

    point -> p_hat; levels -> Q(beta) at :meth:`~dprm.models.interface.Calibrator.beta_level`
    (the largest trained level <= beta, else the smallest level); distribution -> Q at the M mid-points, plus Q at
    ``BETA_GRID`` for the beta-threshold sweep.

    Args:
        model: a :class:`dprm.models.interface.Calibrator`.
        bon: a :class:`dprm.data.contract.BonSet` (Q questions).
        name: display name (default ``model.method``).
        beta: the level of the point rule for ``levels`` calibrators.
        m: number of mid-point levels M for distributions.

    Returns:
        the estimate, rows aligned with ``bon.questions``.
    """
    score = bon.questions["prm_score"].to_numpy(np.float32)
    hidden = bon.hidden if model.uses_hidden else None
    name = name or model.method
    if model.kind == "point":
        return Estimate(name, "point", p=model.point_estimate(hidden, score).astype(np.float64))
    if model.kind == "levels":
        levels = np.asarray(model.fixed_levels, dtype=np.float64)
        q = model.quantiles(hidden, levels, score).astype(np.float64)
        level = model.beta_level(beta)  # the one rule for "the beta-quantile" of a calibrator
        col = int(np.argmin(np.abs(levels - level)))
        return Estimate(name, "levels", p=q[:, col], levels=levels, q_levels=q, beta=level)
    return _distribution_estimate(
        name, lambda levels: model.quantiles(hidden, levels, score).astype(np.float64), m
    )


def truth_estimate(bon, m: int = M_LEVELS, name: str = "truth") -> Estimate | None:
    """The oracle of a synthetic BoN set: Q_true(tau) = sigmoid(mu + sigma Phi^-1(tau)).

    Uses the ``true_mu`` / ``true_sigma`` question columns; None when the set has no truth.
    A reference for what a perfectly calibrated distribution would allocate.

    Args:
        bon: a :class:`dprm.data.contract.BonSet`.
        m: number of mid-point levels M.
        name: display name.

    Returns:
        a distribution :class:`Estimate`, or None.
    """
    cols = bon.questions.columns
    if "true_mu" not in cols or "true_sigma" not in cols:
        return None
    mu = bon.questions["true_mu"].to_numpy(np.float64)
    sigma = bon.questions["true_sigma"].to_numpy(np.float64)
    return _distribution_estimate(name, lambda levels: true_quantiles(mu, sigma, levels), m)


def candidate_estimates(model, bon) -> np.ndarray:
    """A calibrator's point estimate on every candidate's own complete-trajectory state [R].

    The per-candidate reading of docs/design.md §4 (calibrated weights, the paper's beta rule):
    p_hat of docs/design.md §3 (Base: the candidate's ``prm_score``) on
    ``bon.response_hidden`` (BoN contract v2), rows aligned with ``bon.responses``.

    Raises:
        DataError: the set has no candidate hidden states (contract v1) and the model uses them.
    """
    from dprm.io import DataError

    score = bon.responses["prm_score"].to_numpy(np.float32)
    if not model.uses_hidden:
        return model.point_estimate(None, score).astype(np.float64)
    if bon.response_hidden is None:
        path = None if bon.path is None else bon.path / "response_hidden_states.npy"
        raise DataError(
            path,
            "calibrated candidate estimates need the candidates' hidden states (BoN contract v2)",
        )
    return model.point_estimate(bon.response_hidden, score).astype(np.float64)


def estimate_samples(est: Estimate) -> np.ndarray:
    """Samples of a question's success probability under an estimate [Q, M]: the M mid-point
    quantiles of a distribution, the trained levels of a ``levels`` calibrator (equal weights),
    the point value of a point estimate (M = 1)."""
    if est.kind == "distribution":
        return np.asarray(est.q_mid, dtype=np.float64)
    if est.kind == "levels":
        return np.asarray(est.q_levels, dtype=np.float64)
    return np.asarray(est.p, dtype=np.float64)[:, None]
