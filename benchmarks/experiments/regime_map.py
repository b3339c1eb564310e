"""Regime map: when does the paper's OT beat QR (and mono, binomial)?

Two axes, each world held out (no calibrator trains or early-stops on ``id`` / ``ood``):

* **linear decodability of h**: twin v2's ``linear_share`` lambda (docs/synth.md, "Twin v2") is
  set to one value for the world's ``id`` and ``ood`` cells (``--lambdas``); everything else
  (labels, PRM score, truth, the keyed non-linear channel) is the preset's. Each world's
  *measured* linear R^2 is recorded: a ridge regression of the true logit's location
  ``true_mu`` on h, fitted on ``train`` and scored on ``id`` (and ``ood``), as in
  ``benchmarks/experiments/twin_residuals.py``.
* **training size**: the number of training questions (``--train-questions``), a seeded subset
  of the ``train`` split's questions (all of a question's records; the paper size has 500,
  the demo 200). The world is written at paper size (500 questions per split) at
  ``--hidden-dim`` (default 128: h is an affine, full-rank image of the embedding's 128 units
  at any D >= 128, so neither a linear nor a non-linear model of h loses information).

Per (lambda, training size, method, seed) it fits ``dprm.fit(method, train_subset, seed=seed)``
(80/20 question split inside, the calibrators' own checkpoint rule) and writes one CSV row
(``--out``, appended, resumable: finished rows are skipped) with held-out ID and OOD Brier,
WQL, ``wql_interior`` (levels 0.1..0.9), calibration area and the error to the true quantile
function, plus seconds, best step and steps. ``--summary`` prints mean +- std over seeds per
cell and OT minus QR, and draws ``--figure`` (PNG).

Hyper-parameters: ``--overrides METHOD:key=value;key=value`` applies the same settings to every
cell (e.g. the best parameters of a ``dprm tune`` search on a development world); without it
every method runs at its defaults. ``--tuned best.json`` reads the overrides of a search;
``--label`` names the rows' setting (default ``default`` / ``overrides`` / ``tuned``), so runs
of different searches (or a one-map ``ot``: ``--overrides "ot:ensemble_size=1" --label
one_map``) stay apart in one CSV and are summarised side by side (``ot LABEL`` against
``qr LABEL`` / ``mono LABEL``, and ``ot`` against ``ot one_map``).

Usage::

    python benchmarks/experiments/regime_map.py --out /tmp/regime/regime.csv --seeds 0,1,2 \
        --lambdas 1,0.6,0.3,0.1,0 --train-questions 100,200,500
    python benchmarks/experiments/regime_map.py --out /tmp/regime/regime.csv --summary \
        --figure map.png
    python benchmarks/experiments/regime_map.py --render   # docs/results/regime-map.md
    python benchmarks/experiments/regime_map.py --out /tmp/r.csv --smoke   # one tiny cell
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from dprm.data import read_calibration_set, synth
from dprm.evaluation import evaluate_calibrator
from dprm.metrics import linear_r2
from dprm.models.fit import CollapseError, fit

METHODS = ("ot", "qr", "mono", "binomial")
SPLITS = ("id", "ood")
KEYS = ("brier", "wql", "wql_interior", "calibration_area", "quantile_error_true")
FIELDS = [
    "preset", "world_seed", "lam", "r2_id", "r2_ood", "n_train_questions", "n_train_records",
    "method", "seed", "collapsed", "seconds", "best_step", "steps",
    *[f"{s}_{k}" for s in SPLITS for k in KEYS], "setting",
]  # fmt: skip


def write_lambda_world(out: Path, preset: str, lam: float, seed: int, hidden_dim: int) -> dict:
    """The preset's paper-size world with ``linear_share`` = lam in its id and ood cells.

    synth.py reads a world's cells from ``SCORE_CELLS`` when it writes; the table entry is
    replaced for the duration of the write and restored after (synth.py itself is not edited:
    this benchmark only moves the one knob twin v2 exposes).
    """
    gen, prm = synth.resolve_preset(preset)
    saved = {}
    for kind in ("id", "ood"):
        key = (gen.name, prm.name, kind)
        saved[key] = synth.SCORE_CELLS.get(key)
        synth.SCORE_CELLS[key] = replace(synth.score_cell(gen, prm, kind), linear_share=lam)
    try:
        return synth.write_world(
            out, preset, size="paper", seed=seed, hidden_dim=hidden_dim, progress=False
        )
    finally:
        for key, cell in saved.items():
            if cell is None:
                synth.SCORE_CELLS.pop(key, None)
            else:
                synth.SCORE_CELLS[key] = cell


def question_subset(data, n_questions: int, seed: int = 7):
    """All records of ``n_questions`` questions drawn (seeded) from the set's questions."""
    questions = data.records["question_id"].to_numpy()
    unique = np.unique(questions)
    if n_questions >= len(unique):
        return data
    chosen = np.random.default_rng(seed).choice(unique, n_questions, replace=False)
    return data.subset(np.flatnonzero(np.isin(questions, chosen)))


