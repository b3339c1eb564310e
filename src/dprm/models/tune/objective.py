"""Trial scoring: the training split's 80/20 by question (standardised once), the objective of
one trial and the loop that runs a study until it has its finished trials.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dprm import metrics as M
from dprm.config import ConfigError
from dprm.data.contract import CalibrationSet
from dprm.models.fit import SPLIT_SEED, VAL_FRACTION, check_collapse, fit_split, resolve_config
from dprm.models.interface import Standardizer, predict
from dprm.models.training import eligible_from, evaluation_hook, reuse_standardized_rows
from dprm.models.tune.settings import FINISHED, TuneSettings
from dprm.models.tune.spaces import SEARCH_SPACES, TRIAL_ONLY, suggest_overrides
from dprm.models.tune.storage import (
    finished_trials,
    import_optuna,
    open_study,
    study_fingerprint,
    trial_sampler,
)


@dataclass
class TuneSplit:
    """The training split's 80/20 by question: raw parts and standardised copies for trials."""

    train: CalibrationSet
    val: CalibrationSet
    train_std: CalibrationSet
    val_std: CalibrationSet


def split_for_tuning(data: CalibrationSet, chunk: int = 8192) -> TuneSplit:
    """Split like :func:`~dprm.models.fit.fit` and standardise both parts once (float32).

    Standardisation uses the training part's statistics, as the trainer's does, so a trial's
    trainer sees features with mean ~0 and scale ~1 and its own standardiser is ~the identity.
    """
    from dprm.data.splits import split_by_question

    train_rows, val_rows = split_by_question(
        data.records["question_id"].to_numpy(), VAL_FRACTION, SPLIT_SEED
    )
    train, val = data.subset(train_rows), data.subset(val_rows)
    matrix = np.empty((len(train), data.hidden_dim), dtype=np.float32)
    for start in range(0, len(train), chunk):
        matrix[start : start + chunk] = train.hidden[start : start + chunk]
    standardizer = Standardizer(data.hidden_dim).fit(matrix, chunk)
    mean, scale = standardizer.mean.numpy(), standardizer.scale.numpy()
    for start in range(0, len(train), chunk):
        block = matrix[start : start + chunk]
        np.subtract(block, mean, out=block)
        np.divide(block, scale, out=block)
    val_matrix = np.empty((len(val), data.hidden_dim), dtype=np.float32)
    for start in range(0, len(val), chunk):
        block = np.asarray(val.hidden[start : start + chunk], dtype=np.float32)
        val_matrix[start : start + chunk] = (block - mean) / scale
    return TuneSplit(
        train,
        val,
        CalibrationSet(train.records, matrix, data.meta, data.path),
        CalibrationSet(val.records, val_matrix, data.meta, data.path),
    )


def validation_scores(model, val: CalibrationSet) -> dict[str, float]:
    """WQL, Brier and calibration area of ``model`` on ``val`` (the common scores of ``auto``)."""
    y = val.records["success_prob"].to_numpy(np.float64)
    score = val.records["prm_score"].to_numpy(np.float32)
    pred = predict(model, val.hidden, score, M.LEVELS_11)
    out = {"brier": M.brier(pred.p, y)}
    if pred.q is not None:
        out["wql"] = M.wql(pred.q, y, pred.levels)
        out["calibration_area"] = M.calibration_area(pred.q, y, pred.levels)
    return out


def trial_metric(config, objective: str) -> str:
    """The name of the score a trial with ``config`` is judged by under ``objective``."""
    return config.select_metric if objective == "checkpoint" else objective


def make_objective(method: str, split: TuneSplit, settings: TuneSettings) -> Callable:
    """The Optuna objective of ``method``: train one trial, return its validation score.

    ``settings.objective`` ``"checkpoint"``: the trainer's ``select_metric`` at its best
    eligible checkpoint. ``"wql"``: the validation WQL at the 11 levels of the returned model
    (:func:`validation_scores`); the pruner then sees the best validation WQL so far at the
    trainer's own levels (the score it logs at each evaluation), the same proxy for every
    trial of the study.
    """
    optuna = import_optuna()

    def objective(trial) -> float:
        cpu_started = time.process_time()
        try:
            return train_trial(trial)
        finally:  # this process's CPU time (all threads): the trial's cost whatever else runs
            trial.set_user_attr("cpu_seconds", round(time.process_time() - cpu_started, 3))

    def train_trial(trial) -> float:
        overrides = suggest_overrides(method, trial) | settings.fixed()
        trial.set_user_attr("overrides", overrides)  # what the tuned model is refitted with
        overrides = overrides | TRIAL_ONLY.get(method, {})
        config = resolve_config(method, None, overrides)
        metric = trial_metric(config, settings.objective)
        best = math.inf

        def report(step: int, metrics: dict[str, float]) -> None:
            nonlocal best
            if step < eligible_from(config) and step != config.max_steps:
                return  # not an eligible checkpoint yet: nothing to compare
            best = min(best, metrics[metric])
            trial.report(best, step)
            trial.set_user_attr("last_step", step)
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned at step {step}")

        try:
            with evaluation_hook(report):
                model, _, _ = fit_split(
                    method,
                    split.train_std,
                    split.val_std,
                    overrides=overrides,
                    seed=settings.seed,
                    progress=False,
                )
        except FloatingPointError as err:
            trial.set_user_attr("error", str(err))
            raise optuna.TrialPruned(str(err)) from None
        if model.kind == "distribution":
            check = check_collapse(model, split.val_std)
            if check["collapsed"]:
                trial.set_user_attr("error", "collapsed")
                raise optuna.TrialPruned("collapsed")
        summary = model.info["training"]
        trial.set_user_attr("best_step", summary["best_step"])
        trial.set_user_attr("steps", summary["steps"])
        if settings.objective == "wql":
            return float(validation_scores(model, split.val_std)["wql"])
        return float(summary["best_score"])

    return objective


def run_study(
    method: str,
    split: TuneSplit,
    data: CalibrationSet,
    out: Path,
    settings: TuneSettings,
    *,
    restart: bool = False,
    progress: bool = True,
    position: int = 0,
    callbacks: Iterable[Callable] = (),
):
    """Run (or resume) the search of one method until it has ``settings.trials`` finished trials."""
    from tqdm.auto import tqdm

    if method not in SEARCH_SPACES:
        raise ConfigError(
            f"method {method!r} has no search space; tunable: {sorted(SEARCH_SPACES)}"
        )
    study = open_study(out, method, study_fingerprint(data, method, settings), settings, restart)
    done = finished_trials(study)
    bar = tqdm(
        total=settings.trials,
        initial=min(done, settings.trials),
        desc=f"tune {method}",
        unit="trial",
        disable=not progress,
        position=position,
    )

    def tick(study, trial) -> None:
        if trial.state.name in FINISHED:
            bar.update()
            with contextlib.suppress(ValueError):  # no complete trial yet
                bar.set_postfix(best=f"{study.best_value:.4g}")

    objective = make_objective(method, split, settings)
    try:
        # The trials share one standardised copy of the split (same numbers, no per-trial copy).
        with reuse_standardized_rows():
            # one trial at a time, re-counting after each: failed trials are retried, not counted
            while finished_trials(study) < settings.trials:
                study.sampler = trial_sampler(study, settings.seed, method)
                study.optimize(objective, n_trials=1, callbacks=[tick, *callbacks])
    finally:
        bar.close()
    return study
