"""Beyond-the-paper grid: ``binomial`` and ``mono`` (and the score-only baselines) against ``ot``.

On the synthetic ``GENERATOR__qwen-prm`` worlds (truth known), for every preset x training seed
x method: fit on the training split ``train/calib`` (``dprm.models.fit.fit``: 80/20 split by question,
seed 42), evaluate on the held-out ID and OOD calibration sets (held-out protocol, docs/report.md) (``dprm.evaluation.evaluate_calibrator``, including
``quantile_error_true``) and run the IAS C sweep on the ID and OOD best-of-N sets
(``dprm.ias.run_ias``, exact accuracy). The world of a preset is fixed (its default seed), so the
seed-to-seed spread measures optimisation stability alone.

Reported (``--out`` JSON):

* ``quantile_error``: mean ``quantile_error_true`` per method and split, and the binomial / ot
  ratio against the 0.75 target;
* ``spread``: per preset, std over seeds of Brier and of the quantile error, averaged over
  presets, for every method (mono vs ot is the target);
* ``conformal``: split-conformal coverage on 200 random question splits per preset
  (:func:`conformal_check`);
* ``collapses``: runs that raised ``CollapseError`` (or failed) per method;
* ``frontier``: binomial vs ot at matched cost: each method's accuracy-vs-cost curve over the C
  sweep is interpolated linearly at the other's costs (inside the common cost range); the
  difference binomial - ot at every matched point, its minimum and the number of points where
  binomial is below, per seed and for seed-averaged curves; the truth oracle (the true quantile
  function of p fed to the same mixture rule) is compared with ot and binomial the same way.

Every finished run is stored as ``WORK/runs/PRESET/METHOD/seedS.json`` (atomic), so an interrupted
grid resumes where it stopped. Example::

    python benchmarks/experiments/grid_beyond.py --size demo --seeds 0 1 2 --out grid.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from dprm import __version__
from dprm.data import read_bon_set, read_calibration_set
from dprm.data.synth import GENERATORS, write_world
from dprm.evaluation import evaluate_calibrator
from dprm.ias import Pools, exact_accuracy_table, lookup, run_ias, run_sweeps, truth_estimate
from dprm.io import write_json
from dprm.models.fit import CollapseError, fit

GRADIENT_METHODS = ("ot", "mono", "binomial")
SPLITS = ("id", "ood")
TARGET_RATIO = 0.75


def world_dir(work: Path, preset: str, size: str, hidden_dim: int | None) -> Path:
    """The preset's world (written once, reused by every method and seed)."""
    suffix = "" if hidden_dim is None else f"-d{hidden_dim}"
    path = work / "worlds" / f"{preset}-{size}{suffix}"
    if not (path / "ood" / "bon" / "meta.json").exists():
        write_world(path, preset, size=size, hidden_dim=hidden_dim, progress=False, overwrite=True)
    return path


def frontier_points(summary, budgets=None, bon=None) -> list[dict]:
    """The C-sweep rows (C, cost, accuracy) of one method, sorted by cost.

    With ``budgets`` (the sweep's per-question budgets, one method) and ``bon``, each point also
    carries ``per_question``: the exact accuracy of every question [Q] at that C, so that two
    methods can be compared question by question (paired standard errors).
    """
    rows = summary[summary["allocation"] == "C"].sort_values("cost")
    per_question = {}
    if budgets is not None:
        table = exact_accuracy_table(Pools.from_bon(bon))
        for c, group in budgets[budgets["allocation"] == "C"].groupby("C", sort=False):
            per_question[float(c)] = np.round(lookup(table, group["n"].to_numpy()), 6).tolist()
    return [
        {"C": float(r.C), "cost": float(r.cost), "accuracy": float(r.accuracy)}
        | ({"per_question": per_question[float(r.C)]} if per_question else {})
        for r in rows.itertuples()
    ]