def parse_overrides(specs: list[str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for spec in specs:
        method, _, body = spec.partition(":")
        for item in filter(None, body.split(";")):
            key, _, value = item.partition("=")
            try:
                parsed: object = int(value)
            except ValueError:
                try:
                    parsed = float(value)
                except ValueError:
                    parsed = value
            out.setdefault(method, {})[key] = parsed
    return out


def tuned_overrides(path: Path) -> dict[str, dict]:
    """Per method the best config overrides of a ``dprm tune`` search (its best.json)."""
    best = json.loads(Path(path).read_text())
    methods = best.get("methods", best)
    return {
        m: dict(entry["overrides"])
        for m, entry in methods.items()
        if isinstance(entry, dict) and "overrides" in entry
    }


def read_rows(paths: list[Path]) -> list[dict]:
    rows = []
    for path in paths:
        if path.exists():
            with path.open() as fh:
                rows += [r | {"setting": r.get("setting") or "default"} for r in csv.DictReader(fh)]
    return rows


def append(path: Path, row: dict) -> None:
    new = not path.exists()
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, FIELDS)
        if new:
            writer.writeheader()
        writer.writerow(row)
        fh.flush()


def run(args) -> None:
    overrides = parse_overrides(args.overrides)
    setting = "overrides" if overrides else "default"
    if args.tuned:
        overrides = tuned_overrides(args.tuned) | overrides
        setting = "tuned"
    setting = args.label or setting
    done = {
        (r["lam"], r["n_train_questions"], r["method"], r["seed"])
        for r in read_rows([args.out])
        if r["setting"] == setting
    }
    lambdas = [float(v) for v in args.lambdas.split(",")]
    sizes = [int(v) for v in args.train_questions.split(",")]
    seeds = [int(v) for v in args.seeds.split(",")]
    methods = args.methods.split(",")
    for lam in lambdas:
        todo = [
            (n, m, s)
            for s in seeds
            for n in sizes
            for m in methods
            if (f"{lam:g}", str(n), m, str(s)) not in done
        ]
        if not todo:
            continue
        with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
            paths = write_lambda_world(
                Path(tmp), args.preset, lam, args.world_seed, args.hidden_dim
            )
            sets = {s: read_calibration_set(paths[f"{s}/calib"]) for s in ("train", *SPLITS)}
            sets = {
                k: type(v)(v.records, np.asarray(v.hidden, np.float32), v.meta, None)
                for k, v in sets.items()
            }
            train_h = sets["train"].hidden.astype(np.float64)
            train_mu = sets["train"].records["true_mu"].to_numpy(np.float64)
            r2 = {
                s: linear_r2(
                    train_h,
                    train_mu,
                    sets[s].hidden.astype(np.float64),
                    sets[s].records["true_mu"].to_numpy(np.float64),
                )
                for s in SPLITS
            }
            print(f"lambda {lam:g}: linear R2 id {r2['id']:.3f} ood {r2['ood']:.3f}", flush=True)
            for n, method, seed in todo:
                train = question_subset(sets["train"], n)
                row: dict = {
                    "preset": args.preset,
                    "world_seed": args.world_seed,
                    "lam": f"{lam:g}",
                    "r2_id": round(r2["id"], 4),
                    "r2_ood": round(r2["ood"], 4),
                    "n_train_questions": n,
                    "n_train_records": len(train),
                    "method": method,
                    "seed": seed,
                    "setting": setting,
                }
                started = time.perf_counter()
                try:
                    model = fit(
                        method,
                        train,
                        overrides=dict(overrides.get(method, {})) or None,
                        seed=seed,
                        progress=False,
                    )
                except CollapseError as err:
                    row.update(collapsed=True, seconds=round(time.perf_counter() - started, 1))
                    append(args.out, row)
                    print(f"  {method} n={n} seed {seed}: COLLAPSED {err}", flush=True)
                    continue
                training = model.info.get("training", {})
                row.update(
                    collapsed=False,
                    best_step=training.get("best_step", ""),
                    steps=training.get("steps", ""),
                )
                for split in SPLITS:
                    scores = evaluate_calibrator(model, sets[split])
                    for key in KEYS:
                        row[f"{split}_{key}"] = round(float(scores[key]), 6)
                row["seconds"] = round(time.perf_counter() - started, 1)
                append(args.out, row)
                print(
                    f"  lambda {lam:g} n={n} {method:8s} seed {seed}: ID Brier {row['id_brier']:.4f}"
                    f" WQL {row['id_wql']:.4f} int {row['id_wql_interior']:.4f} | OOD Brier "
                    f"{row['ood_brier']:.4f} ({row['seconds']:.0f} s, step "
                    f"{row['best_step']}/{row['steps']})",
                    flush=True,
                )


def cells(rows: list[dict]) -> dict:
    """(lam, n, method) -> {metric: array over seeds}, plus R^2 per lam."""
    out: dict = {}
    for r in rows:
        if r["collapsed"] == "True":
            continue
        label = r["method"] + ("" if r["setting"] == "default" else f" {r['setting']}")
        key = (float(r["lam"]), int(r["n_train_questions"]), label)
        entry = out.setdefault(key, {"seed": [], "r2_id": float(r["r2_id"])})
        entry["seed"].append(int(r["seed"]))
        for s in SPLITS:
            for k in KEYS:
                entry.setdefault(f"{s}_{k}", []).append(float(r[f"{s}_{k}"]))
    return out


def summarise(args) -> str:
    """The summary tables of ``--out`` (and ``--more``) as Markdown text."""
    lines: list[str] = []
    print = lines.append  # noqa: A001  (the tables are collected, then printed or rendered)
    rows = read_rows([args.out, *args.more])
    table = cells(rows)
    collapsed = [r for r in rows if r["collapsed"] == "True"]
    lams = sorted({k[0] for k in table}, reverse=True)
    sizes = sorted({k[1] for k in table})
    labels = {k[2] for k in table}
    methods = [m for m in METHODS if m in labels]
    methods += sorted(labels - set(methods), key=lambda m: (METHODS.index(m.split()[0]), m))
    metrics = [f"{s}_{k}" for s in SPLITS for k in ("brier", "wql", "wql_interior")]
    print(f"{len(rows)} fits, {len(collapsed)} collapsed; mean ± std over seeds (n seeds)")
    print("")
    print("| λ | R² (id) | train q | method | " + " | ".join(metrics) + " |")
    print("|" + "---|" * (4 + len(metrics)))
    for lam in lams:
        for n in sizes:
            for m in methods:
                e = table.get((lam, n, m))
                if not e:
                    continue
                vals = " | ".join(
                    f"{np.mean(e[k]):.4f} ± {np.std(e[k], ddof=1) if len(e[k]) > 1 else 0:.4f}"
                    for k in metrics
                )
                print(f"| {lam:g} | {e['r2_id']:.3f} | {n} | {m} ({len(e['seed'])}) | {vals} |")
    print("")
    print("OT − QR and OT − mono (tuned: and − binomial; paired by seed; negative = OT better)")
    print("")
    print("| λ | R² (id) | train q | pair | " + " | ".join(metrics) + " | OT ahead in |")
    print("|" + "---|" * (5 + len(metrics)))
    settings = sorted({m.partition(" ")[2] for m in labels} - {""})
    pairs = [("ot", "qr"), ("ot", "mono"), ("ot", "ot one_map")]
    pairs += [(f"ot {s}", f"{m} {s}") for s in settings for m in ("qr", "mono", "binomial")]
    for lam, n, (first, second) in itertools.product(lams, sizes, pairs):
        ot, qr = table.get((lam, n, first)), table.get((lam, n, second))
        if not ot or not qr:
            continue
        if True:
            common = sorted(set(ot["seed"]) & set(qr["seed"]))
            parts, ahead = [], 0
            for k in metrics:
                a = np.array([ot[k][ot["seed"].index(s)] for s in common])
                b = np.array([qr[k][qr["seed"].index(s)] for s in common])
                d = a - b
                ahead += int(d.mean() < 0)
                sd = d.std(ddof=1) if len(d) > 1 else 0.0
                parts.append(f"{d.mean():+.4f} ± {sd:.4f}")
            print(
                f"| {lam:g} | {ot['r2_id']:.3f} | {n} | {first} − {second} | " + " | ".join(parts)
                + f" | {ahead}/{len(metrics)} ({len(common)} seeds) |"
            )  # fmt: skip
    if args.figure:
        draw(table, lams, sizes, methods, args.figure)
    return "\n".join(lines) + "\n"


def draw(table, lams, sizes, methods, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("id_brier", "ID Brier"), ("id_wql_interior", "ID WQL (τ 0.1..0.9)"),
              ("ood_brier", "OOD Brier")]  # fmt: skip
    fig, axes = plt.subplots(
        len(panels), len(sizes), figsize=(3.6 * len(sizes), 2.8 * len(panels)), squeeze=False
    )
    colours = {"ot": "C3", "qr": "C0", "mono": "C2", "binomial": "C1"}
    # a labelled setting of a method (e.g. "ot one_map") keeps the method's colour, dashed
    for j, n in enumerate(sizes):
        for i, (key, label) in enumerate(panels):
            ax = axes[i][j]
            for m in methods:
                pts = [(table[(lam, n, m)]["r2_id"], table[(lam, n, m)][key]) for lam in lams
                       if (lam, n, m) in table]  # fmt: skip
                if not pts:
                    continue
                pts.sort()
                x = [p[0] for p in pts]
                mean = np.array([np.mean(p[1]) for p in pts])
                std = np.array([np.std(p[1], ddof=1) if len(p[1]) > 1 else 0 for p in pts])
                ax.errorbar(x, mean, yerr=std, marker="o", ms=3, capsize=2, label=m,
                            color=colours.get(m.split()[0]),
                            linestyle="--" if " " in m else "-")  # fmt: skip
            ax.set_title(f"{label}, {n} training questions", fontsize=8)
            ax.set_xlabel("held-out linear R² of the true logit on h", fontsize=7)
            ax.tick_params(labelsize=7)
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None, help="CSV (appended, resumable)")
    parser.add_argument("--preset", default="llama-3.1-8b__qwen-prm")
    parser.add_argument(
        "--world-seed", type=int, default=101, help="101: a development seed, not the grid's"
    )
    parser.add_argument("--hidden-dim", type=int, default=128)
    parser.add_argument("--lambdas", default="1,0.6,0.3,0.1,0")
    parser.add_argument("--train-questions", default="100,200,500")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--overrides", action="append", default=[], help="METHOD:k=v;k=v")
    parser.add_argument(
        "--tuned", type=Path, default=None, help="best.json of a dprm tune search: its overrides"
    )
    parser.add_argument(
        "--label", default=None, help="the rows' setting name (default/overrides/tuned)"
    )
    parser.add_argument("--more", type=Path, nargs="*", default=[], help="more CSVs to summarise")
    parser.add_argument("--tmp", default=None, help="where worlds are written (temporary)")
    parser.add_argument("--summary", action="store_true", help="only summarise --out")
    parser.add_argument("--figure", type=Path, default=None)
    parser.add_argument(
        "--render", action="store_true", help=f"write docs/results/{PAGE}.md from its stored CSVs"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="the smallest grid (one tiny cell) into --out"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.render:
        print(render())
        return 0
    if args.out is None:
        parser.error("--out is required (or --render)")
    if args.smoke:
        args.lambdas, args.train_questions, args.seeds = "0.3", "20", "0"
        args.methods, args.hidden_dim = "qr", 16
    if not args.summary:
        run(args)
    print(summarise(args), end="")
    return 0


PAGE = "regime-map"
RECOMPUTE = (
    "python benchmarks/experiments/regime_map.py --out docs/results/regime-map/"
    "fits_default_and_one_map.csv --seeds 0,1,2 --lambdas 1,0.6,0.3,0.1,0 --train-questions "
    '100,200,500 (and --overrides "ot:ensemble_size=1" --label one_map; the tuned rows: '
    "--tuned docs/results/regime-map/tuned_wql50_best.json --label tuned_wql50 --out "
    "docs/results/regime-map/fits_tuned.csv)"
)


def render() -> Path:
    """Write ``docs/results/regime-map.md`` from the CSVs in ``docs/results/regime-map/``."""
    import results_page as rp

    data = rp.folder(PAGE)
    args = argparse.Namespace(
        out=data / "fits_default_and_one_map.csv", more=[data / "fits_tuned.csv"], figure=None
    )
    objective = list(csv.DictReader((data / "tuning_objective_dev_worlds.csv").open()))
    rows = [
        [r["world"], r["method"], r["setting"], r["trials"]]
        + [f"{float(r[k]):.4f}" for k in ("id_brier", "id_wql", "ood_brier", "ood_wql")]
        for r in objective
    ]
    body = (
        "When does the paper's OT beat its linear QR baseline, and is the gain the OT "
        "objective's or the network's? One twin v2 world (`llama-3.1-8b__qwen-prm`, world seed "
        "101, hidden size 128) with its linear share λ set per row (the held-out linear R² of "
        "the true logit on h is measured), 100 / 200 / 500 training questions, every method "
        "fitted at 3 seeds and evaluated on held-out ID and OOD questions. Settings: `default` "
        "(every method at its defaults; `ot` is its 4-map ensemble), `one_map` (`ot` with "
        "`ensemble_size=1`), `tuned_wql50` (the best settings of a 50-trial validation-WQL "
        "search per method on a development world, `tuned_wql50_best.json`) and "
        "`tuned_checkpoint8` (an 8-trial search scored by the checkpoint objective).\n\n"
        "![regime map](regime-map/regime_map.png)\n\n"
        "## Every cell (mean ± std over seeds)\n\n"
        + summarise(args)
        + "\n## Tuning objective on two development worlds\n\n"
        "20 trials per method and objective on the training split, refitted at seed 0, "
        "evaluated held out (`tuning_objective_dev_worlds.csv`; computed at commit 7db71d0 by "
        "a script since removed: `git show c671919:benchmarks/tune_objective.py`). "
        "docs/decisions/tuning-objective-wql.md reads it.\n\n"
        + rp.table(
            [
                "world",
                "method",
                "objective",
                "trials",
                "ID Brier",
                "ID WQL",
                "OOD Brier",
                "OOD WQL",
            ],
            rows,
            "lllrrrrr",
        )  # fmt: skip
    )
    return rp.write_page(
        PAGE, "Regime map: OT against QR, mono and binomial",
        "python benchmarks/experiments/regime_map.py --render", body,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
