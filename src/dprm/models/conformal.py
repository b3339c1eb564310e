"""``conformal``: a one-sided split-conformal lower bound on top of any calibrator.

Park et al. (NeurIPS 2025, Alg. 1; not in their repository) correct a quantile predictor so its
lower bound holds with a finite-sample guarantee. Here, for an inner calibrator with beta-quantile
Q_beta(h) (its ``quantile(beta)`` for ``distribution`` / ``levels`` kinds, its point estimate for
``point`` kinds) and a held-out calibration sample of n records (h_j, y_j), y_j = k_j / n_j:

    s_j = Q_beta(h_j) - y_j,
    c   = the ceil((n + 1)(1 - alpha))-th smallest s_j   (c = +inf if that rank exceeds n),
    L(h) = clip(Q_beta(h) - c, 0, 1).

**Guarantee.** If the n calibration pairs and a test pair (h, y) are exchangeable, and the inner
calibrator was fitted on other data, then

    P( y >= L(h) ) >= 1 - alpha,

over the joint draw of the calibration sample and the test pair (marginal, not conditional on h).
Proof: y >= Q_beta(h) - c  <=>  s <= c, and the rank of s among the n + 1 exchangeable scores is
uniform (ties only help); clipping to [0, 1] keeps the event because y lies in [0, 1]. The event
concerns the observed label y = k/n, not the latent p (which is never observed). With continuous
scores the coverage is also at most 1 - alpha + 1 / (n + 1); discrete labels (ties) may cover more.

Records of one question are dependent, so ``unit`` chooses what is exchangeable:

* ``"question"`` (default, exact): one record drawn uniformly from each calibration question.
  With i.i.d. questions, the guarantee holds for a uniformly drawn record of a new question,
  i.e. E[share of a new question's records with y >= L(h)] >= 1 - alpha.
* ``"record"``: every calibration record is a score. Tighter c (more scores), but the guarantee
  then needs record-level exchangeability, which grouped prefixes satisfy only approximately.

**Kind.** ``point``: the calibrator's point estimate is the bound L(h) itself, so ``dprm ias``
budgets with N(L(h), C) exactly as QR budgets with Q(beta | h), and ``dprm evaluate`` reports
the Brier / PosBrier of the (deliberately pessimistic) bound. A single-level ``levels`` kind was
rejected: L is a lower alpha-quantile of y, not a beta-quantile, and single-level fixed-level
calibrators have no Q(0.5) point estimate.

**Training** (``dprm train --method conformal --set inner_method=mono --set alpha=0.1``): the
training questions are split (``calibration_fraction`` of them, seed ``split_seed``) into the
inner calibrator's training part and the conformal calibration part; the inner calibrator is
fitted (with the usual validation split for its early stopping) and c is computed on the
calibration part. The saved directory nests the inner state dict under ``inner.`` and its
resolved config under ``config["inner_config"]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from dprm.config import ConfigError, in_range, parse_overrides, to_dict
from dprm.data.contract import CalibrationSet
from dprm.data.splits import split_by_question
from dprm.io import DataError
from dprm.models.fit import fit_split
from dprm.models.interface import Calibrator, PointMass
from dprm.models.registry import REGISTRY, register

#: the bound is lowered by this much so float32 rounding never breaks an exact (tied) inclusion
FLOAT_SLACK = 1e-6


def conformal_rank(n: int, alpha: float) -> int:
    """1-based rank ceil((n + 1)(1 - alpha)) of the correction among n scores (may exceed n)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    # The small offset keeps e.g. (99 + 1) * 0.9 = 90.00000000000001 from rounding up to 91.
    return math.ceil((n + 1) * (1.0 - alpha) - 1e-9)


def conformal_correction(scores: np.ndarray, alpha: float) -> float:
    """The ceil((n + 1)(1 - alpha))-th smallest of ``scores`` [n]; +inf if n is too small."""
    scores = np.asarray(scores, dtype=np.float64)
    rank = conformal_rank(len(scores), alpha)
    if rank > len(scores):
        return math.inf
    return float(np.partition(scores, rank - 1)[rank - 1])


def beta_quantile(model: Calibrator, data: CalibrationSet, beta: float) -> np.ndarray:
    """Q_beta(h_j) [N] (float64) of any calibrator: its point estimate for ``point`` kinds.

    The level is :meth:`Calibrator.beta_level` (for ``levels`` kinds the largest trained level
    <= beta), the same rule IAS uses.
    """
    score = data.records["prm_score"].to_numpy(np.float32)
    hidden = data.hidden if model.uses_hidden else None
    level = model.beta_level(beta)
    if level is None:
        return model.point_estimate(hidden, score).astype(np.float64)
    return model.quantiles(hidden, [level], score)[:, 0].astype(np.float64)


def calibration_rows(data: CalibrationSet, unit: str, rng: np.random.Generator) -> np.ndarray:
    """Rows that give conformity scores: all of them, or one uniform draw per question."""
    if unit == "record":
        return np.arange(len(data))
    if unit != "question":
        raise ValueError(f"unit must be 'question' or 'record', got {unit!r}")
    groups = data.records.groupby("question_id", sort=True).indices
    return np.sort(np.array([rng.choice(rows) for rows in groups.values()], dtype=np.int64))


