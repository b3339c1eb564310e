"""The per-world stages of ``dprm reproduce``: synth, train, evaluate, ias (units of work).

Each ``*_units(pipe, world)`` returns :class:`~dprm.report.reproduce.Unit` objects whose
``run()`` writes their outputs atomically. Evaluation units also store what the figures need
(coverage curves, reliability bins, a sample of quantile curves), so figures and tables can be
drawn after the synthetic worlds are deleted.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dprm.io import write_json

if TYPE_CHECKING:
    from dprm.report.reproduce import Pipeline, Unit

SPLITS = ("id", "ood")
#: records of the ID calibration set kept per method for the flexibility figure
FLEX_SAMPLE = 256
COVERAGE_LEVELS = np.round(np.linspace(0.0, 1.0, 11), 10)
FLEX_LEVELS = np.linspace(0.0, 1.0, 101)


def _unit(**kw) -> Unit:
    from dprm.report.reproduce import Unit

    return Unit(**kw)


def _mc_seed(world: str, split: str) -> int:
    """One Monte Carlo seed per (world, split): every method sees the same random draws."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{world}/{split}".encode()).digest()[:4], "little")


# ----------------------------------------------------------------------------- synth
def ensure_world(pipe: Pipeline, world: str) -> Path:
    """Write the synthetic world if it is not on disk (deterministic from the preset name)."""
    from dprm.data.synth import write_world

    path = pipe.world_dir(world)
    if not all((path / s / k / "meta.json").exists() for s in SPLITS for k in ("calib", "bon")):
        write_world(path, world, size=pipe.config.size, progress=False)
    return path


def synth_units(pipe: Pipeline, world: str) -> list[Unit]:
    path = pipe.world_dir(world)
    outputs = [path / s / k / "meta.json" for s in SPLITS for k in ("calib", "bon")]
    # a world deleted after use is only regenerated when a later unit needs it
    key = f"synth/{world}"
    if key in pipe.state.data["done"]:
        outputs = []

    def run() -> dict:
        ensure_world(pipe, world)
        return {"size": pipe.config.size}

    return [_unit(key=key, outputs=outputs, run=run, world=world)]


# ----------------------------------------------------------------------------- train
def model_dir(pipe: Pipeline, world: str, method: str, seed: int) -> Path:
    return pipe.out / "models" / world / method / f"seed{seed}"


def _threads(pipe: Pipeline) -> int:
    """torch threads per worker process when units run in parallel (0 = leave torch's default)."""
    return max(1, (os.cpu_count() or 1) // pipe.config.jobs) if pipe.config.jobs > 1 else 0


def _trained(pipe: Pipeline, world: str, method: str, seed: int) -> bool:
    return (model_dir(pipe, world, method, seed) / "config.json").exists()


def train_one(
    calib: str, method: str, seed: int, overrides: dict, out: str, threads: int = 0
) -> dict:
    """Fit one calibrator and save it (module level, so worker processes can run it)."""
    import time

    import torch

    from dprm.data import read_calibration_set
    from dprm.models.fit import fit

    c0, t0 = time.process_time(), time.perf_counter()
    if threads > 0:
        torch.set_num_threads(threads)
    data = read_calibration_set(calib, check_hidden=False)
    model = fit(method, data, overrides=overrides or None, seed=seed, progress=False)
    model.save(out)
    return {
        "overrides": overrides,
        "fit_seconds": model.info.get("fit_seconds"),
        "cpu_seconds": round(time.process_time() - c0, 3),
        "wall_seconds": round(time.perf_counter() - t0, 3),
    }


def train_units(pipe: Pipeline, world: str) -> list[Unit]:
    from dprm.report.reproduce import _hash

    units = []
    threads = _threads(pipe)
    for method in pipe.config.methods:
        overrides = pipe.config.overrides.get(method, {})
        for seed in pipe.config.seeds:
            out = model_dir(pipe, world, method, seed)
            calib = str(pipe.world_dir(world) / "id" / "calib")
            run = functools.partial(train_one, calib, method, seed, overrides, str(out), threads)
            key = f"train/{world}/{method}/seed{seed}/{_hash(overrides)}"
            units.append(
                _unit(key=key, outputs=[out / "config.json"], run=run, world=world, parallel=True)
            )
    return units


# ----------------------------------------------------------------------------- evaluate
def _figure_data(model, data, name: str, sample: np.ndarray | None) -> dict[str, Any]:
    """Coverage curve, reliability bins and (ID only) a sample of quantile curves."""
    from dprm import metrics as M

    y = data.records["success_prob"].to_numpy(np.float64)
    score = data.records["prm_score"].to_numpy(np.float32)
    hidden = data.hidden if model.uses_hidden else None
    out: dict[str, Any] = {}
    if model.kind == "point":
        p = model.point_estimate(hidden, score).astype(np.float64)
    elif model.kind == "levels":
        levels = np.asarray(model.fixed_levels, np.float64)
        q = model.quantiles(hidden, levels, score).astype(np.float64)
        p = q[:, int(np.argmin(np.abs(levels - 0.5)))]
        out["coverage"] = {"levels": levels.tolist(), "values": M.coverage(q, y).tolist()}
    else:
        q = model.quantiles(hidden, COVERAGE_LEVELS, score).astype(np.float64)
        p = M.trapezoid_mean(q)
        out["coverage"] = {"levels": COVERAGE_LEVELS.tolist(), "values": M.coverage(q, y).tolist()}
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
        levels = (
            FLEX_LEVELS
            if model.kind == "distribution"
            else np.asarray(model.fixed_levels, np.float64)
        )
        s_hidden = part.hidden if model.uses_hidden else None
        q = model.quantiles(s_hidden, levels, part.records["prm_score"].to_numpy(np.float32))
        out["flex"] = {
            "rows": sample.tolist(),
            "levels": levels.tolist(),
            "values": np.round(q, 6).tolist(),
        }
    return out


def eval_path(pipe: Pipeline, world: str, method: str, seed: int) -> Path:
    return pipe.out / "eval" / world / method / f"seed{seed}.json"


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

    import torch

    from dprm.data import read_calibration_set
    from dprm.evaluation import evaluate_calibrator
    from dprm.models import load
    from dprm.models.raw_score import RawScoreCalibrator

    c0, t0 = time.process_time(), time.perf_counter()
    if threads > 0:
        torch.set_num_threads(threads)
    result: dict[str, Any] = {"world": world, "method": method, "seed": seed, "splits": {}}
    for split in SPLITS:
        data = read_calibration_set(Path(world_dir) / split / "calib", check_hidden=False)
        calibrator = RawScoreCalibrator(data.hidden_dim) if model is None else load(model)
        sample = None
        if split == "id" and flex:
            rng = np.random.default_rng(0)
            sample = np.sort(rng.choice(len(data), min(FLEX_SAMPLE, len(data)), replace=False))
            if model is None and data.has_truth:  # the truth curve of the same records
                from dprm.metrics import true_quantiles

                rec = data.records.iloc[sample]
                q = true_quantiles(rec["true_mu"], rec["true_sigma"], FLEX_LEVELS)
                result["truth_flex"] = {
                    "rows": sample.tolist(),
                    "levels": FLEX_LEVELS.tolist(),
                    "values": np.round(q, 6).tolist(),
                }
        result["splits"][split] = {
            "metrics": evaluate_calibrator(calibrator, data),
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
        if _trained(pipe, world, m, s)
    ]
    units = []
    for method, seed in jobs:
        out = eval_path(pipe, world, method, seed)
        model = None if method == "base" else str(model_dir(pipe, world, method, seed))
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
            _threads(pipe),
        )
        units.append(
            _unit(
                key=f"evaluate/{world}/{method}/seed{seed}",
                outputs=[out],
                run=run,
                world=world,
                parallel=method != "base",
            )
        )
    return units


