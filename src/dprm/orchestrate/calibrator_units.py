"""The calibrator units of a run: train (optionally after a hyperparameter search) and evaluate.

Each ``*_units(pipe, world)`` only builds :class:`~dprm.runner.units.Unit` objects: their
``run()`` writes the outputs atomically at the paths of :class:`~dprm.runner.layout.Layout`, and
their ``inputs`` name everything the result depends on (the run settings, the world's recipe,
the content hash of the model read) and their ``reads`` the content digest of the data sets they
read, so a data set changed in place re-runs what reads it. Evaluation units also store what the
figures need (coverage curves, reliability bins, a sample of quantile curves), so figures and
tables can be drawn after the synthetic worlds are deleted.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dprm.io import write_json
from dprm.orchestrate.world_units import world_inputs
from dprm.runner.fingerprints import content_hash
from dprm.runner.layout import EVAL_SPLITS, TRAIN_SPLIT
from dprm.runner.units import Unit

if TYPE_CHECKING:
    from dprm.runner.pipeline import Pipeline

#: records of the ID calibration set kept per method for the flexibility figure
FLEX_SAMPLE = 256


def unit_threads(pipe: Pipeline) -> int:
    """torch threads per worker process when units run in parallel (0 = leave torch's default)."""
    return max(1, (os.cpu_count() or 1) // pipe.config.jobs) if pipe.config.jobs > 1 else 0


def is_trained(pipe: Pipeline, world: str, method: str, seed: int) -> bool:
    return (pipe.layout.model_dir(world, method, seed) / "config.json").exists()


def model_inputs(
    pipe: Pipeline, world: str, method: str, seed: int, kind: str | None = None
) -> dict[str, Any]:
    """The world's recipe (``kind``: of its ``calib`` or ``bon`` sets only, see
    :func:`world_inputs`) and the content hash of the model a unit reads (Base: no model)."""
    model = None
    if method != "base":
        model = content_hash(pipe.layout.model_dir(world, method, seed))
    return world_inputs(pipe, world, kind) | {"method": method, "seed": seed, "model": model}


def train_one(
    calib: str,
    method: str,
    seed: int,
    overrides: dict,
    out: str,
    threads: int = 0,
    tune_trials: int = 0,
    tune_dir: str | None = None,
) -> dict:
    """Fit one calibrator and save it (module level, so worker processes can run it).

    With ``tune_trials`` > 0 the method's parameters come from a search of that many trials in
    ``tune_dir`` (run once per world and method, shared by the seeds); ``overrides`` win.
    """
    import time

    from dprm.data import read_calibration_set
    from dprm.models.fit import fit
    from dprm.threads import set_process_threads

    c0, t0 = time.process_time(), time.perf_counter()
    if threads > 0:
        set_process_threads(threads)  # the API calls below keep it
    data = read_calibration_set(calib, check_hidden=False)
    if tune_trials > 0:
        from dprm.models.tune import tuned_overrides

        steps = int(overrides.get("max_steps", 0))  # the run's step cap also caps the trials
        tuned = tuned_overrides(method, data, tune_dir, tune_trials, max_steps=steps)
        overrides = tuned | dict(overrides)
    model = fit(method, data, overrides=overrides or None, seed=seed, progress=False)
    model.save(out, overwrite=True)  # the unit's own output (the runner decides reruns)
    return {
        "questions": sorted(set(data.records["question_id"].astype(str))),
        "overrides": overrides,
        "fit_seconds": model.info.get("fit_seconds"),
        "cpu_seconds": round(time.process_time() - c0, 3),
        "wall_seconds": round(time.perf_counter() - t0, 3),
    }


def tune_objective() -> str:
    """What a pipeline's searches score trials by (a changed default re-runs tuned units)."""
    from dprm.models.tune import DEFAULT_OBJECTIVE

    return DEFAULT_OBJECTIVE


def tunable(tune_trials: int) -> tuple[str, ...]:
    """The methods a search covers (none when ``tune_trials`` is 0: optuna not needed)."""
    if tune_trials <= 0:
        return ()
    from dprm.models.tune import SEARCH_SPACES

    return tuple(SEARCH_SPACES)


def train_units(pipe: Pipeline, world: str) -> list[Unit]:
    units = []
    threads = unit_threads(pipe)
    for method in pipe.config.methods:
        overrides = pipe.config.overrides.get(method, {})
        for seed in pipe.config.seeds:
            out = pipe.layout.model_dir(world, method, seed)
            calib = str(pipe.world_dir(world) / TRAIN_SPLIT / "calib")
            run = functools.partial(train_one, calib, method, seed, overrides, str(out), threads)
            inputs = world_inputs(pipe, world, "calib") | {
                "split": TRAIN_SPLIT,  # not "data": that is the world's data fingerprint
                "method": method,
                "seed": seed,
                "overrides": overrides,
            }
            tune_trials = pipe.config.tune_trials
            if tune_trials > 0 and method in tunable(tune_trials):
                tune_dir = str(pipe.layout.out / "tune" / world)
                run = functools.partial(run, tune_trials=tune_trials, tune_dir=tune_dir)
                inputs["tune_trials"] = tune_trials  # only then: other runs keep their hashes
                inputs["tune_objective"] = tune_objective()
            units.append(
                Unit(
                    key=f"train/{world}/{method}/seed{seed}",
                    outputs=[out / "config.json", out],
                    run=run,
                    inputs=inputs,
                    reads=pipe.reads(Path(calib)),
                    world=world,
                    parallel=True,
                )
            )
    return units


# ----------------------------------------------------------------------------- evaluate
def _figure_data(model, data, name: str, sample: np.ndarray | None) -> dict[str, Any]:
    """Coverage curve, reliability bins and (ID only) a sample of quantile curves."""
    from dprm import metrics as M
    from dprm.models.interface import predict

    y = data.records["success_prob"].to_numpy(np.float64)
    score = data.records["prm_score"].to_numpy(np.float32)
    out: dict[str, Any] = {}
    pred = predict(model, data.hidden, score, M.LEVELS_11)
    p = pred.p
    if pred.q is not None:
        out["coverage"] = {"levels": pred.levels.tolist(), "values": M.coverage(pred.q, y).tolist()}
    bins = M.ece_bins(np.clip(p, M.ECE_EDGES[0], M.ECE_EDGES[-1]))
    n_bins = len(M.ECE_EDGES) - 1
    count = np.bincount(bins, minlength=n_bins)
    safe = np.maximum(count, 1)
    out["reliability"] = {
        "count": count.tolist(),
        "p_mean": (np.bincount(bins, weights=p, minlength=n_bins) / safe).tolist(),
        "y_mean": (np.bincount(bins, weights=y, minlength=n_bins) / safe).tolist(),
    }
    if sample is not None and model.kind != "point":
        part = data.subset(sample)
        levels = M.LEVELS_101 if model.kind == "distribution" else M.LEVELS_11
        flex = predict(model, part.hidden, part.records["prm_score"].to_numpy(np.float32), levels)
        out["flex"] = {
            "rows": sample.tolist(),
            "levels": flex.levels.tolist(),
            "values": np.round(flex.q, 6).tolist(),
        }
    return out


def evaluate_one(
    world_dir: str,
    world: str,
    method: str,
    seed: int,
    model: str | None,
    flex: bool,
    out: str,
    threads: int = 0,
) -> dict:
    """Metrics and figure data of one calibrator (``model`` None = Base) on both splits.

    Module level so worker processes can run it; writes ``out`` (JSON) atomically.
    """
    import time

    from dprm.data import read_calibration_set
    from dprm.evaluation import evaluate_calibrator
    from dprm.models import load
    from dprm.models.raw_score import RawScoreCalibrator
    from dprm.threads import set_process_threads

    c0, t0 = time.process_time(), time.perf_counter()
    if threads > 0:
        set_process_threads(threads)  # the API calls below keep it
    result: dict[str, Any] = {"world": world, "method": method, "seed": seed, "splits": {}}
    for split in EVAL_SPLITS:
        data = read_calibration_set(Path(world_dir) / split / "calib", check_hidden=False)
        calibrator = RawScoreCalibrator(data.hidden_dim) if model is None else load(model)
        sample = None
        if split == "id" and flex:
            rng = np.random.default_rng(0)
            sample = np.sort(rng.choice(len(data), min(FLEX_SAMPLE, len(data)), replace=False))
            if model is None and data.has_truth:  # the truth curve of the same records
                from dprm.metrics import LEVELS_101, true_quantiles

                rec = data.records.iloc[sample]
                q = true_quantiles(rec["true_mu"], rec["true_sigma"], LEVELS_101)
                result["truth_flex"] = {
                    "rows": sample.tolist(),
                    "levels": LEVELS_101.tolist(),
                    "values": np.round(q, 6).tolist(),
                }
        metrics = evaluate_calibrator(calibrator, data)
        if model is None:  # once per split: how unlike the training questions its inputs look
            from dprm.ias.shift import calibration_shift

            train = read_calibration_set(
                Path(world_dir) / TRAIN_SPLIT / "calib", check_hidden=False
            )
            metrics.update(calibration_shift(train, data))
        result["splits"][split] = {
            "questions": sorted(set(data.records["question_id"].astype(str))),
            "metrics": metrics,
            **_figure_data(calibrator, data, method, sample),
        }
    write_json(out, result)
    return {
        "cpu_seconds": round(time.process_time() - c0, 3),
        "wall_seconds": round(time.perf_counter() - t0, 3),
    }


def evaluate_units(pipe: Pipeline, world: str) -> list[Unit]:
    jobs = [("base", 0)] + [
        (m, s)
        for m in pipe.config.methods
        for s in pipe.config.seeds
        if is_trained(pipe, world, m, s)
    ]
    units = []
    for method, seed in jobs:
        out = pipe.layout.eval_path(world, method, seed)
        model = None if method == "base" else str(pipe.layout.model_dir(world, method, seed))
        flex = seed == pipe.config.seeds[0]
        run = functools.partial(
            evaluate_one,
            str(pipe.world_dir(world)),
            world,
            method,
            seed,
            model,
            flex,
            str(out),
            unit_threads(pipe),
        )
        units.append(
            Unit(
                key=f"evaluate/{world}/{method}/seed{seed}",
                outputs=[out],
                run=run,
                inputs=model_inputs(pipe, world, method, seed, "calib")
                | {"splits": list(EVAL_SPLITS), "flex": flex},
                reads=pipe.reads(*(pipe.world_dir(world) / s / "calib" for s in EVAL_SPLITS)),
                world=world,
                parallel=method != "base",
            )
        )
    return units
