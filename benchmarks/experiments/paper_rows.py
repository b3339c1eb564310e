"""OT vs QR per (PRM, dataset, metric) row of a ``dprm reproduce`` run, next to the paper's.

Reads the per-unit evaluation files ``OUT/eval/WORLD/METHOD/seedS.json`` that ``dprm reproduce``
writes as it goes (so a run that has not finished, or covers only some worlds via
``--worlds``, can be read), and prints, per (PRM, dataset, metric) with metric in Brier /
PosBrier / ECE, the paper's "Avg. % improv." over Base of OT and of QR and dprm's:

* ``paper (6 gen)``: the paper's published row (``src/dprm/report/paper_improvements.csv``);
* ``paper (same gen)``: the same mean recomputed from the paper's per-generator cells
  (``paper_tables.csv``) over the generators this run covers, so that a partial run is compared
  like for like;
* ``dprm``: the mean over the covered generators of 100 (Base - method) / Base, seed-averaged
  (± the standard deviation over seeds of the per-seed generator mean, when there are several),
  for MATH500 on both the paper's protocol (``train`` split: ID including the training questions,
  as the paper did) and held out (``id`` split), for AIME24-25 on ``ood``.

and counts the rows where OT is ahead (larger improvement). WQL rows are printed as dprm's raw
seed-mean WQL and ``wql_interior`` (paper: its "relative to QR" percentage).

Usage: python benchmarks/paper_rows.py OUT [--markdown]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from dprm.report.paper import paper_improvements, paper_tables

METRICS = {"brier": "brier", "posbrier": "pos_brier", "ece": "ece"}
#: (row label, paper dataset, dprm split)
VIEWS = (
    ("MATH500, paper protocol", "math500", "train"),
    ("MATH500, held out", "math500", "id"),
    ("AIME24-25 (OOD)", "aime24-25", "ood"),
)


def load(out: Path) -> dict:
    """(world, method) -> split -> metric -> [values over seeds]."""
    data: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for path in sorted(out.glob("eval/*/*/seed*.json")):
        record = json.loads(path.read_text())
        for split, body in record["splits"].items():
            for key, value in body["metrics"].items():
                if value is None:  # a metric that does not apply (Base has no WQL)
                    continue
                data[record["world"], record["method"]][split][key].append(float(value))
    return data


def rows(out: Path) -> tuple[pd.DataFrame, dict]:
    data = load(out)
    worlds = sorted({w for w, m in data if {(w, "base"), (w, "ot"), (w, "qr")} <= set(data)})
    paper = paper_tables()
    published = paper_improvements()
    by_prm: dict = defaultdict(list)
    for world in worlds:
        gen, _, prm = world.partition("__")
        by_prm[prm].append(gen)
    table = []
    for prm, gens in by_prm.items():
        for label, dataset, split in VIEWS:
            for metric, key in METRICS.items():
                row = {"prm": prm, "dataset": label, "metric": metric, "n_gen": len(gens)}
                for method in ("ot", "qr"):
                    pub = published[
                        (published.prm == prm)
                        & (published.dataset == dataset)
                        & (published.method == method)
                        & (published.metric == metric)
                    ]["improvement_percent"]
                    row[f"paper6_{method}"] = float(pub.iloc[0]) if len(pub) else np.nan
                    same, ours = [], []
                    for gen in gens:
                        cell = paper[
                            (paper.prm == prm) & (paper.dataset == dataset) & (paper.generator == gen)
                            & (paper.metric == metric)
                        ].set_index("method")["value"]  # fmt: skip
                        if {"base", method} <= set(cell.index):
                            same.append(100 * (cell["base"] - cell[method]) / cell["base"])
                        world = f"{gen}__{prm}"
                        base = np.mean(data[world, "base"][split][key])
                        values = np.asarray(data[world, method][split][key])  # [seeds]
                        ours.append(100 * (base - values) / base)
                    row[f"paper_{method}"] = float(np.mean(same)) if same else np.nan
                    # per seed: the mean over generators; then mean and spread over seeds
                    n_seeds = min(len(o) for o in ours)
                    per_seed = np.mean([o[:n_seeds] for o in ours], axis=0)
                    row[f"dprm_{method}"] = float(np.mean([o.mean() for o in ours]))
                    row[f"dprm_{method}_sd"] = float(per_seed.std()) if n_seeds > 1 else np.nan
                    row[f"dprm_{method}_seeds"] = per_seed
                table.append(row)
    frame = pd.DataFrame(table)
    wql = {
        world: {
            method: {
                split: (
                    np.mean(data[world, method][split]["wql"]),
                    np.mean(data[world, method][split]["wql_interior"]),
                )
                for split in ("train", "id", "ood")
            }
            for method in ("ot", "qr")
        }
        for world in worlds
    }
    return frame, wql


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    frame, wql = rows(args.out)
    data = load(args.out)
    if frame.empty:
        print("no world with base, ot and qr evaluated yet")
        return 1
    print(f"worlds: {', '.join(sorted(wql))}")
    print(
        "| PRM | dataset | metric | paper OT (6 gen) | paper QR (6 gen) | paper OT (same gen) | "
        "paper QR (same gen) | dprm OT | dprm QR | ahead: paper / dprm |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    counts: dict = defaultdict(lambda: [0, 0, 0])
    seeds_ahead: dict = defaultdict(lambda: [0, 0])

    def spread(mean: float, sd: float) -> str:
        return f"{mean:+.1f}" if np.isnan(sd) else f"{mean:+.1f} ± {sd:.1f}"

    for r in frame.itertuples():
        paper_ahead = "OT" if r.paper_ot > r.paper_qr else "QR"
        ours_ahead = "OT" if r.dprm_ot > r.dprm_qr else "QR"
        c = counts[r.dataset]
        c[0] += ours_ahead == "OT"
        c[1] += 1
        c[2] += paper_ahead == "OT"
        n = min(len(r.dprm_ot_seeds), len(r.dprm_qr_seeds))
        every = bool(np.all(r.dprm_ot_seeds[:n] > r.dprm_qr_seeds[:n]))
        seeds_ahead[r.dataset][0] += every
        seeds_ahead[r.dataset][1] += 1
        print(
            f"| {r.prm} | {r.dataset} | {r.metric} | {r.paper6_ot:+.1f} | {r.paper6_qr:+.1f} | "
            f"{r.paper_ot:+.1f} | {r.paper_qr:+.1f} | {spread(r.dprm_ot, r.dprm_ot_sd)} | "
            f"{spread(r.dprm_qr, r.dprm_qr_sd)} | {paper_ahead} / {ours_ahead} |"
        )
    for dataset, (ot, n, paper_ot) in counts.items():
        every, rows_n = seeds_ahead[dataset]
        print(
            f"{dataset}: OT ahead in dprm in {ot} of {n} rows, in every seed in {every} of "
            f"{rows_n} (paper, same generators: {paper_ot})"
        )
    print("\nEvery OT and QR cell (Brier / PosBrier / ECE) next to the paper's:")
    print("| world | dataset (dprm split) | metric | paper OT | paper QR | dprm OT | dprm QR |")
    print("|---|---|---|---:|---:|---:|---:|")
    paper = paper_tables()
    for world in sorted(wql):
        gen, _, prm = world.partition("__")
        for label, dataset, split in VIEWS:
            for metric, key in METRICS.items():
                cell = paper[
                    (paper.prm == prm) & (paper.dataset == dataset) & (paper.generator == gen)
                    & (paper.metric == metric)
                ].set_index("method")["value"]  # fmt: skip
                ours = {m: np.mean(data[world, m][split][key]) for m in ("ot", "qr")}
                print(
                    f"| {world} | {label} ({split}) | {metric} | {cell.get('ot', np.nan):.4f} | "
                    f"{cell.get('qr', np.nan):.4f} | {ours['ot']:.4f} | {ours['qr']:.4f} |"
                )
    print("\nWQL / wql_interior per world (seed mean), OT vs QR:")
    print("| world | split | OT WQL | QR WQL | OT wql_interior | QR wql_interior |")
    print("|---|---|---:|---:|---:|---:|")
    for world, methods in sorted(wql.items()):
        for split in ("id", "ood"):
            (ow, oi), (qw, qi) = methods["ot"][split], methods["qr"][split]
            print(f"| {world} | {split} | {ow:.4f} | {qw:.4f} | {oi:.4f} | {qi:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
