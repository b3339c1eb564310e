"""Hyper-parameter search of the gradient-trained calibrators (``dprm tune``), on Optuna.

The paper tuned learning rates, layers and sizes per (generator, PRM) "in shell scripts"; this
is that search, made reproducible and fair:

* **Same budget for every method.** Each method in :data:`TUNED_METHODS` gets its own Optuna
  study with the same number of finished trials (complete + pruned), so a comparison between
  tuned calibrators is not a comparison of tuning effort.
* **Objective on the training split's own validation questions.** The calibration set is split
  80/20 by question with the seed of :func:`dprm.models.fit.fit` (42); a trial trains on the
  80 % and is scored on the 20 % (:data:`OBJECTIVES`): by default (``"wql"``, the same score for
  every method) by the validation WQL at the 11 levels of the model the trainer returns; with
  ``"checkpoint"`` by the trainer's checkpoint-selection score (``select_metric``: the
  calibration area for ``ot`` / ``qr`` / ``mono``, the count NLL for ``binomial``) at its best
  eligible checkpoint. Test splits (id / ood) are never read.
* **Seeded and resumable.** A TPE sampler seeded from (seed, method); the studies live in
  ``OUT/study.db`` (SQLite), so a killed search continues where it stopped: finished trials are
  kept, a trial that was running is marked failed and not counted, and only the missing trials
  run.
* **Pruning.** After every validation evaluation past the warm-up the trial reports its best
  score so far (:func:`dprm.models.training.evaluation_hook`); a
  :class:`optuna.pruners.MedianPruner` stops trials worse than the median of earlier trials at
  the same step. A trial whose loss turns NaN or whose map collapses is recorded as pruned with
  its error (it used its share of the budget).
* **Features cached once.** The split's hidden states are standardised once (float32, training
  statistics) and every trial trains on that copy; the trainer's own standardiser then fits
  mean ~0 / scale ~1 on it. The tuned calibrator of each method is refitted from the raw data
  with the best parameters by :func:`dprm.models.fit.fit` (same split, same seed), so it is an
  ordinary calibrator directory; its validation score is recorded next to the trial's.

The search spaces are the declarative table :data:`SEARCH_SPACES` (method -> config key ->
dimension). Outputs: ``OUT/best.json``, ``OUT/trials.csv`` and ``OUT/{method}/`` per method.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
import os
import shutil
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dprm import metrics as M
from dprm.config import ConfigError
from dprm.data.contract import CalibrationSet
from dprm.digests import digest, frame_digest
from dprm.io import DataError, OutputError, atomic_path, folder_locked, strict_jsonable, write_json
from dprm.models.fit import (
    SPLIT_SEED,
    VAL_FRACTION,
    CollapseError,
    check_collapse,
    fit,
    fit_split,
    resolve_config,
)
from dprm.models.interface import Standardizer, predict
from dprm.models.registry import REGISTRY
from dprm.models.training import eligible_from, evaluation_hook, reuse_standardized_rows
from dprm.version import __version__
from dprm.workers import ended_on_exit

#: the gradient-trained calibrators a search covers by default (each gets the same trials)
TUNED_METHODS = ("ot", "qr", "mono", "binomial")
#: the validation scores ``dprm train --method auto`` can choose by (lower is better)
SELECT_METRICS = ("wql", "brier", "calibration_area")
DEFAULT_SELECT = "wql"
#: what a trial is scored by on the validation questions (lower is better). ``checkpoint``: the
#: trainer's own checkpoint score at its best eligible checkpoint (each method's
#: ``select_metric``); ``wql``: the validation WQL at the 11 levels (``M.LEVELS_11``) of the
#: model the trainer returns, one score for every method (the calibration area cannot tell a
#: calibrated but near-marginal map from a sharp one; WQL can). ``wql`` is the default: on the
#: development worlds the ``checkpoint`` search made ``ot`` worse than its defaults
#: (docs/decisions/tuning-objective-wql.md).
OBJECTIVES = ("checkpoint", "wql")
DEFAULT_OBJECTIVE = "wql"
#: measured seconds per default fit at D = 3584 (30k records, 1 thread): the heaviest searches
#: start first when methods run in parallel (binomial + qr and ot + mono balance two workers)
FIT_SECONDS = {"binomial": 16.5, "ot": 13.0, "mono": 10.2, "qr": 8.3}
STUDY_FILE, BEST_FILE, TRIALS_FILE = "study.db", "best.json", "trials.csv"
#: finished trials: they count towards the budget; failed (killed, crashed) ones do not
FINISHED = ("COMPLETE", "PRUNED")


# ----------------------------------------------------------------------------- search spaces
@dataclass(frozen=True)
class LogFloat:
    """A positive float searched on a log scale in [low, high]."""

    low: float
    high: float

    def suggest(self, trial, key: str) -> float:
        return trial.suggest_float(key, self.low, self.high, log=True)


@dataclass(frozen=True)
class Choice:
    """One of a few values (int, float, str or bool)."""

    options: tuple

    def suggest(self, trial, key: str) -> Any:
        return trial.suggest_categorical(key, list(self.options))


@dataclass(frozen=True)
class Layers:
    """Hidden layer widths (a tuple config value): depth x width, searched as two choices."""

    depths: tuple[int, ...]
    widths: tuple[int, ...]

    def suggest(self, trial, key: str) -> tuple[int, ...]:
        depth = trial.suggest_categorical(f"{key}_depth", list(self.depths))
        width = trial.suggest_categorical(f"{key}_width", list(self.widths))
        return (int(width),) * int(depth)


#: shared by every method: Adam's rate, batch size and weight decay
_OPTIMISATION = {
    "lr": LogFloat(1e-4, 3e-2),
    "batch_size": Choice((128, 256, 512)),
    "weight_decay": Choice((0.0, 1e-5, 1e-4, 1e-3)),
}
#: the quantile-map network of ``mono`` / ``binomial`` / ``ot`` (layers and sizes). The PICNN
#: over the scalar tau keeps one hidden layer: one layer is already universal for monotone
#: maps (docs: same validation WQL as (32, 32) at 2.5x less cost), and a second layer of 64
#: made a binomial trial ~125 CPU s at D = 3584 (measured), a quarter of the whole budget.
_MAP_NET = {
    "context_hidden": Layers(depths=(1, 2), widths=(32, 64, 128)),
    "context_dim": Choice((8, 16, 32)),
    "picnn_hidden": Layers(depths=(1,), widths=(16, 32, 64)),
}

#: method -> config key -> dimension. Keys are fields of the method's config dataclass (a test
#: checks it); everything not listed keeps the method's default (or a ``fixed`` override).
SEARCH_SPACES: dict[str, dict[str, LogFloat | Choice | Layers]] = {
    "qr": dict(_OPTIMISATION),
    "mono": _OPTIMISATION | _MAP_NET,
    # levels of the training mixture: its cost is linear in them (default 32)
    "binomial": _OPTIMISATION | _MAP_NET | {"n_levels": Choice((16, 32))},
    # the min-max: f's own rate and how often f moves per g update
    "ot": _OPTIMISATION
    | _MAP_NET
    | {"lr_f": LogFloat(1e-4, 3e-2), "f_every": Choice((1, 2, 3, 4))},
}


#: settings of the *trials* only, not of the tuned model: ``ot``'s trials train one map (the
#: member whose learning rates, sizes and f cadence are searched) and the refit bags
#: ``ensemble_size`` maps with the best member settings, as ``dprm train`` does. An ensemble in
#: every trial would cost K min-max games per trial (4x ``ot``'s trial CPU) for a score that
#: mostly measures the member's settings.
TRIAL_ONLY: dict[str, dict[str, Any]] = {"ot": {"ensemble_size": 1}}


def suggest_overrides(method: str, trial) -> dict[str, Any]:
    """The config overrides of one trial, drawn from ``SEARCH_SPACES[method]``."""
    return {key: dim.suggest(trial, key) for key, dim in SEARCH_SPACES[method].items()}


# ----------------------------------------------------------------------------- settings
@dataclass
class TuneSettings:
    """What determines a search (stored in each study; a rerun must match it to resume).

    Attributes:
        trials: finished trials (complete + pruned) per method; the same for every method.
        seed: training seed of every trial and of the tuned model; the samplers are seeded
            from it and the method name.
        max_steps: step cap of every trial and of the tuned model (0: the method's default).
        prune_startup: trials run to the end before the pruner may stop one.
        objective: what a trial is scored by (:data:`OBJECTIVES`), the same for every method.
    """

    trials: int = 50
    seed: int = 0
    max_steps: int = 0
    prune_startup: int = 5
    objective: str = DEFAULT_OBJECTIVE

    def fixed(self) -> dict[str, Any]:
        """Config overrides every trial of every method shares."""
        return {"max_steps": self.max_steps} if self.max_steps > 0 else {}


def sampler_seed(seed: int, method: str) -> int:
    """A seed per (seed, method): the methods' samplers draw independent sequences."""
    return zlib.crc32(f"{method}:{seed}".encode()) & 0x7FFFFFFF


def _fingerprint(data: CalibrationSet, method: str, settings: TuneSettings) -> dict[str, Any]:
    """What a study's trials depend on (the trial count is not: a rerun may ask for more)."""
    space = {
        k: dataclasses.asdict(v) | {"type": type(v).__name__}
        for k, v in SEARCH_SPACES[method].items()
    }
    fingerprint = {
        "method": method,
        "data": str(Path(data.path).resolve()) if data.path is not None else None,
        "data_digest": (  # by content: labels changed in place, same rows, are a new search
            digest(data.path) if data.path is not None else None
        )
        or frame_digest(data.records, data.hidden),
        "records": len(data),
        "hidden_dim": data.hidden_dim,
        "seed": settings.seed,
        "fixed": settings.fixed(),
        "trial_only": TRIAL_ONLY.get(method, {}),
        "prune_startup": settings.prune_startup,
        "space": space,
        "objective": settings.objective,
    }
    return strict_jsonable(fingerprint)


#: what a study stored without an "objective" was scored by (the default before ``wql``)
LEGACY_OBJECTIVE = "checkpoint"


# ----------------------------------------------------------------------------- data
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


# ----------------------------------------------------------------------------- one study
def _optuna():
    try:
        import optuna
    except ImportError:  # pragma: no cover - depends on the installation
        raise ConfigError(
            "dprm tune needs optuna: pip install 'dprm[tune]' (or pip install 'optuna>=3.4')"
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def storage_url(out: Path) -> str:
    return f"sqlite:///{(out / STUDY_FILE).resolve()}"


def create_storage(out: Path) -> None:
    """Create the SQLite schema of ``out/study.db`` once, under a lock on ``out``.

    Worker processes that each create it at the same time race on it
    (sqlite3.IntegrityError on alembic_version, or OperationalError "table studies already
    exists", seen with ``dprm tune --jobs 2`` and with ``dprm reproduce --tune-trials``, where
    the ot and qr units of one world share the file). Creating an existing schema is a no-op.
    """
    with folder_locked(out):
        _optuna().storages.RDBStorage(storage_url(out))


def _data_reason(stored: dict, fingerprint: dict) -> str:
    """Why a study's data differs, when it does by content only (else "")."""
    if stored.get("data_digest") == fingerprint.get("data_digest"):
        return ""
    if "data_digest" not in stored:
        return ": it recorded no content digest of its data (made by an older dprm)"
    if stored.get("data") == fingerprint.get("data"):
        return f": the content of {fingerprint.get('data')} changed since it ran"
    return ""


def open_study(out: Path, method: str, fingerprint: dict, settings: TuneSettings, restart: bool):
    """Create or resume the study of ``method``; a study with other settings is refused.

    Trials left running by a killed process are marked failed (they do not count).

    Raises:
        OutputError: the stored study was run with other settings and ``restart`` is False.
    """
    optuna = _optuna()
    storage = storage_url(out)
    if method in optuna.get_all_study_names(storage):
        study = optuna.load_study(study_name=method, storage=storage)
        stored = study.user_attrs.get("settings")
        if isinstance(stored, dict) and "objective" not in stored:  # stored before it was kept
            stored = {**stored, "objective": LEGACY_OBJECTIVE}
        if stored != fingerprint:
            if not restart:
                stored = stored or {}
                diff = sorted(
                    k for k in {*fingerprint, *stored} if stored.get(k) != fingerprint.get(k)
                )
                raise OutputError(
                    out / STUDY_FILE,
                    f"the {method!r} search there was run with other settings ({', '.join(diff)}"
                    f"){_data_reason(stored, fingerprint)}; pass --overwrite to start it over",
                )
            optuna.delete_study(study_name=method, storage=storage)
    study = optuna.create_study(
        study_name=method,
        storage=storage,
        load_if_exists=True,
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=sampler_seed(settings.seed, method)),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=settings.prune_startup),
    )
    study.set_user_attr("settings", fingerprint)
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for trial in running:  # left by a killed process: failed, re-run, not counted
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
    return study


