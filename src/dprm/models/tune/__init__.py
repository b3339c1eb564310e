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
* **Seeded and resumable.** A TPE sampler seeded from (seed, method, trial number), so a
  resumed search draws what an uninterrupted one of the same total draws; the studies live in
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

Modules: :mod:`~dprm.models.tune.settings`, :mod:`~dprm.models.tune.spaces`,
:mod:`~dprm.models.tune.storage`, :mod:`~dprm.models.tune.objective`,
:mod:`~dprm.models.tune.refit` and :mod:`~dprm.models.tune.search`; the names below are their
public API.
"""

from dprm.models.tune.objective import (
    TuneSplit,
    make_objective,
    run_study,
    split_for_tuning,
    trial_metric,
    validation_scores,
)
from dprm.models.tune.refit import fit_tuned, tune_method, tuned_overrides
from dprm.models.tune.search import check_request, choose, clear, read_best, tune, write_trials_csv
from dprm.models.tune.settings import (
    BEST_FILE,
    DEFAULT_OBJECTIVE,
    DEFAULT_SELECT,
    FINISHED,
    FIT_SECONDS,
    OBJECTIVES,
    SELECT_METRICS,
    STUDY_FILE,
    TRIALS_FILE,
    TUNED_METHODS,
    TuneSettings,
)
from dprm.models.tune.spaces import (
    SEARCH_SPACES,
    TRIAL_ONLY,
    Choice,
    Layers,
    LogFloat,
    suggest_overrides,
)
from dprm.models.tune.storage import (
    LEGACY_OBJECTIVE,
    create_storage,
    finished_trials,
    import_optuna,
    open_study,
    sampler_seed,
    storage_url,
    study_fingerprint,
)

__all__ = [
    "BEST_FILE",
    "Choice",
    "DEFAULT_OBJECTIVE",
    "DEFAULT_SELECT",
    "FINISHED",
    "FIT_SECONDS",
    "LEGACY_OBJECTIVE",
    "Layers",
    "LogFloat",
    "OBJECTIVES",
    "SEARCH_SPACES",
    "SELECT_METRICS",
    "STUDY_FILE",
    "TRIALS_FILE",
    "TRIAL_ONLY",
    "TUNED_METHODS",
    "TuneSettings",
    "TuneSplit",
    "check_request",
    "choose",
    "clear",
    "create_storage",
    "finished_trials",
    "fit_tuned",
    "import_optuna",
    "make_objective",
    "open_study",
    "read_best",
    "run_study",
    "sampler_seed",
    "split_for_tuning",
    "storage_url",
    "study_fingerprint",
    "suggest_overrides",
    "trial_metric",
    "tune",
    "tune_method",
    "tuned_overrides",
    "validation_scores",
    "write_trials_csv",
]
