"""Never worse than the raw PRM: the validation comparison, the fallback and the small-data rule.

Every fit by :func:`dprm.models.fit.fit` scores the fitted calibrator, the raw PRM score
(``base``) and a Platt map of the score (fitted on the same training rows) on its own
validation questions (:func:`compare_with_raw`). The Brier difference to the raw score gets a
standard error clustered by question (records of one question are not independent); the fitted
calibrator is *worse than the raw PRM beyond noise* when its Brier exceeds the raw score's by
more than ``NOISE_SE`` standard errors. Under the do-no-harm rule (``dprm train --method
best-tuned``, the recommended ``binomial``, ``fit(..., do_no_harm=True)``) such a calibrator
is replaced by the raw-score calibrator, and the saved metadata says so (``info["do_no_harm"]``).

**Small data.** With at most ``SMALL_DATA_QUESTIONS`` training questions the defaults of the
gradient-trained methods regularise (:func:`small_data_defaults`): weight decay 1e-3, a
context network of one layer of 16 units into 8 dimensions (the default: 64 into 16), and
``binomial`` keeps the warm-up of the other methods (its validation split is too small for the
minimum to mean much). They sit under a TOML file and ``--set``, which still win. Tested on the development draws in
docs/results/do-no-harm.md; the fallback above is what guarantees the held-out floor.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dprm import metrics as M
from dprm.data.contract import CalibrationSet
from dprm.models.interface import Calibrator
from dprm.models.park_qr import score_input

#: a fitted calibrator is worse than the raw PRM when its validation Brier is above the raw
#: score's by more than this many (question-clustered) standard errors of the difference
NOISE_SE = 1.0
#: training sets with at most this many questions get :data:`SMALL_DATA_SETTINGS` as defaults
SMALL_DATA_QUESTIONS = 50
#: the small-data defaults (only the keys a method's config has are applied)
SMALL_DATA_SETTINGS: dict[str, Any] = {
    "weight_decay": 1e-3,
    "context_hidden": (16,),
    "context_dim": 8,
    # the warm-up of qr / mono (min(400, cap / 4)) for binomial too: the validation split of
    # <= 12 questions is too noisy for its minimum to pick a checkpoint (development draws:
    # held-out ID Brier 0.099 with the warm-up, 0.112 at the validation minimum, 3 of 3 draws)
    "warmup_steps": 400,
}


def small_data_defaults(config_class: type | None, n_train_questions: int) -> dict[str, Any]:
    """The regularising defaults for a training split of ``n_train_questions`` questions.

    Empty above :data:`SMALL_DATA_QUESTIONS` or for a method without those settings.
    """
    if config_class is None or n_train_questions > SMALL_DATA_QUESTIONS:
        return {}
    if not dataclasses.is_dataclass(config_class):
        return {}
    names = {f.name for f in dataclasses.fields(config_class)}
    return {k: v for k, v in SMALL_DATA_SETTINGS.items() if k in names}


def point_estimates(model: Calibrator, data: CalibrationSet) -> np.ndarray:
    """The calibrator's point estimates [N] on ``data`` (float64)."""
    score = score_input(model, data.records)
    hidden = data.hidden if model.uses_hidden else None
    return model.point_estimate(hidden, score).astype(np.float64)


def clustered_difference(
    loss_a: np.ndarray, loss_b: np.ndarray, question: np.ndarray
) -> tuple[float, float]:
    """Mean of ``loss_a - loss_b`` [N] and its standard error clustered by ``question`` [N].

    The mean is over records (as the Brier score is); the variance is the cluster-robust one,
    sum_q (S_q - n_q m)^2 / N^2 x Q / (Q - 1), S_q the question's summed difference.
    """
    diff = np.asarray(loss_a, np.float64) - np.asarray(loss_b, np.float64)
    n = len(diff)
    if n == 0:
        return float("nan"), float("nan")
    mean = float(diff.mean())
    _, inverse, counts = np.unique(question, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=diff)
    q = len(counts)
    if q < 2:
        return mean, float("nan")
    var = float(np.sum((sums - counts * mean) ** 2)) / n**2 * q / (q - 1)
    return mean, float(np.sqrt(var))