def finished_trials(study) -> int:
    return sum(t.state.name in FINISHED for t in study.get_trials(deepcopy=False))


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
    optuna = _optuna()

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
    study = open_study(out, method, _fingerprint(data, method, settings), settings, restart)
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
                study.optimize(objective, n_trials=1, callbacks=[tick, *callbacks])
    finally:
        bar.close()
    return study


# ----------------------------------------------------------------------------- the tuned model
def fit_tuned(method: str, study, split: TuneSplit, data: CalibrationSet, out: Path, settings):
    """Refit ``method`` with the study's best parameters on the raw data; save ``out/method``.

    Returns the method's entry of best.json. Kept when ``out/method`` already holds the fit of
    the same best trial.
    """
    import optuna

    states = [t.state.name for t in study.get_trials(deepcopy=False)]
    counts = {s.lower(): states.count(s) for s in ("COMPLETE", "PRUNED", "FAIL")}
    entry: dict[str, Any] = {"trials": counts}
    completed = [
        t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE
    ]
    if not completed:
        entry["error"] = "no trial completed (all pruned or failed)"
        return entry
    best = study.best_trial
    config = resolve_config(method, None, best.user_attrs["overrides"])
    entry |= {
        "trial": best.number,
        "value": best.value,
        "metric": trial_metric(config, settings.objective),
        "params": best.params,
        "overrides": best.user_attrs["overrides"],
    }
    target = out / method
    config_path = target / "config.json"
    if config_path.exists():
        saved = json.loads(config_path.read_text()).get("info", {}).get("tune", {})
        if saved.get("trial") == best.number and saved.get("fingerprint") == study.user_attrs.get(
            "settings"
        ):
            return entry | {"validation": saved["validation"], "refit_value": saved["refit_value"]}
    try:
        model = fit(
            method, data, overrides=best.user_attrs["overrides"], seed=settings.seed, progress=False
        )
    except (CollapseError, FloatingPointError) as err:
        entry["error"] = f"refit with the best parameters failed: {err}"
        return entry
    scores = validation_scores(model, split.val)
    # the refit's score by the trial's objective (read from the raw data: last digits may differ)
    if settings.objective == "wql":
        refit_value = scores["wql"]
    else:
        refit_value = model.info["training"]["best_score"]
    model.info["tune"] = {
        "trial": best.number,
        "value": best.value,
        "refit_value": refit_value,
        "validation": scores,
        "trials": counts,
        "fingerprint": study.user_attrs.get("settings"),
    }
    run = {
        "method": method,
        "seed": settings.seed,
        "data": str(data.path) if data.path is not None else None,
        "overrides": best.user_attrs["overrides"],
        "resolved_config": model.info.get("config", {}),
        "dprm_version": __version__,
        "info": model.info,
    }
    extra = {"history.json": model.history, "run.json": run}
    model.save(
        target, extra_files={k: strict_jsonable(v) for k, v in extra.items()}, overwrite=True
    )
    return entry | {"validation": scores, "refit_value": refit_value}