# ----------------------------------------------------------------------------- ias
def ias_path(pipe: Pipeline, world: str, split: str, method: str, seed: int) -> Path:
    return pipe.out / "ias" / world / split / method / f"seed{seed}.csv"


def _read_bon(pipe: Pipeline, world: str, split: str):
    """The BoN set of one split of a world (a :class:`dprm.data.contract.BonSet`)."""
    from dprm.data import read_bon_set

    return read_bon_set(pipe.world_dir(world) / split / "bon", check_hidden=False)


def ias_units(pipe: Pipeline, world: str) -> list[Unit]:
    units = []
    for split in SPLITS:
        ref = ias_path(pipe, world, split, "_reference", 0)

        def run_ref(split=split, ref=ref) -> None:
            from dprm.ias import (
                Pools,
                estimate_from_model,
                truth_estimate,
                uniform_curve,
            )
            from dprm.models.raw_score import RawScoreCalibrator

            bon = _read_bon(pipe, world, split)
            pools = Pools.from_bon(bon)
            estimates = [estimate_from_model(RawScoreCalibrator(bon.hidden_dim), bon, "base")]
            truth = truth_estimate(bon)
            if truth is not None:
                estimates.append(truth)
            _write_ias(pipe, ref, pools, estimates, _mc_seed(world, split))
            _write_csv(ref.with_name("uniform.csv"), uniform_curve(pools))

        units.append(
            _unit(
                key=f"ias/{world}/{split}/_reference",
                outputs=[ref, ref.with_name("uniform.csv")],
                run=run_ref,
                world=world,
            )
        )
        for method in pipe.config.methods:
            for seed in pipe.config.seeds:
                if not _trained(pipe, world, method, seed):
                    continue  # its training failed: reported, nothing to evaluate
                out = ias_path(pipe, world, split, method, seed)

                def run(split=split, method=method, seed=seed, out=out) -> None:
                    from dprm.ias import Pools, estimate_from_model
                    from dprm.models import load

                    bon = _read_bon(pipe, world, split)
                    model = load(model_dir(pipe, world, method, seed))
                    est = estimate_from_model(model, bon, method, beta=pipe.config.beta)
                    _write_ias(pipe, out, Pools.from_bon(bon), [est], _mc_seed(world, split))

                units.append(
                    _unit(
                        key=f"ias/{world}/{split}/{method}/seed{seed}",
                        outputs=[out],
                        run=run,
                        world=world,
                    )
                )
    return units


def _write_csv(path: Path, frame) -> None:
    from dprm.io import atomic_path

    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


def _write_ias(pipe: Pipeline, out: Path, pools, estimates, seed: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dprm.ias import run_sweeps
    from dprm.io import atomic_path

    # The greedy sweep (cost-aware allocation, beyond the paper) rides along: same estimates.
    summary, budgets = run_sweeps(
        pools, estimates, mc_trials=pipe.config.mc_trials, seed=seed, greedy=True
    )
    with atomic_path(out.with_suffix(".parquet")) as tmp:
        pq.write_table(pa.Table.from_pandas(budgets, preserve_index=False), tmp)
    _write_csv(out, summary)


WORLD_STAGES = (
    ("synth", synth_units),
    ("train", train_units),
    ("evaluate", evaluate_units),
    ("ias", ias_units),
)