def worse_than_raw(delta: float, se: float, noise_se: float = NOISE_SE) -> bool:
    """Whether a Brier difference ``delta`` (calibrator - raw) is above noise."""
    if not np.isfinite(delta):
        return False
    return bool(delta > noise_se * (se if np.isfinite(se) else 0.0))


def compare_with_raw(
    model: Calibrator, train: CalibrationSet, val: CalibrationSet
) -> dict[str, Any]:
    """Validation Brier of ``model``, of the raw PRM score and of Platt (fitted on ``train``).

    Returns:
        ``{"brier": {"fitted", "raw", "platt"}, "delta_vs_raw", "se_vs_raw", "worse_than_raw",
        "platt_better", "n_val", "n_val_questions", "noise_se"}``: ``delta`` = fitted - raw,
        ``se`` clustered by question; ``platt_better``: Platt below the fitted by more than
        its own standard error.
    """
    from dprm.models.score_only import PlattCalibrator, PlattConfig

    y = val.records["success_prob"].to_numpy(np.float64)
    question = val.records["question_id"].to_numpy()
    raw = val.records["prm_score"].to_numpy(np.float64).clip(0.0, 1.0)
    fitted = point_estimates(model, val)
    platt, _ = PlattCalibrator.fit_model(train, val, PlattConfig(), 0, False)
    platt_p = point_estimates(platt, val)
    err = {name: (p - y) ** 2 for name, p in (("fitted", fitted), ("raw", raw), ("platt", platt_p))}
    delta, se = clustered_difference(err["fitted"], err["raw"], question)
    platt_delta, platt_se = clustered_difference(err["platt"], err["fitted"], question)
    return {
        "brier": {
            name: M.brier(p, y)
            for name, p in (("fitted", fitted), ("raw", raw), ("platt", platt_p))
        },
        "delta_vs_raw": delta,
        "se_vs_raw": se,
        "worse_than_raw": worse_than_raw(delta, se),
        "platt_better": bool(
            np.isfinite(platt_delta)
            and platt_delta < -NOISE_SE * (platt_se if np.isfinite(platt_se) else 0.0)
        ),
        "n_val": int(len(y)),
        "n_val_questions": int(len(np.unique(question))),
        "noise_se": NOISE_SE,
    }


def comparison_text(method: str, comparison: dict[str, Any], fell_back: bool) -> str:
    """The lines ``dprm train`` prints: the three validation Brier scores and the verdict."""
    brier = comparison["brier"]
    lines = [
        f"dprm train: validation Brier ({comparison['n_val_questions']} held-back questions, "
        "lower is better):",
        f"  {method:<10} {brier['fitted']:.4f}",
        f"  {'raw PRM':<10} {brier['raw']:.4f}",
        f"  {'platt':<10} {brier['platt']:.4f}",
    ]
    delta, se = comparison["delta_vs_raw"], comparison["se_vs_raw"]
    if comparison["worse_than_raw"]:
        verdict = (
            f"{method} is worse than the raw PRM score by {delta:+.4f} (> {NOISE_SE:g} x s.e. "
            f"{se:.4f})"
        )
        verdict += (
            ": saved the raw-score calibrator (base) instead; use the raw score here"
            if fell_back
            else "; consider the raw score (`--method base`) or `platt`"
        )
    else:
        verdict = f"{method} vs the raw PRM: {delta:+.4f} (s.e. {se:.4f}), not worse beyond noise"
    lines.append(f"dprm train: {verdict}")
    if comparison.get("platt_better") and not fell_back:
        lines.append(f"dprm train: platt is better than {method} on validation here")
    return "\n".join(lines)


__all__ = [
    "NOISE_SE",
    "SMALL_DATA_QUESTIONS",
    "SMALL_DATA_SETTINGS",
    "clustered_difference",
    "compare_with_raw",
    "comparison_text",
    "point_estimates",
    "small_data_defaults",
    "worse_than_raw",
]
