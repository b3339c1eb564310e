"""Score-only baselines: ``isotonic`` and ``platt`` recalibrate the PRM score r alone.

Both are point calibrators (kind ``point``, ``uses_hidden = False``): they map r to a point
estimate p_hat(r) and never read hidden states, so they show how much of a distributional
calibrator's gain comes from h rather than from fixing the score's bias.

* ``isotonic``: weighted pool-adjacent-violators on (r_j, y_j) with weights n_rollouts_j (the
  maximum-likelihood monotone fit of the binomial counts), then piecewise-linear interpolation
  between the fitted knots, clipped at the ends (scikit-learn's ``IsotonicRegression`` with
  ``out_of_bounds="clip"``). The knots are two float64 buffers, so they save to safetensors.
* ``platt``: p_hat = sigmoid(a logit(r) + b), (a, b) minimising the binomial log-loss of the
  counts k_j out of n_j (logistic regression on the expanded 0/1 rollouts), solved with LBFGS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from dprm.config import in_range, to_dict
from dprm.data.contract import CalibrationSet
from dprm.models.interface import Calibrator, PointMass
from dprm.models.registry import register


def _binomial_log_loss(p_hat: np.ndarray, k: np.ndarray, n: np.ndarray, eps: float = 1e-6) -> float:
    """Mean per-rollout log-loss -[k log p + (n - k) log(1 - p)] / n over records [N]."""
    p = np.clip(p_hat, eps, 1 - eps)
    return float(-(k * np.log(p) + (n - k) * np.log1p(-p)).sum() / max(n.sum(), 1))


def _labels(data: CalibrationSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prm_score [N], n_correct [N], n_rollouts [N]) as float64 arrays."""
    score = data.records["prm_score"].to_numpy(np.float64)
    n = data.records["n_rollouts"].to_numpy(np.float64)
    return score, data.n_correct.astype(np.float64), n


class _ScoreOnlyCalibrator(Calibrator):
    """A point calibrator of the PRM score alone: ``forward`` maps r to p_hat(r).

    Subclasses implement :meth:`predict` and :meth:`_fit` (the fitted model and its history
    entry); :meth:`fit_model` adds the train / val binomial log-loss.
    """

    kind = "point"
    uses_hidden = False

    def predict(self, prm_score: Tensor) -> Tensor:
        """p_hat [n] (float32) for scores [n]."""
        raise NotImplementedError

    def forward(self, hidden: Tensor | None, prm_score: Tensor | None = None) -> PointMass:
        if prm_score is None:
            raise ValueError(f"the {self.method} calibrator needs prm_score")
        return PointMass(self.predict(torch.as_tensor(prm_score)))

    @classmethod
    def _fit(cls, train: CalibrationSet, config: Any) -> tuple[_ScoreOnlyCalibrator, dict]:
        """The model fitted on ``train`` and its history entry (fitted parameters)."""
        raise NotImplementedError

    @classmethod
    def fit_model(
        cls,
        train: CalibrationSet,
        val: CalibrationSet,
        config: Any,
        seed: int,
        progress: bool,
    ) -> tuple[_ScoreOnlyCalibrator, list[dict]]:
        """Fit on ``train``; report train / val binomial log-loss in the history.

        Args:
            train: the calibration set the model is fitted on.
            val: held-out set (only scored).
            config: the method's config dataclass.
            seed: unused (the fits are deterministic).
            progress: unused (the fits are quick).

        Returns:
            (fitted model, a one-entry history).
        """
        model, entry = cls._fit(train, config)
        for name, part in (("train", train), ("val", val)):
            s, kk, nn = _labels(part)
            p = model.predict(torch.from_numpy(s)).double().numpy()
            entry[f"{name}_log_loss"] = _binomial_log_loss(p, kk, nn)
        return model, [entry]


