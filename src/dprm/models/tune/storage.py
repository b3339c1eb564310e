"""The studies' storage: Optuna's SQLite file ``OUT/study.db``, its schema created once under a
lock, each study's fingerprint (what its trials depend on) and the resume-or-refuse rule.
"""

from __future__ import annotations

import dataclasses
import zlib
from pathlib import Path
from typing import Any

from dprm.config import ConfigError
from dprm.data.contract import CalibrationSet
from dprm.digests import digest, frame_digest
from dprm.io import OutputError, folder_locked, strict_jsonable
from dprm.models.tune.settings import FINISHED, STUDY_FILE, TuneSettings
from dprm.models.tune.spaces import SEARCH_SPACES, TRIAL_ONLY


def import_optuna():
    """Optuna, quiet (its INFO lines per trial off), or a one-line ConfigError naming the extra."""
    try:
        import optuna
    except ImportError:  # pragma: no cover - depends on the installation
        raise ConfigError(
            "dprm tune needs optuna: pip install 'dprm[tune]' (or pip install 'optuna>=3.4')"
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def storage_url(out: Path) -> str:
    """The SQLAlchemy URL of the search directory's study file."""
    return f"sqlite:///{(out / STUDY_FILE).resolve()}"


def create_storage(out: Path) -> None:
    """Create the SQLite schema of ``out/study.db`` once, under a lock on ``out``.

    Worker processes that each create it at the same time race on it
    (sqlite3.IntegrityError on alembic_version, or OperationalError "table studies already
    exists", seen with ``dprm tune --jobs 2`` and with ``dprm reproduce --tune-trials``, where
    the ot and qr units of one world share the file). Creating an existing schema is a no-op.
    """
    with folder_locked(out):
        import_optuna().storages.RDBStorage(storage_url(out))


def sampler_seed(seed: int, method: str, trial: int | None = None) -> int:
    """A seed per (seed, method), or per (seed, method, trial number) for one trial's draw.

    The methods' samplers draw independent sequences. Seeding each trial's draw from its
    number (:func:`trial_sampler`) makes a resumed search draw what a fresh search of the same
    total draws: a sampler's random state lives in memory only, and a sampler seeded once per
    process would restart its sequence on every resume (trials 4-6 of a 3 + 3 resume would
    repeat trials 1-3).
    """
    key = f"{method}:{seed}" if trial is None else f"{method}:{seed}:{trial}"
    return zlib.crc32(key.encode()) & 0x7FFFFFFF


def trial_sampler(study, seed: int, method: str):
    """A TPE sampler for the study's next trial, seeded from (seed, method, its number).

    TPE draws from the finished trials (kept in the study file) and its random state (not
    kept): a fresh state seeded from the trial number gives a resumed study the draw an
    uninterrupted one makes, with Optuna's public API and nothing restored from a pickle.
    """
    optuna = import_optuna()
    number = len(study.get_trials(deepcopy=False))  # the next trial's number
    return optuna.samplers.TPESampler(seed=sampler_seed(seed, method, number))


def study_fingerprint(data: CalibrationSet, method: str, settings: TuneSettings) -> dict[str, Any]:
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
    optuna = import_optuna()
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