def run_one(world: Path, method: str, seed: int, overrides: dict) -> dict:
    """Fit, evaluate and sweep one (method, seed) on one world."""
    torch.manual_seed(seed)
    started = time.perf_counter()
    data = read_calibration_set(world / "train" / "calib")
    try:
        model = fit(method, data, overrides=overrides or None, seed=seed, progress=False)
    except CollapseError as err:
        return {"collapsed": True, "error": str(err), "seconds": time.perf_counter() - started}
    result: dict = {"collapsed": False, "seconds": None, "training": model.info.get("training")}
    for split in SPLITS:
        metrics = evaluate_calibrator(model, read_calibration_set(world / split / "calib"))
        bon = read_bon_set(world / split / "bon")
        summary, budgets = run_ias(bon, {method: model}, include_base=False, mc_trials=0)
        result[split] = {"metrics": metrics, "frontier": frontier_points(summary, budgets, bon)}
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def reference_frontiers(world: Path) -> dict:
    """Base (raw PRM score) and the truth oracle's C-sweep curves per split."""
    from dprm.models.raw_score import RawScoreCalibrator

    out = {}
    for split in SPLITS:
        bon = read_bon_set(world / split / "bon")
        summary, _ = run_ias(bon, {"base": RawScoreCalibrator(bon.hidden_dim)}, mc_trials=0)
        truth, budgets = run_sweeps(Pools.from_bon(bon), [truth_estimate(bon)], mc_trials=0)
        out[split] = {
            "base": frontier_points(summary),
            "truth": frontier_points(truth, budgets, bon),
        }
    return out


def conformal_check(
    world: Path, inner_method: str, overrides: dict, alpha: float = 0.1, n_splits: int = 200
) -> dict:
    """Coverage of the split-conformal bound on ``n_splits`` random question splits.

    The inner calibrator is fitted on the training split (``train/calib``); the held-out ID set
    (``id/calib``) is the pool. Each
    split calibrates on half of the pool's questions (one random record each, ``unit=question``,
    beta = alpha) and measures, on the other half, the mean over questions of the share of
    records with y >= L(h), the event the guarantee is about, plus the share with true p >= L(h)
    (not guaranteed). OOD: the correction from the whole pool, applied to the OOD set.
    """
    import pandas as pd

    from dprm.models.conformal import beta_quantile, calibration_rows, conformal_correction

    train = read_calibration_set(world / "train" / "calib")
    inner = fit(inner_method, train, overrides=overrides or None, progress=False)
    pool = read_calibration_set(world / "id" / "calib")
    q = beta_quantile(inner, pool, alpha)
    y, p = (pool.records[c].to_numpy(np.float64) for c in ("success_prob", "true_p"))
    codes, questions = pd.factorize(pool.records["question_id"])
    rng = np.random.default_rng(0)

    def per_question(covered, where):
        return pd.Series(covered).groupby(codes[where]).mean().mean()

    cov, cov_p, corrections = [], [], []
    for _ in range(n_splits):
        cal_q = rng.permutation(len(questions))[: len(questions) // 2]
        cal_mask = np.isin(codes, cal_q)
        rows = np.flatnonzero(cal_mask)[
            calibration_rows(pool.subset(np.flatnonzero(cal_mask)), "question", rng)
        ]
        c = conformal_correction(q[rows] - y[rows], alpha)
        lower = np.clip(q[~cal_mask] - c, 0, 1)
        cov.append(per_question(y[~cal_mask] >= lower, ~cal_mask))
        cov_p.append(per_question(p[~cal_mask] >= lower, ~cal_mask))
        corrections.append(c)
    cov = np.array(cov)
    se = float(cov.std(ddof=1) / np.sqrt(n_splits))
    rows = calibration_rows(pool, "question", rng)
    c_all = conformal_correction(q[rows] - y[rows], alpha)
    ood = read_calibration_set(world / "ood" / "calib")
    lower = np.clip(beta_quantile(inner, ood, alpha) - c_all, 0, 1)
    ood_cov = (
        pd.Series(ood.records["success_prob"].to_numpy() >= lower)
        .groupby(ood.records["question_id"])
        .mean()
        .mean()
    )
    return {
        "inner": inner_method,
        "alpha": alpha,
        "n_splits": n_splits,
        "n_calibration_questions": len(questions) // 2,
        "coverage_mean": float(cov.mean()),
        "coverage_se": se,
        "coverage_min": float(cov.min()),
        "passes": bool(cov.mean() >= 1 - alpha - 3 * se),
        "coverage_of_true_p_mean": float(np.mean(cov_p)),
        "correction_mean": float(np.mean(corrections)),
        "inner_coverage": float(np.mean(y >= q)),
        "ood_coverage_no_guarantee": float(ood_cov),
    }


# ----------------------------------------------------------------------------- aggregation
def _nanmean(values) -> float:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(values)) if values else float("nan")


