"""Fit calibrators (DESIGN.md section 5): split, trainer, early stopping, collapse check.

``fit(method, data)`` is the entry point behind ``dprm train`` and ``dprm.fit``. It splits the
calibration set 80/20 by question (seed 42, fixed), resolves the method's config dataclass and
calls the method's ``fit_model(train, val, config, seed, progress)``; gradient methods build a
:class:`~dprm.trainer.Trainer` (re-exported here with :class:`TrainConfig` and :class:`Batch`).
Distribution calibrators are then checked for collapse (:func:`check_collapse`): a map nearly
constant in tau and h raises :class:`CollapseError` and is never returned or saved.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dprm import __version__
from dprm import metrics as M
from dprm.config import ConfigError, load_config, to_dict
from dprm.data.contract import CalibrationSet
from dprm.data.splits import split_by_question
from dprm.trainer import Batch, StandardizedRows, TrainConfig, Trainer

if TYPE_CHECKING:  # the models import this module; import them lazily to avoid a cycle
    from dprm.models.base import Calibrator

__all__ = [
    "Batch",
    "CollapseError",
    "StandardizedRows",
    "TrainConfig",
    "Trainer",
    "check_collapse",
    "fit",
    "resolve_config",
]


#: Split fixed by the paper (GroupShuffleSplit, 20 % of questions, seed 42).
VAL_FRACTION, SPLIT_SEED = 0.2, 42
#: A map is collapsed when both its spread across tau (mean Q(0.9|h) - Q(0.1|h)) and across h
#: (std of the point estimate) are below this share of the validation targets' std.
COLLAPSE_RELATIVE_SPREAD = 0.1


class CollapseError(RuntimeError):
    """Training produced a map nearly constant in tau and h; it is never saved."""


@torch.no_grad()
def check_collapse(model: Calibrator, val: CalibrationSet, max_rows: int = 20000) -> dict[str, Any]:
    """Is the map nearly constant in tau and in h on validation rows?

    tau_spread = mean_j [Q(0.9 | h_j) - Q(0.1 | h_j)], h_spread = std_j of the point estimate
    (trapezoid over the 11 levels), target_std = std of the validation success_prob. The map is
    collapsed when both spreads are below ``COLLAPSE_RELATIVE_SPREAD * target_std`` (targets with
    no spread cannot collapse), or when any quantile is not finite.
    """
    rows = np.arange(len(val))
    if len(rows) > max_rows:
        rows = np.sort(np.random.default_rng(0).choice(len(rows), max_rows, replace=False))
    part = val.subset(rows)
    score = part.records["prm_score"].to_numpy(np.float32)
    q = model.quantiles(part.hidden, M.LEVELS_11, score).astype(np.float64)
    y = part.records["success_prob"].to_numpy(np.float64)
    finite = bool(np.isfinite(q).all())
    tau_spread = float(np.mean(q[:, 9] - q[:, 1])) if finite else float("nan")
    h_spread = float(np.std(M.trapezoid_mean(q))) if finite else float("nan")
    target_std = float(np.std(y))
    threshold = COLLAPSE_RELATIVE_SPREAD * target_std
    collapsed = (not finite) or (
        target_std > 1e-6 and tau_spread < threshold and h_spread < threshold
    )
    return {
        "collapsed": bool(collapsed),
        "finite": finite,
        "tau_spread": tau_spread,
        "h_spread": h_spread,
        "target_std": target_std,
        "threshold": threshold,
    }


def resolve_config(method: str, config_path=None, overrides: dict | None = None):
    """The method's config dataclass from defaults < TOML (table ``[method]``) < overrides."""
    from dprm.models import REGISTRY

    cls = REGISTRY[method]
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        if overrides:
            raise ConfigError(f"method {method!r} has no hyper-parameters; got {sorted(overrides)}")
        return None
    return load_config(config_class, config_path, overrides, table=method)


def fit(
    method: str,
    data: CalibrationSet,
    *,
    config_path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> Calibrator:
    """Train calibrator ``method`` on ``data``; deterministic given ``seed``.

    Returns the fitted calibrator (best checkpoint) with ``info`` (seed, resolved config,
    version, data path, sizes, timing, best step, collapse check) and ``history`` set.

    Raises:
        CollapseError: a distribution calibrator collapsed to a map constant in tau and h.
    """
    from dprm.models import REGISTRY

    if method not in REGISTRY:
        raise ConfigError(f"unknown method {method!r}; known: {sorted(REGISTRY)}")
    config = resolve_config(method, config_path, overrides)
    train_rows, val_rows = split_by_question(
        data.records["question_id"].to_numpy(), VAL_FRACTION, SPLIT_SEED
    )
    train, val = data.subset(train_rows), data.subset(val_rows)
    cls = REGISTRY[method]
    started = time.perf_counter()
    torch.manual_seed(seed)
    if hasattr(cls, "fit_model"):
        model, history = cls.fit_model(train, val, config, seed, progress)
    else:  # nothing to fit (e.g. ``base``)
        model, history = cls(data.hidden_dim, {}), []
    model.info.update(
        method=method,
        seed=seed,
        config=to_dict(config) if config is not None else {},
        dprm_version=__version__,
        data_path=str(data.path) if data.path is not None else None,
        n_train=len(train),
        n_val=len(val),
        n_train_questions=int(train.records["question_id"].nunique()),
        n_val_questions=int(val.records["question_id"].nunique()),
        fit_seconds=round(time.perf_counter() - started, 3),
    )
    model.history = history
    if model.kind == "distribution":
        report = check_collapse(model, val)
        model.info["collapse"] = report
        if report["collapsed"]:
            raise CollapseError(
                f"{method} (seed {seed}) collapsed to a map nearly constant in tau and h: "
                f"tau spread {report['tau_spread']:.4g}, h spread {report['h_spread']:.4g} "
                f"< {report['threshold']:.4g} (= {COLLAPSE_RELATIVE_SPREAD} x target std); "
                "refusing to return or save it"
            )
    return model
