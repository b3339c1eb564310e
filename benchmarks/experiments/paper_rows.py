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

The rows, the cells and the WQL per world are stored as CSVs in ``docs/results/paper-vs-dprm/``
(``rows_LABEL.csv``, ``cells_LABEL.csv``, ``wql_LABEL.csv``; LABEL ``default``: every method at
its defaults, ``tuned``: ``--tune-trials 20``), and ``docs/results/paper-vs-dprm.md`` is rendered
from them, with the tuned run set against the default one world by world.

Usage:
    python benchmarks/experiments/paper_rows.py OUT              # print the rows of one run
    python benchmarks/experiments/paper_rows.py OUT --store LABEL  # store its CSVs, re-render
    python benchmarks/experiments/paper_rows.py --render         # re-render from stored CSVs
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


PAGE = "paper-vs-dprm"
LABELS = {
    "default": "every method at its defaults (`ot`: its 4-map ensemble), one training seed",
    "tuned": "`ot` and `qr` each with 20 Optuna trials of validation WQL on the world's training "
    "split (`--tune-trials 20`), refitted at seed 0",
}
RECOMPUTE = {
    "default": "dprm reproduce --grid paper --methods ot,qr --seeds 1 --out OUT",
    "tuned": "dprm reproduce --grid paper --methods ot,qr --seeds 1 --tune-trials 20 --out OUT",
}