def _vector(point: dict) -> np.ndarray | None:
    pq = point.get("per_question")
    return None if pq is None else np.asarray(pq, dtype=np.float64)


def matched_differences(first: list[dict], second: list[dict]) -> list[dict]:
    """first - second accuracy at matched costs, interpolating each curve at the other's costs.

    Where both curves carry per-question accuracies, the other curve's per-question vector is
    interpolated the same way (linearly in cost between its two neighbouring C points), and
    ``se`` is the paired standard error over questions of the difference: the sampling
    tolerance of the comparison on this question set.
    """
    out = []
    for a, b, sign in ((first, second, 1.0), (second, first, -1.0)):
        b = sorted(b, key=lambda p: p["cost"])
        cost_b = np.array([p["cost"] for p in b])
        acc_b = np.array([p["accuracy"] for p in b])
        for p in a:
            if not cost_b.min() - 1e-12 <= p["cost"] <= cost_b.max() + 1e-12:
                continue
            other = float(np.interp(p["cost"], cost_b, acc_b))
            item = {"cost": p["cost"], "diff": sign * (p["accuracy"] - other)}
            mine, hi = _vector(p), int(np.searchsorted(cost_b, p["cost"]))
            hi = min(max(hi, 1), len(b) - 1) if len(b) > 1 else 0
            lo = max(hi - 1, 0)
            below, above = _vector(b[lo]), _vector(b[hi])
            if mine is not None and below is not None and above is not None:
                gap = cost_b[hi] - cost_b[lo]
                w = 0.0 if gap <= 0 else float(np.clip((p["cost"] - cost_b[lo]) / gap, 0, 1))
                d = sign * (mine - ((1 - w) * below + w * above))
                item["se"] = float(d.std(ddof=1) / np.sqrt(len(d)))
            out.append(item)
    return out


def seed_mean_frontier(results: list[dict], split: str) -> list[dict]:
    """Cost, accuracy (and per-question accuracy) averaged over seeds at each C."""
    if not results:
        return []
    curves = [sorted(r[split]["frontier"], key=lambda p: p["C"]) for r in results]
    out = []
    for points in zip(*curves, strict=True):
        point = {
            "C": points[0]["C"],
            "cost": float(np.mean([p["cost"] for p in points])),
            "accuracy": float(np.mean([p["accuracy"] for p in points])),
        }
        vectors = [_vector(p) for p in points]
        if all(v is not None for v in vectors):
            point["per_question"] = np.mean(vectors, axis=0).tolist()
        out.append(point)
    return sorted(out, key=lambda p: p["cost"])


