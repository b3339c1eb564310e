"""Fit calibrators (docs/design.md §5): split, config, seed, collapse check.

``fit(method, data)`` is the entry point behind ``dprm train`` and ``dprm.fit``. It splits the
calibration set 80/20 by question (seed 42, fixed) and calls :func:`fit_split`, the one fit
dispatch (also used by ``conformal`` for its inner calibrator): resolve the method's config
dataclass, seed torch once, call the method's ``fit_model(train, val, config, seed, progress)``.
The gradient loop itself lives in :mod:`dprm.models.training`; this module is never imported by
a method module except ``conformal``'s inner fit.

Distribution calibrators are then checked for collapse (:func:`check_collapse`); a collapsed
map raises :class:`CollapseError` and is never returned or saved.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dprm import metrics as M
from dprm.config import ConfigError, load_config, to_dict
from dprm.data.contract import CalibrationSet
from dprm.data.splits import split_by_question
from dprm.io import DataError
from dprm.models.do_no_harm import SMALL_DATA_QUESTIONS, compare_with_raw, small_data_defaults
from dprm.models.interface import Calibrator
from dprm.models.provenance import data_provenance
from dprm.models.registry import REGISTRY
from dprm.threads import torch_threads
from dprm.version import __version__

#: Split fixed by the paper (GroupShuffleSplit, 20 % of questions, seed 42).
VAL_FRACTION, SPLIT_SEED = 0.2, 42
#: A map is collapsed when both its spread across tau (mean Q(0.9|h) - Q(0.1|h)) and across h
#: (std of the point estimate) are below this share of the validation targets' std.
COLLAPSE_RELATIVE_SPREAD = 0.1
#: ... or when it is a point mass (Q(0.9|h) - Q(0.1|h) below ``POINT_MASS_SPREAD``) at 0 or at 1
#: (median within ``POINT_MASS_SPREAD`` of the end) for more than this share of the rows, and the
#: labels contradict it on more than ``POINT_MASS_CONTRADICTION`` of those rows.
POINT_MASS_SHARE = 0.5
POINT_MASS_SPREAD = 0.02
POINT_MASS_CONTRADICTION = 0.25
#: A row's k successes of n rollouts contradict a point mass at 0 when they are this unlikely
#: (binomial upper tail) at the largest success probability the point mass allows,
#: 2 x ``POINT_MASS_SPREAD`` (median below it, width below it); at 1 likewise with failures.
POINT_MASS_TAIL = 0.05


class CollapseError(RuntimeError):
    """Training produced a degenerate map (constant in tau and h, or a point mass at 0 or 1).

    A verdict on the data, not a crash: a rerun on the same data refuses the same map, so
    ``dprm run`` lists the unit as refused (``refusal``), not as failed, and under the
    do-no-harm rule :func:`fit` returns the raw-score calibrator instead.
    """

    refusal = True


def binomial_upper_tail(k: np.ndarray, n: np.ndarray, p: float) -> np.ndarray:
    """P(K >= k) for K ~ Binomial(n, p), elementwise over ``k``, ``n`` [N] (0 <= k <= n).

    Summed over the pmf in log space (lgamma), once per distinct (k, n) pair: a calibration
    set has a handful of rollout counts, however many rows. 1 where k <= 0.
    """
    pairs = np.stack([np.asarray(k, np.int64).ravel(), np.asarray(n, np.int64).ravel()], axis=1)
    if not len(pairs):
        return np.zeros(0)
    distinct, row_pair = np.unique(pairs, axis=0, return_inverse=True)
    log_p, log_q = math.log(p), math.log1p(-p)
    tails = np.empty(len(distinct))
    for i, (successes, rollouts) in enumerate(distinct.tolist()):
        terms = [
            math.lgamma(rollouts + 1) - math.lgamma(j + 1) - math.lgamma(rollouts - j + 1)
            + j * log_p + (rollouts - j) * log_q
            for j in range(max(successes, 0), rollouts + 1)
        ]  # fmt: skip
        tails[i] = min(1.0, math.fsum(math.exp(t) for t in terms))
    return tails[row_pair.ravel()]


@torch.no_grad()
def check_collapse(model: Calibrator, val: CalibrationSet, max_rows: int = 20000) -> dict[str, Any]:
    """Is the map degenerate on validation rows?

    tau_spread = mean_j [Q(0.9 | h_j) - Q(0.1 | h_j)], h_spread = std_j of the point estimate
    (trapezoid over the 11 levels), target_std = std of the validation success_prob. The map is
    collapsed when

    * both spreads are below ``COLLAPSE_RELATIVE_SPREAD * target_std`` (flat in tau and h;
      targets with no spread cannot collapse this way), or
    * it is a point mass at 0 or at 1 for most h: more than ``POINT_MASS_SHARE`` of the rows have
      Q(0.9 | h) - Q(0.1 | h) < ``POINT_MASS_SPREAD`` and Q(0.5 | h) within ``POINT_MASS_SPREAD``
      of 0 or 1 (what CondOT's own code converges to early on this task), and the labels
      contradict it on more than ``POINT_MASS_CONTRADICTION`` of those rows: a row's k successes
      of n rollouts contradict a point mass at 0 when P(K >= k) < ``POINT_MASS_TAIL`` for
      K ~ Binomial(n, 2 x ``POINT_MASS_SPREAD``) (at 1: the same for its failures). Judging by
      the labels *of those rows* keeps the check on for real data, where most labels are 0
      (Park et al.'s: about two thirds), and lets a map that is confidently right about hopeless
      or solved prefixes pass; judging by the binomial tail, not by "any success", keeps the
      verdict from turning with the number of rollouts: one success in 16 is what a prefix
      solved 4 % of the time gives 48 % of the time; or
    * any quantile is not finite.
    """
    rows = np.arange(len(val))
    if len(rows) > max_rows:
        rows = np.sort(np.random.default_rng(0).choice(len(rows), max_rows, replace=False))
    part = val.subset(rows)
    score = part.records["prm_score"].to_numpy(np.float32)
    y = part.records["success_prob"].to_numpy(np.float64)
    successes, rollouts = part.n_correct, part.records["n_rollouts"].to_numpy(np.int64)
    try:
        q = model.quantiles(part.hidden, M.LEVELS_11, score).astype(np.float64)
    except DataError:  # non-finite outputs
        q = np.full((len(rows), len(M.LEVELS_11)), np.nan)
    finite = bool(np.isfinite(q).all())
    tau_spread = float(np.mean(q[:, 9] - q[:, 1])) if finite else float("nan")
    h_spread = float(np.std(M.trapezoid_mean(q))) if finite else float("nan")
    target_std = float(np.std(y))
    threshold = COLLAPSE_RELATIVE_SPREAD * target_std
    flat = target_std > 1e-6 and tau_spread < threshold and h_spread < threshold
    point_mass_share = float("nan")
    at_end = False
    if finite and len(q):
        narrow = (q[:, 9] - q[:, 1]) < POINT_MASS_SPREAD
        at_zero = narrow & (q[:, 5] < POINT_MASS_SPREAD)
        at_one = narrow & (q[:, 5] > 1.0 - POINT_MASS_SPREAD)
        point_mass = at_zero | at_one
        point_mass_share = float(np.mean(point_mass))
        bound = 2.0 * POINT_MASS_SPREAD
        unlikely_successes = binomial_upper_tail(successes, rollouts, bound) < POINT_MASS_TAIL
        unlikely_failures = (
            binomial_upper_tail(rollouts - successes, rollouts, bound) < POINT_MASS_TAIL
        )
        contradicted = (at_zero & unlikely_successes) | (at_one & unlikely_failures)
        contradiction = float(contradicted.sum() / max(point_mass.sum(), 1))
        at_end = point_mass_share > POINT_MASS_SHARE and contradiction > POINT_MASS_CONTRADICTION
    collapsed = (not finite) or flat or at_end
    return {
        "collapsed": bool(collapsed),
        "finite": finite,
        "tau_spread": tau_spread,
        "h_spread": h_spread,
        "target_std": target_std,
        "threshold": threshold,
        "point_mass_share": point_mass_share,
        "point_mass_contradiction": contradiction if finite and len(q) else float("nan"),
    }


def resolve_config(
    method: str, config_path=None, overrides: dict | None = None, base: dict | None = None
):
    """The method's config dataclass from defaults < ``base`` < TOML (table ``[method]``) <
    overrides (``base``: e.g. the small-data defaults)."""
    if method not in REGISTRY:
        raise ConfigError(f"unknown method {method!r}; known: {sorted(REGISTRY)}")
    config_class = REGISTRY[method].config_class
    if config_class is None:
        if overrides:
            raise ConfigError(f"method {method!r} has no hyper-parameters; got {sorted(overrides)}")
        return None
    return load_config(config_class, config_path, overrides, table=method, base=base)


def fit_split(
    method: str,
    train: CalibrationSet,
    val: CalibrationSet,
    *,
    config_path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    seed: int = 0,
    progress: bool = True,
    base: dict[str, Any] | None = None,
) -> tuple[Calibrator, list[dict], Any]:
    """The fit dispatch: resolve config -> seed torch once -> ``fit_model`` on a given split.

    ``base``: defaults under the TOML file and ``overrides`` (the small-data rule).

    Returns:
        (fitted calibrator, history, resolved config dataclass or None).
    """
    config = resolve_config(method, config_path, overrides, base)
    torch.manual_seed(seed)
    model, history = REGISTRY[method].fit_model(train, val, config, seed, progress)
    return model, history, config


def fit(
    method: str,
    data: CalibrationSet,
    *,
    config_path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    seed: int = 0,
    progress: bool = True,
    threads: int | None = None,
    do_no_harm: bool = False,
) -> Calibrator:
    """Train calibrator ``method`` on ``data``; deterministic given ``seed``.

    Returns the fitted calibrator (best checkpoint) with ``info`` (seed, resolved config,
    version, data path, sizes, timing, best step, collapse check, ``versus_raw``: the
    validation comparison with the raw PRM and Platt, :func:`dprm.models.do_no_harm.compare_with_raw`)
    and ``history`` set. With at most ``SMALL_DATA_QUESTIONS`` training questions the
    small-data defaults apply (``info["small_data"]``).

    ``do_no_harm``: when the fitted calibrator is worse than the raw PRM on validation beyond
    noise, or its collapse guard refuses it (:class:`CollapseError`), return the raw-score
    calibrator (``base``) instead; its ``info["do_no_harm"]`` records the comparison (or the
    refusal, ``reason``) and the method it replaced.

    ``threads``: torch threads for this call only (default: the CLI's ``--threads`` policy,
    :func:`dprm.threads.default_threads`; restored on return). ``progress`` shows a bar.

    Raises:
        ConfigError: unknown method, key, or a value out of range (before any work).
        CollapseError: a distribution calibrator collapsed (see :func:`check_collapse`).
    """
    resolve_config(method, config_path, overrides)  # fail fast, before the split
    started = time.perf_counter()
    with torch_threads(threads):
        try:
            model = _fit(method, data, config_path, overrides, seed, progress)
        except CollapseError as err:
            if not do_no_harm:
                raise
            where = {
                "seed": seed,
                "data_path": str(data.path) if data.path is not None else None,
                "fit_seconds": round(time.perf_counter() - started, 3),
            }
            return _raw_instead(data, method, {"reason": f"collapse: {err}"}, where)
    if do_no_harm:
        model = _fall_back_to_raw(model, data)
    return model


def _raw_instead(data: CalibrationSet, method: str, record: dict, info: dict | None = None):
    """The raw-score calibrator standing in for ``method`` (its ``info["do_no_harm"]`` says so)."""
    from dprm.models.raw_score import RawScoreCalibrator

    raw = RawScoreCalibrator(data.hidden_dim)
    raw.info.update({"method": "base", "dprm_version": __version__, **(info or {})})
    raw.info["do_no_harm"] = {"applied": True, "fell_back": True, "fitted_method": method} | record
    return raw


def _fall_back_to_raw(model: Calibrator, data: CalibrationSet) -> Calibrator:
    """``model``, or the raw-score calibrator when ``model`` is worse on validation."""
    comparison = model.info.get("versus_raw")
    worse = bool(comparison and comparison.get("worse_than_raw"))
    if not worse:
        record = {"applied": True, "fell_back": False, "fitted_method": model.method}
        model.info["do_no_harm"] = record
        return model
    keep = ("seed", "data_path", "trained_on", "n_train", "n_val")
    raw = _raw_instead(
        data,
        model.method,
        {"fitted_config": model.info.get("config", {}),
         "fitted_training": model.info.get("training", {})},
        {k: model.info[k] for k in keep if k in model.info}
        | {k: model.info.get(k) for k in ("n_train_questions", "n_val_questions", "fit_seconds")}
        | {"versus_raw": comparison},
    )  # fmt: skip
    raw.history = getattr(model, "history", [])
    return raw


def _fit(
    method: str,
    data: CalibrationSet,
    config_path: str | Path | None,
    overrides: dict[str, Any] | None,
    seed: int,
    progress: bool,
) -> Calibrator:
    """:func:`fit` under its thread setting."""
    train_rows, val_rows = split_by_question(
        data.records["question_id"].to_numpy(), VAL_FRACTION, SPLIT_SEED
    )
    train, val = data.subset(train_rows), data.subset(val_rows)
    n_train_questions = int(train.records["question_id"].nunique())
    small = small_data_defaults(REGISTRY[method].config_class, n_train_questions)
    started = time.perf_counter()
    model, history, config = fit_split(
        method,
        train,
        val,
        config_path=config_path,
        overrides=overrides,
        seed=seed,
        progress=progress,
        base=small or None,
    )
    model.info.update(
        method=method,
        seed=seed,
        config=to_dict(config) if config is not None else {},
        dprm_version=__version__,
        data_path=str(data.path) if data.path is not None else None,
        trained_on=data_provenance(data.meta),
        n_train=len(train),
        n_val=len(val),
        n_train_questions=n_train_questions,
        n_val_questions=int(val.records["question_id"].nunique()),
        fit_seconds=round(time.perf_counter() - started, 3),
    )
    model.history = history
    if model.kind == "distribution":
        report = check_collapse(model, val)
        model.info["collapse"] = report
        if report["collapsed"]:
            raise CollapseError(
                f"{method} (seed {seed}) collapsed: tau spread {report['tau_spread']:.4g}, "
                f"h spread {report['h_spread']:.4g} (threshold {report['threshold']:.4g} = "
                f"{COLLAPSE_RELATIVE_SPREAD} x target std), point mass at 0 or 1 on "
                f"{report['point_mass_share']:.0%} of rows (limit {POINT_MASS_SHARE:.0%}); "
                "refusing to return or save it"
            )
    if small:
        model.info["small_data"] = {
            "n_train_questions": n_train_questions,
            "threshold": SMALL_DATA_QUESTIONS,
            "defaults": small,
        }
    if method != "base" and len(val):
        model.info["versus_raw"] = compare_with_raw(model, train, val)
    return model