def frames(out: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(rows, cells, wql) of a ``dprm reproduce`` output folder, in the stored CSVs' columns."""
    frame, wql = rows(out)
    data = load(out)
    row_cols = ["prm", "dataset", "metric", "paper6_ot", "paper6_qr", "paper_ot", "paper_qr",
                "dprm_ot", "dprm_qr"]  # fmt: skip
    paper = paper_tables()
    cells = []
    for world in sorted(wql):
        gen, _, prm = world.partition("__")
        for label, dataset, split in VIEWS:
            for metric, key in METRICS.items():
                cell = paper[
                    (paper.prm == prm) & (paper.dataset == dataset) & (paper.generator == gen)
                    & (paper.metric == metric)
                ].set_index("method")["value"]  # fmt: skip
                cells.append({
                    "world": world, "dataset": label, "split": split, "metric": metric,
                    "paper_ot": cell.get("ot", np.nan), "paper_qr": cell.get("qr", np.nan),
                    "dprm_ot": np.mean(data[world, "ot"][split][key]),
                    "dprm_qr": np.mean(data[world, "qr"][split][key]),
                })  # fmt: skip
    wql_rows = [
        {"world": world, "split": split, "ot_wql": m["ot"][split][0], "qr_wql": m["qr"][split][0],
         "ot_wql_interior": m["ot"][split][1], "qr_wql_interior": m["qr"][split][1]}
        for world, m in sorted(wql.items()) for split in ("id", "ood")
    ]  # fmt: skip
    return frame[row_cols], pd.DataFrame(cells), pd.DataFrame(wql_rows)


def stored(label: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The stored (rows, cells, wql) CSVs of one run."""
    import results_page as rp

    data = rp.folder(PAGE)
    return tuple(pd.read_csv(data / f"{kind}_{label}.csv") for kind in ("rows", "cells", "wql"))


def run_markdown(table: pd.DataFrame, cells: pd.DataFrame, wql: pd.DataFrame) -> str:
    """One run's counts, rows, cells and WQL as Markdown."""
    import results_page as rp

    out = [f"Worlds: {', '.join(sorted(wql.world.unique()))}.\n"]
    counts: dict = defaultdict(lambda: [0, 0, 0])
    body = []
    for r in table.itertuples():
        paper_ahead = "OT" if r.paper_ot > r.paper_qr else "QR"
        ours_ahead = "OT" if r.dprm_ot > r.dprm_qr else "QR"
        c = counts[r.dataset]
        c[0] += ours_ahead == "OT"
        c[1] += 1
        c[2] += paper_ahead == "OT"
        body.append([
            r.prm, r.dataset, r.metric, f"{r.paper6_ot:+.1f}", f"{r.paper6_qr:+.1f}",
            f"{r.paper_ot:+.1f}", f"{r.paper_qr:+.1f}", f"{r.dprm_ot:+.1f}", f"{r.dprm_qr:+.1f}",
            f"{paper_ahead} / {ours_ahead}",
        ])  # fmt: skip
    # the paper's own rows: MATH500 under its protocol and AIME24-25 (held out is dprm's extra)
    own = [c for d, c in counts.items() if d != "MATH500, held out"]
    total = sum(c[0] for c in own), sum(c[1] for c in own)
    paper_total = sum(c[2] for c in own)
    out.append(
        f"**OT ahead of QR in {total[0]} of the paper's {total[1]} (PRM, dataset, metric) rows "
        f"covered** (the paper, same generators: {paper_total} of {total[1]}); per view:\n"
    )
    out += [f"- {d}: OT ahead in {ot} of {n} rows (paper: {p})" for d, (ot, n, p) in counts.items()]
    out.append(
        "\nAverage % improvement over Base (the raw PRM score), mean over the generators run; "
        '"paper (6 gen)" is the paper\'s published row, "paper (same gen)" its mean over '
        "the generators this run covers.\n"
    )
    out.append(rp.table(
        ["PRM", "dataset", "metric", "paper OT (6 gen)", "paper QR (6 gen)",
         "paper OT (same gen)", "paper QR (same gen)", "dprm OT", "dprm QR",
         "ahead: paper / dprm"],
        body, "lllrrrrrrl",
    ))  # fmt: skip
    out.append("<details><summary>Every OT and QR cell next to the paper's</summary>\n")
    out.append(rp.table(
        ["world", "dataset (dprm split)", "metric", "paper OT", "paper QR", "dprm OT", "dprm QR"],
        [[r.world, f"{r.dataset} ({r.split})", r.metric, f"{r.paper_ot:.4f}",
          f"{r.paper_qr:.4f}", f"{r.dprm_ot:.4f}", f"{r.dprm_qr:.4f}"]
         for r in cells.itertuples()],
        "lllrrrr",
    ))  # fmt: skip
    out.append("WQL and `wql_interior` (τ 0.1..0.9) per world, OT against QR:\n")
    out.append(rp.table(
        ["world", "split", "OT WQL", "QR WQL", "OT wql_interior", "QR wql_interior"],
        [[r.world, r.split, f"{r.ot_wql:.4f}", f"{r.qr_wql:.4f}", f"{r.ot_wql_interior:.4f}",
          f"{r.qr_wql_interior:.4f}"] for r in wql.itertuples()],
        "llrrrr",
    ))  # fmt: skip
    out.append("</details>\n")
    return "\n".join(out)


def tuned_against_default() -> str:
    """World by world, tuned against default: held-out Brier (cells) and WQL, OT and QR."""
    import results_page as rp

    _, cells_d, wql_d = stored("default")
    _, cells_t, wql_t = stored("tuned")
    views = []
    for split, name in (("id", "MATH500 (`id`)"), ("ood", "AIME24-25 (`ood`)")):
        pick = {
            "Brier": lambda c, split=split: c[(c.split == split) & (c.metric == "brier")]
            .set_index("world")[["dprm_ot", "dprm_qr"]].set_axis(["ot", "qr"], axis=1),
            "WQL": lambda w, split=split: w[w.split == split]
            .set_index("world")[["ot_wql", "qr_wql"]].set_axis(["ot", "qr"], axis=1),
        }  # fmt: skip
        views.append((f"{name} Brier", pick["Brier"](cells_d), pick["Brier"](cells_t)))
        views.append((f"{name} WQL", pick["WQL"](wql_d), pick["WQL"](wql_t)))
    body = []
    for name, default, tuned in views:
        common = sorted(set(default.index) & set(tuned.index))
        d, t = default.loc[common], tuned.loc[common]
        n = len(common)
        change = t - d
        body.append([
            name, f"{int((t.ot < d.ot).sum())} / {n}", f"{change.ot.mean():+.4f}",
            f"{int((t.qr < d.qr).sum())} / {n}", f"{change.qr.mean():+.4f}",
            f"{int((t.ot < t.qr).sum())} / {n}",
        ])  # fmt: skip
    return (
        "Per world, on the worlds both runs cover (seed 0; from the 4-decimal cells above):\n\n"
        + rp.table(
            [
                "held out",
                "OT tuned lower than OT default",
                "mean change",
                "QR tuned lower than QR default",
                "mean change",
                "OT ahead of QR, tuned",
            ],
            body,
            "lrrrrr",
        )  # fmt: skip
    )


def render() -> Path:
    """Write ``docs/results/paper-vs-dprm.md`` from the stored CSVs."""
    import results_page as rp

    parts = [
        "The paper's calibration tables (Base, QR and OT per generator, PRM and dataset) next "
        "to dprm's twin: `dprm reproduce --grid paper` trains OT and QR on each twin world's "
        "training split and evaluates them on MATH500-like questions under the paper's protocol "
        "(the training questions included, as the paper did) and held out, and on AIME-like "
        "questions (OOD). The twin's worlds are fitted to the paper's Base cells only; OT and "
        "QR come out of training. docs/synth.md describes the twin.\n",
    ]
    for label in ("default", "tuned"):
        parts.append(f"## {label.capitalize()}: {LABELS[label]}\n")
        parts.append(f"`{RECOMPUTE[label]}`, then `python benchmarks/experiments/paper_rows.py "
                     f"OUT --store {label}`.\n")  # fmt: skip
        parts.append(run_markdown(*stored(label)))
    parts.append("## Tuned against default\n")
    parts.append(tuned_against_default())
    return rp.write_page(
        PAGE, "The paper's tables next to dprm's twin",
        "python benchmarks/experiments/paper_rows.py --render", "\n".join(parts),
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="a dprm reproduce output folder")
    parser.add_argument("--store", choices=sorted(LABELS), help="store OUT's CSVs as this run")
    parser.add_argument("--render", action="store_true", help=f"re-render docs/results/{PAGE}.md")
    args = parser.parse_args()
    if args.render:
        print(render())
        return 0
    if args.out is None:
        parser.error("OUT is required (or --render)")
    if load(args.out) and not rows(args.out)[0].empty:
        table, cells, wql = frames(args.out)
    else:
        print("no world with base, ot and qr evaluated yet")
        return 1
    if args.store:
        import results_page as rp

        data = rp.folder(PAGE)
        data.mkdir(parents=True, exist_ok=True)
        for kind, frame in (("rows", table), ("cells", cells), ("wql", wql)):
            frame.to_csv(data / f"{kind}_{args.store}.csv", index=False)
        rp.record_source(PAGE, RECOMPUTE[args.store], note=f"Run stored: {args.store}.")
        print(render())
        return 0
    print(run_markdown(table, cells, wql))
    return 0


if __name__ == "__main__":
    sys.exit(main())