def summarise_differences(diffs: list[dict]) -> dict:
    """min / mean / count below zero of matched accuracy differences, and the 5 worst.

    With paired standard errors: how many differences are below -2 se (outside the sampling
    tolerance) and the largest shortfall in units of se.
    """
    values = np.array([d["diff"] for d in diffs]) if diffs else np.array([np.nan])
    out = {
        "n_matched": len(diffs),
        "min_diff": float(values.min()),
        "mean_diff": float(values.mean()),
        "n_below": int((values < 0).sum()),
        "n_below_0.005": int((values < -0.005).sum()),
        "worst": sorted(diffs, key=lambda d: d["diff"])[:5],
    }
    with_se = [d for d in diffs if d.get("se")]
    if with_se:
        z = np.array([d["diff"] / d["se"] for d in with_se])
        out["n_with_se"] = len(with_se)
        out["n_below_2se"] = int((z < -2).sum())
        out["min_diff_over_se"] = float(z.min())
        out["median_se"] = float(np.median([d["se"] for d in with_se]))
    return out


def aggregate(
    runs: dict, references: dict, presets: list[str], seeds: list[int], methods: list[str]
) -> dict:
    """The summary tables of the module docstring from ``runs[preset][method][seed]``."""

    def done(preset, method):
        return {s: runs[preset][method][s] for s in seeds if s in runs[preset][method]}

    def ok(preset, method):
        return [r for r in done(preset, method).values() if not r.get("collapsed")]

    error = {
        m: {
            s: _nanmean(r[s]["metrics"]["quantile_error_true"] for p in presets for r in ok(p, m))
            for s in SPLITS
        }
        for m in methods
    }
    per_preset_error = {
        p: {
            m: {
                s: _nanmean(r[s]["metrics"]["quantile_error_true"] for r in ok(p, m))
                for s in SPLITS
            }
            for m in methods
        }
        for p in presets
    }
    result: dict = {"quantile_error": error, "quantile_error_per_preset": per_preset_error}
    if {"binomial", "ot"} <= set(methods):
        ratio = {s: error["binomial"][s] / error["ot"][s] for s in SPLITS}
        result["binomial_over_ot"] = {
            "ratio": ratio,
            "target": TARGET_RATIO,
            "met": {s: bool(ratio[s] <= TARGET_RATIO) for s in SPLITS},
            "per_preset": {
                p: {
                    s: per_preset_error[p]["binomial"][s] / per_preset_error[p]["ot"][s]
                    for s in SPLITS
                }
                for p in presets
            },
        }
    spread = {}
    for m in methods:
        spread[m] = {}
        for s in SPLITS:
            for key in ("brier", "quantile_error_true"):
                stds = [
                    float(np.std([r[s]["metrics"][key] for r in ok(p, m)], ddof=1))
                    for p in presets
                    if len(ok(p, m)) >= 2
                ]
                spread[m][f"{s}_{key}_std"] = _nanmean(stds)
    result["spread"] = spread
    result["runs_finished"] = {m: sum(len(done(p, m)) for p in presets) for m in methods}
    result["collapses"] = {
        m: [f"{p}/seed{s}" for p in presets for s, r in done(p, m).items() if r.get("collapsed")]
        for m in methods
    }
    if {"binomial", "ot"} <= set(methods):
        frontier = {}
        for s in SPLITS:
            per_seed = []
            for p in presets:
                for seed in seeds:
                    b, o = done(p, "binomial").get(seed), done(p, "ot").get(seed)
                    if b is None or o is None or b.get("collapsed") or o.get("collapsed"):
                        continue
                    per_seed += [
                        {"preset": p, "seed": seed, **d}
                        for d in matched_differences(b[s]["frontier"], o[s]["frontier"])
                    ]
            # Seed-averaged curves, and the truth oracle (true quantiles of p) as a reference:
            # if even the oracle is below ot somewhere, the budget rule, not calibration, limits.
            pairs = {"binomial_minus_ot": ("binomial", "ot"), "truth_minus_ot": ("truth", "ot")}
            pairs["binomial_minus_truth"] = ("binomial", "truth")
            compared = {"per_seed": summarise_differences(per_seed)}
            for name, (first, second) in pairs.items():
                diffs = []
                for p in presets:
                    curves = [
                        references[p][s]["truth"]
                        if m == "truth"
                        else seed_mean_frontier(ok(p, m), s)
                        for m in (first, second)
                    ]
                    if all(curves):
                        diffs += [{"preset": p, **d} for d in matched_differences(*curves)]
                compared[f"seed_mean_{name}"] = summarise_differences(diffs)
            frontier[s] = compared
        result["frontier"] = frontier
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="paper", choices=["paper", "demo", "tiny"])
    parser.add_argument(
        "--hidden-dim", type=int, default=None, help="override the world's hidden dimension"
    )
    parser.add_argument("--presets", nargs="*", default=[f"{g}__qwen-prm" for g in GENERATORS])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--methods", nargs="*", default=["ot", "mono", "binomial", "isotonic", "platt"]
    )
    parser.add_argument(
        "--max-steps", type=int, default=None, help="max_steps for every gradient method"
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], help="METHOD.key=value"
    )
    parser.add_argument(
        "--work", default="runs/grid_beyond", help="worlds and per-run results (resumable)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--aggregate-only", action="store_true", help="summarise the finished runs, train nothing"
    )
    parser.add_argument(
        "--conformal-inner", default="binomial", help="inner method of the coverage check, or none"
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    overrides: dict[str, dict] = {m: {} for m in args.methods}
    for m in GRADIENT_METHODS:
        if m in overrides and args.max_steps is not None:
            overrides[m]["max_steps"] = args.max_steps
    for item in args.overrides:
        key, value = item.split("=", 1)
        method, field = key.split(".", 1)
        overrides.setdefault(method, {})[field] = value
    runs: dict = {p: {m: {} for m in args.methods} for p in args.presets}
    worlds = {p: world_dir(work, p, args.size, args.hidden_dim) for p in args.presets}
    references = {p: reference_frontiers(w) for p, w in worlds.items()}
    # Seed-major order: every preset gets seed 0 first, so a partial grid still covers them all.
    todo = [(s, p, m) for s in args.seeds for p in args.presets for m in args.methods]
    bar = tqdm(total=len(todo), desc="grid", unit="run", disable=args.aggregate_only)
    for seed, preset, method in todo:
        path = work / "runs" / f"{preset}-{args.size}" / method / f"seed{seed}.json"
        if not path.exists() and not args.aggregate_only:
            bar.set_postfix_str(f"{preset} {method} seed {seed}")
            result = run_one(worlds[preset], method, seed, overrides.get(method, {}))
            result["overrides"] = overrides.get(method, {})
            write_json(path, result)
        if path.exists():
            runs[preset][method][seed] = json.loads(path.read_text())
        bar.update()
    bar.close()
    summary = aggregate(runs, references, args.presets, args.seeds, args.methods)
    if args.conformal_inner != "none":
        checks = {}
        for preset in args.presets:
            path = work / "conformal" / f"{preset}-{args.size}-{args.conformal_inner}.json"
            if not path.exists() and not args.aggregate_only:
                inner_overrides = overrides.get(args.conformal_inner, {})
                write_json(
                    path, conformal_check(worlds[preset], args.conformal_inner, inner_overrides)
                )
            if path.exists():
                checks[preset] = json.loads(path.read_text())
        summary["conformal"] = {
            "per_preset": checks,
            "all_pass": all(c["passes"] for c in checks.values()) if checks else None,
        }
    ran = {
        "size": args.size,
        "hidden_dim": args.hidden_dim,
        "presets": args.presets,
        "seeds": args.seeds,
        "methods": args.methods,
        "overrides": overrides,
        "dprm_version": __version__,
        "torch_threads": args.threads,
    }
    write_json(args.out, {"ran": ran, "summary": summary, "references": references, "runs": runs})
    print(
        json.dumps(
            {
                "ran": ran,
                "summary": {k: v for k, v in summary.items() if k != "quantile_error_per_preset"},
            },
            indent=1,
            default=str,
        )
    )


if __name__ == "__main__":
    main()
