"""Which objective should a tuning search score its trials by? (issue 19, `dprm tune`)

``dprm tune --objective checkpoint`` scores a trial by the trainer's own checkpoint score (the
calibration area for ``ot`` / ``qr``), ``--objective wql`` by the validation WQL of the model
the trainer returns. Both read only the training split's validation questions. This script
runs both searches with the same budget on *development* worlds (never the reported grid), for
each method, refits the best settings exactly as ``dprm reproduce --tune-trials`` does
(``dprm.models.tune.tuned_overrides``, then ``dprm.fit`` at seed 0) and scores the refit on the
world's held-out ``id`` and ``ood`` splits, beside the method at its defaults (no search).

One CSV row per (world, method, setting) with held-out Brier, WQL, ``wql_interior`` and ECE
(``--out``, appended, resumable: finished rows are skipped); ``--summary`` prints them side by
side, with each search's change against the defaults.

Usage::

    python benchmarks/tune_objective.py --worlds DEV1,DEV2 --trials 20 --out rows.csv
    python benchmarks/tune_objective.py --out rows.csv --summary

``DEV`` is a world directory as ``dprm synth`` writes it (``train/calib``, ``id/calib``,
``ood/calib``), e.g. the development worlds of docs/calibrators.md (demo size, world seed 101).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

from dprm.data import read_calibration_set
from dprm.evaluation import evaluate_calibrator
from dprm.models.fit import fit
from dprm.models.tune import tuned_overrides

KEYS = ("brier", "wql", "wql_interior", "ece")
SETTINGS = ("default", "checkpoint", "wql")


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def append(path: Path, row: dict) -> None:
    new = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        if new:
            writer.writeheader()
        writer.writerow(row)


def run(args) -> None:
    done = {(r["world"], r["method"], r["setting"]) for r in read_rows(args.out)}
    for world in args.worlds.split(","):
        root = Path(world)
        sets = {s: read_calibration_set(root / s / "calib") for s in ("train", "id", "ood")}
        for method in args.methods.split(","):
            for setting in SETTINGS:
                if (root.name, method, setting) in done:
                    continue
                started = time.perf_counter()
                overrides: dict = {}
                if setting != "default":
                    search = args.searches / root.name / setting
                    overrides = tuned_overrides(
                        method, sets["train"], search, args.trials, objective=setting
                    )
                searched = time.perf_counter() - started
                model = fit(method, sets["train"], overrides=overrides or None, seed=0,
                            progress=False)  # fmt: skip
                row = {"world": root.name, "method": method, "setting": setting,
                       "trials": 0 if setting == "default" else args.trials}  # fmt: skip
                for split in ("id", "ood"):
                    scores = evaluate_calibrator(model, sets[split])
                    for key in KEYS:
                        row[f"{split}_{key}"] = round(float(scores[key]), 6)
                row["search_s"] = round(searched, 1)
                row["seconds"] = round(time.perf_counter() - started, 1)
                append(args.out, row)
                print(
                    f"{root.name} {method:4s} {setting:10s} ID Brier {row['id_brier']:.4f} "
                    f"WQL {row['id_wql']:.4f} | OOD Brier {row['ood_brier']:.4f} WQL "
                    f"{row['ood_wql']:.4f} ({row['seconds']:.0f} s)",
                    flush=True,
                )


def summary(args) -> None:
    rows = read_rows(args.out)
    index = {(r["world"], r["method"], r["setting"]): r for r in rows}
    worlds = sorted({r["world"] for r in rows})
    methods = sorted({r["method"] for r in rows})
    cols = [f"{s}_{k}" for s in ("id", "ood") for k in ("brier", "wql")]
    print("| world | method | setting | " + " | ".join(cols) + " |")
    print("|---|---|---|" + "---:|" * len(cols))
    for world in worlds:
        for method in methods:
            base = index.get((world, method, "default"))
            for setting in SETTINGS:
                r = index.get((world, method, setting))
                if r is None:
                    continue
                cells = []
                for c in cols:
                    value = float(r[c])
                    delta = "" if base is None or r is base else f" ({value - float(base[c]):+.4f})"
                    cells.append(f"{value:.4f}{delta}")
                print(f"| {world} | {method} | {setting} | " + " | ".join(cells) + " |")
    for setting in ("checkpoint", "wql"):
        for c in cols:
            deltas = [
                float(index[(w, m, setting)][c]) - float(index[(w, m, "default")][c])
                for w in worlds
                for m in methods
                if (w, m, setting) in index and (w, m, "default") in index
            ]
            if deltas:
                better = sum(d < 0 for d in deltas)
                print(
                    f"{setting:10s} {c:9s}: better than defaults in {better}/{len(deltas)}, "
                    f"mean change {sum(deltas) / len(deltas):+.4f}"
                )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="CSV (appended, resumable)")
    parser.add_argument("--worlds", default="", help="comma-separated world directories")
    parser.add_argument("--methods", default="ot,qr")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--searches", type=Path, default=None, help="default: next to --out")
    parser.add_argument("--summary", action="store_true", help="only summarise --out")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one per process)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.summary:
        summary(args)
        return 0
    if not args.worlds:
        parser.error("--worlds is required unless --summary")
    args.searches = args.searches or args.out.with_suffix(".searches")
    run(args)
    summary(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