def check_inner_method(method: str) -> None:
    """Fail fast unless ``method`` is a registered calibrator other than ``conformal``."""
    if method not in REGISTRY or method == "conformal":
        raise ConfigError(
            f"conformal: inner_method {method!r} is not a calibrator; known: {sorted(REGISTRY)}"
        )


@dataclass(frozen=True)
class ConformalConfig:
    """Hyper-parameters of ``conformal``."""

    #: the calibrator whose beta-quantile is corrected
    inner_method: str = "mono"
    #: overrides for the inner calibrator's config, ``"key=value;key=value"``
    inner_set: str = ""
    #: level of the inner quantile that is corrected (ignored for point inner calibrators)
    beta: float = in_range(0.1, ge=0, le=1)
    #: miscoverage: P(y >= L(h)) >= 1 - alpha
    alpha: float = in_range(0.1, gt=0, lt=1)
    #: share of the training questions held out to compute the correction
    calibration_fraction: float = in_range(0.3, gt=0, lt=1)
    #: ``question`` (one record per question, exact) or ``record`` (all records)
    unit: str = "question"
    split_seed: int = 42


@register("conformal")
class ConformalCalibrator(Calibrator):
    """L(h) = clip(Q_beta(h) - c, 0, 1) of a nested inner calibrator (kind ``point``)."""

    kind = "point"
    config_class: ClassVar[type] = ConformalConfig

    def __init__(self, hidden_dim: int, config: dict[str, Any] | None = None):
        super().__init__(hidden_dim, config)
        method = self.config.get("inner_method", ConformalConfig.inner_method)
        check_inner_method(method)
        self.inner: Calibrator = REGISTRY[method].from_config(
            hidden_dim, self.config.get("inner_config", {})
        )
        self.register_buffer("correction", torch.tensor(math.inf, dtype=torch.float64))

    @property
    def uses_hidden(self) -> bool:  # type: ignore[override]
        return self.inner.uses_hidden

    @property
    def beta(self) -> float:
        return float(self.config.get("beta", ConformalConfig.beta))

    @classmethod
    def from_parts(
        cls, inner: Calibrator, correction: float, config: ConformalConfig
    ) -> ConformalCalibrator:
        """Wrap a fitted ``inner`` calibrator with correction ``c``."""
        resolved = to_dict(config) | {"inner_method": inner.method, "inner_config": inner.config}
        model = cls(inner.hidden_dim, resolved)
        model.inner = inner
        model.correction.fill_(float(correction))
        return model

    def inner_quantile(self, hidden: Tensor | None, prm_score: Tensor | None) -> Tensor:
        """Q_beta(h) [n] of the inner calibrator (its point estimate for point kinds)."""
        dist = self.inner(hidden, prm_score)
        level = self.inner.beta_level(self.beta)
        if level is None:
            return dist.mean()
        return dist.quantile(torch.tensor([level]))[:, 0]

    def forward(self, hidden: Tensor | None, prm_score: Tensor | None = None) -> PointMass:
        q = self.inner_quantile(hidden, prm_score).to(torch.float64)
        return PointMass((q - self.correction - FLOAT_SLACK).clamp(0.0, 1.0).float())

    @classmethod
    def fit_model(
        cls,
        train: CalibrationSet,
        val: CalibrationSet,
        config: ConformalConfig,
        seed: int,
        progress: bool,
    ) -> tuple[ConformalCalibrator, list[dict]]:
        """Fit the inner calibrator on part of ``train``, conformalise on the rest."""
        conformal_rank(1, config.alpha)  # fail fast on a bad alpha / unit, before any training
        if config.unit not in ("question", "record"):
            raise ConfigError(
                f"conformal: unit must be 'question' or 'record', got {config.unit!r}"
            )
        check_inner_method(config.inner_method)
        n_questions = train.records["question_id"].nunique()
        if n_questions < 2:
            raise DataError(
                train.path,
                f"conformal needs at least 3 questions in the calibration set (validation, "
                f"inner training, conformal calibration); after the validation split "
                f"{n_questions} question(s) remain for training",
            )
        rest_rows, cal_rows = split_by_question(
            train.records["question_id"].to_numpy(), config.calibration_fraction, config.split_seed
        )
        overrides = parse_overrides([i for i in config.inner_set.split(";") if i.strip()])
        inner, history, _ = fit_split(
            config.inner_method,
            train.subset(rest_rows),
            val,
            overrides=overrides,
            seed=seed,
            progress=progress,
        )
        cal = train.subset(cal_rows)
        rows = calibration_rows(cal, config.unit, np.random.default_rng([config.split_seed, seed]))
        q = beta_quantile(inner, cal.subset(rows), config.beta)
        y = cal.records["success_prob"].to_numpy(np.float64)[rows]
        correction = conformal_correction(q - y, config.alpha)
        model = cls.from_parts(inner, correction, config)
        model.info["inner_info"] = inner.info
        lower = np.clip(q - correction - FLOAT_SLACK, 0.0, 1.0)
        summary = {
            "correction": correction,
            "n_scores": len(rows),
            "n_calibration_questions": int(cal.records["question_id"].nunique()),
            "calibration_coverage": float(np.mean(y >= lower)),
            "inner_coverage": float(np.mean(y >= q)),
        }
        model.info["conformal"] = summary
        return model, [*history, summary]