def tune_method(
    method: str,
    data: CalibrationSet | str | Path,
    out: str | Path,
    settings: TuneSettings,
    *,
    restart: bool = False,
    progress: bool = False,
    position: int = 0,
    threads: int = 0,
    split: TuneSplit | None = None,
) -> dict[str, Any]:
    """Search one method and save its tuned calibrator in ``out/method``; returns its entry.

    Module level so worker processes can run it (``data`` may then be a path).
    """
    if threads > 0:
        from dprm.threads import set_process_threads

        set_process_threads(threads)  # the API calls below keep it
    if not isinstance(data, CalibrationSet):
        from dprm.data import read_calibration_set

        data = read_calibration_set(data)
    out = Path(out)
    started, cpu_started = time.perf_counter(), time.process_time()
    split = split or split_for_tuning(data)
    study = run_study(
        method, split, data, out, settings, restart=restart, progress=progress, position=position
    )
    entry = fit_tuned(method, study, split, data, out, settings)
    return entry | {
        "seconds": round(time.perf_counter() - started, 3),
        "cpu_seconds": round(time.process_time() - cpu_started, 3),
        # which process searched it: with jobs > 1, methods of one worker share its core
        "process": os.getpid(),
    }


def tuned_overrides(
    method: str,
    data: CalibrationSet,
    out: str | Path,
    trials: int,
    seed: int = 0,
    max_steps: int = 0,
    objective: str = DEFAULT_OBJECTIVE,
) -> dict[str, Any]:
    """The best config overrides of ``method`` from a (resumed) search of ``trials`` trials.

    For pipelines (``dprm reproduce``'s train stage): the study lives in ``out/study.db`` and
    is shared by the training seeds of one (world, method); a file lock makes concurrent
    workers wait for the one that runs it instead of adding trials. A stored search with other
    settings (data, trials' space, objective) is stale: the pipeline re-runs a unit only when
    its inputs changed, so that search is started over. No calibrator is saved.

    Raises:
        CollapseError: no trial completed (every one pruned or failed).
    """
    import fcntl

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective {objective!r} is not one of {OBJECTIVES}")
    settings = TuneSettings(trials=trials, seed=seed, max_steps=max_steps, objective=objective)
    create_storage(out)  # the other methods' units of this world may be creating it too
    with open(out / f".{method}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            study = run_study(
                method, split_for_tuning(data), data, out, settings, progress=False, restart=True
            )
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    if not any(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False)):
        raise CollapseError(f"{method}: no trial of the search in {out} completed")
    return dict(study.best_trial.user_attrs["overrides"])


