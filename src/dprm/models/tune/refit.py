"""The tuned model: the best trial refitted from the raw data (:func:`fit_tuned`), one method's
search and refit (:func:`tune_method`), and the best overrides for pipelines
(:func:`tuned_overrides`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from dprm.config import ConfigError
from dprm.data.contract import CalibrationSet
from dprm.io import strict_jsonable
from dprm.models.fit import CollapseError, fit, resolve_config
from dprm.models.tune.objective import (
    TuneSplit,
    run_study,
    split_for_tuning,
    trial_metric,
    validation_scores,
)
from dprm.models.tune.settings import DEFAULT_OBJECTIVE, OBJECTIVES, TuneSettings
from dprm.models.tune.storage import create_storage
from dprm.version import __version__


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