# ----------------------------------------------------------------------------- isotonic
def pool_adjacent_violators(y: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Weighted least-squares non-decreasing fit of ``y`` [n] (already sorted by x).

    Args:
        y: responses [n] in x order.
        weight: positive weights [n].

    Returns:
        The fitted non-decreasing values [n].
    """
    means: list[float] = []
    weights: list[float] = []
    sizes: list[int] = []
    for value, w in zip(y.tolist(), weight.tolist(), strict=True):
        means.append(value)
        weights.append(w)
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            w_total = weights[-2] + weights[-1]
            merged = (means[-2] * weights[-2] + means[-1] * weights[-1]) / w_total
            size = sizes[-2] + sizes[-1]
            del means[-1], weights[-1], sizes[-1]
            means[-1], weights[-1], sizes[-1] = merged, w_total, size
    return np.repeat(np.asarray(means), sizes)


def fit_isotonic(x: np.ndarray, y: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knots (x_knots [K], y_knots [K]) of the weighted non-decreasing fit of y on x.

    Equal x values are pooled first (weighted mean of y, summed weight), as scikit-learn does,
    so the interpolant is a function of x.
    """
    order = np.argsort(x, kind="stable")
    x, y, weight = x[order], y[order], weight[order]
    x_unique, start = np.unique(x, return_index=True)
    w_sum = np.add.reduceat(weight, start)
    y_mean = np.add.reduceat(y * weight, start) / w_sum
    return x_unique, pool_adjacent_violators(y_mean, w_sum)


@dataclass(frozen=True)
class IsotonicConfig:
    """Hyper-parameters of ``isotonic``."""

    #: weight each record by its n_rollouts (the binomial MLE); False = every record weighs 1
    weight_by_rollouts: bool = True


@register("isotonic")
class IsotonicCalibrator(_ScoreOnlyCalibrator):
    """p_hat = the monotone piecewise-linear interpolant of the isotonic fit of y on r."""

    config_class: ClassVar[type] = IsotonicConfig
    data_sized = ("x_knots", "y_knots")

    def __init__(self, hidden_dim: int, config: dict[str, Any] | None = None):
        super().__init__(hidden_dim, config)
        # Identity until fitted; the knot count is data-dependent (see _load_from_state_dict).
        self.register_buffer("x_knots", torch.tensor([0.0, 1.0], dtype=torch.float64))
        self.register_buffer("y_knots", torch.tensor([0.0, 1.0], dtype=torch.float64))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Resize the knot buffers to the saved count before the default copy.
        for name in ("x_knots", "y_knots"):
            saved = state_dict.get(prefix + name)
            if saved is not None:
                setattr(self, name, torch.empty_like(saved, dtype=torch.float64))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def set_knots(self, x_knots: np.ndarray, y_knots: np.ndarray) -> None:
        """Store fitted knots [K] (x strictly increasing, y non-decreasing)."""
        self.x_knots = torch.as_tensor(np.asarray(x_knots, np.float64))
        self.y_knots = torch.as_tensor(np.asarray(y_knots, np.float64))

    def predict(self, prm_score: Tensor) -> Tensor:
        """Interpolated p_hat [n] (float32) for scores [n]; constant beyond the end knots."""
        xk, yk = self.x_knots, self.y_knots
        r = prm_score.to(torch.float64).clamp(xk[0], xk[-1])
        if len(xk) == 1:
            return yk.expand_as(r).float()
        idx = (torch.searchsorted(xk, r, right=True) - 1).clamp(0, len(xk) - 2)
        x0, x1, y0, y1 = xk[idx], xk[idx + 1], yk[idx], yk[idx + 1]
        return (y0 + (y1 - y0) * (r - x0) / (x1 - x0)).float()

    @classmethod
    def _fit(cls, train: CalibrationSet, config: IsotonicConfig) -> tuple[IsotonicCalibrator, dict]:
        """The knots fitted on ``train``; the history records their count."""

        score, k, n = _labels(train)
        weight = n if config.weight_by_rollouts else np.ones_like(n)
        model = cls(train.hidden_dim, to_dict(config))
        model.set_knots(*fit_isotonic(score, k / n, weight))
        return model, {"knots": len(model.x_knots)}


# ----------------------------------------------------------------------------- platt
def score_logit(prm_score: Tensor, eps: float) -> Tensor:
    """logit(clip(r, eps, 1 - eps)) [n]."""
    r = prm_score.to(torch.float64).clamp(eps, 1 - eps)
    return torch.log(r) - torch.log1p(-r)


def fit_platt(x: Tensor, k: Tensor, n: Tensor, max_iter: int = 200) -> tuple[float, float]:
    """(a, b) minimising sum_j -[k_j log s(a x_j + b) + (n_j - k_j) log(1 - s(a x_j + b))].

    Args:
        x: feature [N] (the score logit), float64.
        k: successes [N].
        n: trials [N].
        max_iter: LBFGS iterations (strong-Wolfe line search; converges in a few dozen).
    """
    params = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
    total = n.sum().clamp_min(1.0)
    optimizer = torch.optim.LBFGS(
        [params], lr=1.0, max_iter=max_iter, tolerance_grad=1e-10, tolerance_change=1e-14,
        history_size=20, line_search_fn="strong_wolfe",
    )  # fmt: skip

    def closure() -> Tensor:
        optimizer.zero_grad()
        z = params[0] * x + params[1]
        # -log s(z) = softplus(-z), -log(1 - s(z)) = softplus(z)
        loss = (
            k * torch.nn.functional.softplus(-z) + (n - k) * torch.nn.functional.softplus(z)
        ).sum() / total
        loss.backward()
        return loss

    optimizer.step(closure)
    a, b = params.detach().tolist()
    return float(a), float(b)


@dataclass(frozen=True)
class PlattConfig:
    """Hyper-parameters of ``platt``."""

    #: scores are clipped to [eps, 1 - eps] before the logit
    score_eps: float = in_range(1e-6, gt=0, lt=0.5)
    max_iter: int = in_range(200, ge=1)


@register("platt")
class PlattCalibrator(_ScoreOnlyCalibrator):
    """p_hat = sigmoid(a logit(r) + b): temperature (1 / a) and shift (b) scaling of the score."""

    config_class: ClassVar[type] = PlattConfig

    def __init__(self, hidden_dim: int, config: dict[str, Any] | None = None):
        super().__init__(hidden_dim, config)
        self.register_buffer("slope", torch.tensor(1.0, dtype=torch.float64))
        self.register_buffer("intercept", torch.tensor(0.0, dtype=torch.float64))

    def predict(self, prm_score: Tensor) -> Tensor:
        """p_hat [n] (float32) for scores [n]."""
        eps = float(self.config.get("score_eps", PlattConfig.score_eps))
        return torch.sigmoid(self.slope * score_logit(prm_score, eps) + self.intercept).float()

    @classmethod
    def _fit(cls, train: CalibrationSet, config: PlattConfig) -> tuple[PlattCalibrator, dict]:
        """(a, b) fitted on ``train`` by LBFGS; the history records them."""

        score, k, n = _labels(train)
        x = score_logit(torch.from_numpy(score), config.score_eps)
        a, b = fit_platt(x, torch.from_numpy(k), torch.from_numpy(n), config.max_iter)
        model = cls(train.hidden_dim, to_dict(config))
        model.slope.fill_(a)
        model.intercept.fill_(b)
        return model, {"slope": a, "intercept": b}
