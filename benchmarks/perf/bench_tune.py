"""Wall time of ``dprm tune`` (ot, qr, mono, binomial) on one paper-size world (D = 3584).

The target: 50 trials of each of the four gradient-trained calibrators within 30 minutes
on 2 cores. Runs :func:`dprm.models.tune.tune` on the world's *training* split with ``--jobs``
worker processes (1 torch thread each), then prints per method the finished trials (complete /
pruned), the mean seconds of a complete and of a pruned trial, and the search's wall time. With
fewer than ``--target-trials`` trials it also prints an extrapolation to the target, labelled
as such: (wall time of the trials) x target / trials, per worker, plus the refits.

    python benchmarks/perf/bench_tune.py --world W --trials 50 --jobs 2 --out /tmp/tune-bench
    python benchmarks/perf/bench_tune.py --preset llama-3.1-8b__qwen-prm --trials 8 --out /tmp/tb

``--world`` is a directory written by ``dprm synth --size paper`` (its ``train/calib`` is
tuned); without it the preset is synthesised into ``OUT/world`` first (not timed).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import resource
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", help="a paper-size synthetic world directory")
    parser.add_argument("--preset", default="llama-3.1-8b__qwen-prm")
    parser.add_argument("--out", required=True, help="scratch directory (replaced)")
    parser.add_argument("--methods", default="ot,qr,mono,binomial")
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--target-trials", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--partial",
        action="store_true",
        help="run nothing: summarise the finished trials of an interrupted OUT/search/study.db",
    )
    parser.add_argument("--size", default="paper", help="size of the synthesised world")
    parser.add_argument(
        "--smoke", action="store_true", help="the smallest run: tiny world, qr, 1 trial, 1 job"
    )
    args = parser.parse_args()
    if args.smoke:
        args.size, args.methods, args.trials, args.target_trials = "tiny", "qr", 1, 1
        args.jobs, args.max_steps = 1, 20
    if args.partial:
        partial(Path(args.out) / "search", args)
        return

    from dprm.models.tune import TuneSettings, clear, tune

    out = Path(args.out)
    world = Path(args.world) if args.world else out / "world"
    if not args.world and not (world / "train" / "calib" / "meta.json").exists():
        from dprm.data.synth import write_world

        write_world(world, args.preset, size=args.size, progress=False)
    search = out / "search"
    if search.exists():
        clear(search)
    methods = [m for m in args.methods.split(",") if m]
    settings = TuneSettings(trials=args.trials, seed=args.seed, max_steps=args.max_steps)
    load_before = os.getloadavg()
    children_before = _children_cpu()
    started = time.perf_counter()
    best = tune(
        world / "train" / "calib",
        search,
        methods=methods,
        settings=settings,
        jobs=args.jobs,
        threads=1,
        progress=False,
    )
    wall = time.perf_counter() - started
    children_cpu = _children_cpu() - children_before  # every worker, start-up included
    load_after = os.getloadavg()
    with open(search / "trials.csv") as handle:
        trials = list(csv.DictReader(handle))
    rows = {}
    for method in methods:
        mine = [t for t in trials if t["method"] == method]
        done = [float(t["seconds"]) for t in mine if t["state"] == "complete"]
        pruned = [float(t["seconds"]) for t in mine if t["state"] == "pruned"]
        cpu = [float(t["cpu_seconds"] or 0) for t in mine if t["state"] in ("complete", "pruned")]
        entry = best["methods"][method]
        rows[method] = {
            "complete": len(done),
            "pruned": len(pruned),
            "trial_seconds": round(sum(done) + sum(pruned), 1),
            "mean_complete_s": round(sum(done) / max(len(done), 1), 2),
            "mean_pruned_s": round(sum(pruned) / max(len(pruned), 1), 2),
            "method_seconds": entry.get("seconds"),
            "trial_cpu_seconds": round(sum(cpu), 1),
            "method_cpu_seconds": entry.get("cpu_seconds"),
            "mean_complete_cpu_s": _mean(cpu_of(mine, "complete")),
            "mean_pruned_cpu_s": _mean(cpu_of(mine, "pruned")),
            "process": entry.get("process"),
            "validation": entry.get("validation"),
        }
    print(
        f"world {world} ({best['data']}), {args.trials} trials x {len(methods)} methods, "
        f"jobs {args.jobs}, 1 thread each, cpus {os.cpu_count()}, {platform.processor() or '?'}"
    )
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    print(
        "method     complete pruned  mean complete s  mean pruned s  trials s  method s  "
        "trials cpu s  method cpu s"
    )
    for method, r in rows.items():
        print(
            f"{method:10s} {r['complete']:8d} {r['pruned']:6d} {r['mean_complete_s']:16.2f} "
            f"{r['mean_pruned_s']:14.2f} {r['trial_seconds']:9.1f} {r['method_seconds']:9.1f} "
            f"{r['trial_cpu_seconds']:13.1f} {r['method_cpu_seconds']:13.1f}"
        )
    print(
        "CPU s per trial (mean): "
        + ", ".join(
            f"{m} {r['mean_complete_cpu_s']:.1f} complete / {r['mean_pruned_cpu_s']:.1f} pruned"
            for m, r in rows.items()
        )
    )
    print(f"MEASURED wall time: {wall:.1f} s ({wall / 60:.1f} min)")
    n_workers = max(1, min(args.jobs, len(methods)))
    workers: dict[str, float] = {}  # process -> CPU seconds of the methods it searched
    for method, r in rows.items():
        key = str(r["process"])
        workers[key] = workers.get(key, 0.0) + r["method_cpu_seconds"]
        print(f"  worker {key}: {method} {r['method_cpu_seconds']:.1f} CPU s")
    cpu_wall = max(workers.values())
    print(
        f"MEASURED CPU seconds per worker (1 thread each; split, trials and refit of its "
        f"methods): {', '.join(f'{v:.0f}' for v in workers.values())}; all worker processes "
        f"incl. start-up (getrusage): {children_cpu:.0f}"
    )
    print(
        f"ESTIMATE for {n_workers} dedicated cores (the busiest worker's CPU seconds, as if "
        f"each worker had its core alone): {cpu_wall:.0f} s ({cpu_wall / 60:.1f} min)"
    )
    extrapolated = None
    if args.trials < args.target_trials:
        # Each method's trials scale with their number; its set-up and refit do not.
        scale = args.target_trials / args.trials
        per_method = {
            m: r["trial_cpu_seconds"] * scale + (r["method_cpu_seconds"] - r["trial_cpu_seconds"])
            for m, r in rows.items()
        }
        extrapolated = schedule(per_method, n_workers)
        print(
            f"EXTRAPOLATED (not measured) to {args.target_trials} trials per method, CPU "
            f"seconds on {n_workers} dedicated cores: {extrapolated:.0f} s "
            f"({extrapolated / 60:.1f} min)"
        )
    record = {
        "trials": args.trials,
        "jobs": args.jobs,
        "methods": rows,
        "wall_seconds": round(wall, 1),
        "worker_cpu_seconds": workers,
        "children_cpu_seconds": round(children_cpu, 1),
        "dedicated_cores_estimate_seconds": round(cpu_wall, 1),
        "extrapolated_seconds": extrapolated,
        "load_before": load_before,
        "load_after": load_after,
    }
    (out / "bench_tune.json").write_text(json.dumps(record, indent=2) + "\n")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_of(trials: list[dict], state: str) -> list[float]:
    return [float(t["cpu_seconds"] or 0) for t in trials if t["state"] == state]


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 2) if values else float("nan")


def partial(search: Path, args) -> None:
    """Per-trial CPU seconds of the finished trials of an unfinished search, extrapolated.

    Extrapolation (labelled): per method, target x mean CPU seconds of its finished trials,
    plus one complete trial for the refit; the one-off split / standardisation is not counted.
    """
    import optuna

    from dprm.models.tune import storage_url

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    per_method = {}
    print("PARTIAL search (interrupted): finished trials only")
    print("method     complete pruned  mean cpu s/trial  mean wall s/trial  mean complete cpu s")
    for s in optuna.get_all_study_summaries(storage_url(search)):
        study = optuna.load_study(study_name=s.study_name, storage=storage_url(search))
        done = [t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]
        if not done:
            continue
        cpu = [float(t.user_attrs.get("cpu_seconds", 0.0)) for t in done]
        wall = [t.duration.total_seconds() for t in done]
        full = [
            float(t.user_attrs.get("cpu_seconds", 0.0)) for t in done if t.state.name == "COMPLETE"
        ]
        n_pruned = sum(t.state.name == "PRUNED" for t in done)
        mean_cpu, mean_full = sum(cpu) / len(cpu), sum(full) / max(len(full), 1)
        print(
            f"{s.study_name:10s} {len(done) - n_pruned:8d} {n_pruned:6d} {mean_cpu:17.2f} "
            f"{sum(wall) / len(wall):18.2f} {mean_full:20.2f}"
        )
        per_method[s.study_name] = args.target_trials * mean_cpu + mean_full
    missing = [m for m in args.methods.split(",") if m and m not in per_method]
    if missing:
        print(f"no finished trial yet (NOT in the extrapolation below): {', '.join(missing)}")
    n_workers = max(1, min(args.jobs, len(per_method)))
    total = schedule(per_method, n_workers)
    print(
        f"EXTRAPOLATED (not measured) to {args.target_trials} trials per method from the mean "
        f"CPU seconds per finished trial, on {n_workers} dedicated cores: {total:.0f} s "
        f"({total / 60:.1f} min)"
    )


def schedule(seconds: dict[str, float], workers: int) -> float:
    """Finish time of the methods on ``workers`` processes, heaviest first (as tune() submits)."""
    from dprm.models.tune import FIT_SECONDS

    loads = [0.0] * workers
    for m in sorted(seconds, key=lambda m: -FIT_SECONDS.get(m, 0.0)):
        loads[loads.index(min(loads))] += seconds[m]
    return max(loads)


if __name__ == "__main__":
    main()