# ----------------------------------------------------------------------------- the search
def choose(methods: dict[str, dict], select: str = DEFAULT_SELECT) -> str | None:
    """The method with the lowest validation ``select`` score (None if none has one)."""
    scored = {
        m: e["validation"][select]
        for m, e in methods.items()
        if "validation" in e and e["validation"].get(select) is not None
    }
    return min(scored, key=lambda m: (scored[m], m)) if scored else None


def check_request(methods: list[str], select: str, settings: TuneSettings) -> None:
    """Check a search's methods and settings before any work (and before ``--overwrite``
    discards an earlier search).

    Raises:
        ConfigError: an unknown or untunable method, an unknown ``select`` or objective, a
            trial count below 1, a fixed override a method's config refuses.
    """
    unknown = [m for m in methods if m not in SEARCH_SPACES]
    if unknown or not methods:
        known = sorted(REGISTRY)
        raise ConfigError(
            f"cannot tune {unknown or 'no methods'}: tunable methods are {sorted(SEARCH_SPACES)}"
            + (f" (known calibrators: {known})" if any(m not in REGISTRY for m in unknown) else "")
        )
    if select not in SELECT_METRICS:
        raise ConfigError(f"select {select!r} is not one of {SELECT_METRICS}")
    if settings.objective not in OBJECTIVES:
        raise ConfigError(f"objective {settings.objective!r} is not one of {OBJECTIVES}")
    if settings.trials < 1:
        raise ConfigError(f"trials must be >= 1, got {settings.trials}")
    for method in methods:  # fixed overrides valid for every method, before any work
        resolve_config(method, None, settings.fixed())


