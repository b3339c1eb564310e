"""``dprm tune``: check a request, search every method (in parallel worker processes or not),
write ``best.json`` and ``trials.csv``, choose the best method (``dprm train --method best-tuned``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dprm.config import ConfigError
from dprm.data.contract import CalibrationSet
from dprm.io import DataError, atomic_path, strict_jsonable, write_json
from dprm.models.fit import resolve_config
from dprm.models.registry import REGISTRY
from dprm.models.tune.objective import split_for_tuning
from dprm.models.tune.refit import tune_method
from dprm.models.tune.settings import (
    BEST_FILE,
    DEFAULT_SELECT,
    FIT_SECONDS,
    OBJECTIVES,
    SELECT_METRICS,
    STUDY_FILE,
    TRIALS_FILE,
    TUNED_METHODS,
    TuneSettings,
)
from dprm.models.tune.spaces import SEARCH_SPACES
from dprm.models.tune.storage import create_storage, import_optuna, storage_url
from dprm.version import __version__
from dprm.workers import ended_on_exit


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
        "optuna_version": import_optuna().__version__,
        "storage": STUDY_FILE,
    }
    write_json(out / BEST_FILE, strict_jsonable(best))
    write_trials_csv(out, methods)
    return best


def write_trials_csv(out: Path, methods: Iterable[str]) -> None:
    """One row per trial of every method: state, value, duration, steps, parameters, error."""
    optuna = import_optuna()
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