def tune(
    data: CalibrationSet | str | Path,
    out: str | Path,
    *,
    methods: Iterable[str] = TUNED_METHODS,
    settings: TuneSettings | None = None,
    select: str = DEFAULT_SELECT,
    restart: bool = False,
    jobs: int = 1,
    threads: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Tune each method (same number of trials each) and write best.json, trials.csv, OUT/method.

    Args:
        data: the calibration set (or its directory) of the *training* split.
        out: the search directory (study.db, best.json, trials.csv, one calibrator per method).
        methods: methods to tune, each in :data:`SEARCH_SPACES`.
        settings: trials, seed, step cap, pruner start-up, trial objective
            (:class:`TuneSettings`).
        select: the validation score ``best_method`` is chosen by (:data:`SELECT_METRICS`).
        restart: start over a study whose stored settings differ (else that is an error).
        jobs: methods searched in parallel worker processes (each study stays sequential, so
            the result does not depend on ``jobs``).
        threads: torch threads per process (0: leave as set).
        progress: progress bars over trials.

    Returns:
        the content of best.json.

    Raises:
        ConfigError: an unknown or untunable method, an unknown ``select`` or objective.
        OutputError: a stored study has other settings and ``restart`` is False.
    """
    settings = settings or TuneSettings()
    methods = list(dict.fromkeys(methods))
    check_request(methods, select, settings)
    if not isinstance(data, CalibrationSet):
        from dprm.data import read_calibration_set

        data = read_calibration_set(data)
    if data.path is None and jobs > 1:
        raise ConfigError("jobs > 1 needs a calibration set read from a directory")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    create_storage(out)  # once, before the workers start
    started = time.perf_counter()
    entries: dict[str, dict] = {}
    if jobs <= 1:
        split = split_for_tuning(data)
        for method in methods:
            entries[method] = tune_method(
                method,
                data,
                out,
                settings,
                restart=restart,
                progress=progress,
                split=split,
                threads=threads,
            )
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        with (
            ProcessPoolExecutor(min(jobs, len(methods)), mp_context=context) as pool,
            ended_on_exit(pool),
        ):
            futures = {
                m: pool.submit(
                    tune_method,
                    m,
                    str(data.path),
                    str(out),
                    settings,
                    restart=restart,
                    progress=progress,
                    position=i,
                    threads=threads or 1,
                )
                for i, m in enumerate(sorted(methods, key=lambda m: -FIT_SECONDS.get(m, 0.0)))
            }
            entries = {m: futures[m].result() for m in methods}
    best = {
        "data": str(data.path) if data.path is not None else None,
        "settings": dataclasses.asdict(settings),
        "select": select,
        "best_method": choose(entries, select),
        "methods": entries,
        "seconds": round(time.perf_counter() - started, 3),
        "dprm_version": __version__,
        "optuna_version": _optuna().__version__,
        "storage": STUDY_FILE,
    }
    write_json(out / BEST_FILE, strict_jsonable(best))
    write_trials_csv(out, methods)
    return best


def write_trials_csv(out: Path, methods: Iterable[str]) -> None:
    """One row per trial of every method: state, value, duration, steps, parameters, error."""
    optuna = _optuna()
    rows, keys = [], []
    for method in methods:
        study = optuna.load_study(study_name=method, storage=storage_url(out))
        for t in study.get_trials(deepcopy=False):
            duration = t.duration.total_seconds() if t.duration is not None else None
            row = {
                "method": method,
                "number": t.number,
                "state": t.state.name.lower(),
                "value": t.value,
                "seconds": None if duration is None else round(duration, 3),
                "last_step": t.user_attrs.get("last_step"),
                "cpu_seconds": t.user_attrs.get("cpu_seconds"),
                "error": t.user_attrs.get("error", ""),
            }
            for k, v in t.params.items():
                row[f"param_{k}"] = v
            keys += [k for k in row if k not in keys]
            rows.append(row)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    with atomic_path(out / TRIALS_FILE) as tmp:
        tmp.write_text(buffer.getvalue())


def read_best(directory: str | Path) -> dict[str, Any]:
    """best.json of a search directory.

    Raises:
        DataError: missing or not a search directory's best.json.
    """
    from dprm.io import read_json

    path = Path(directory) / BEST_FILE
    best = read_json(path)
    if not isinstance(best, dict) or not isinstance(best.get("methods"), dict):
        raise DataError(path, "not a dprm tune best.json (expected an object with 'methods')")
    return best


def clear(out: Path) -> None:
    """Remove a search directory's outputs (``--overwrite``: start every study over)."""
    for name in (STUDY_FILE, BEST_FILE, TRIALS_FILE):
        (out / name).unlink(missing_ok=True)
    for method in SEARCH_SPACES:
        if (out / method / "config.json").exists():
            shutil.rmtree(out / method)
