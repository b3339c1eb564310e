"""The arithmetic world's results page: docs/results/real-world.md and its CSVs.

    python benchmarks/experiments/real_world.py [--recipe examples/arith.toml] [--work runs/real-world]

Runs (or resumes) ``dprm run RECIPE --out WORK`` (the real pipeline on the shipped generator and
PRM: generation, Monte Carlo rollout labels, PRM embedding, every calibrator over the recipe's
seeds, BoN pools, IAS), then reads ``WORK/results.json`` and writes

- ``docs/results/real-world/calibration.csv``: every calibrator's Brier / PosBrier / ECE / WQL
  and error to the Monte Carlo truth, per held-out split and seed;
- ``docs/results/real-world/bon.csv``: the best-of-N rows (uniform, C rule, ``auto``,
  ``auto-seq``, oracle) per split, calibrator and seed;
- ``docs/results/real-world/world.json``: the generator's measured behaviour
  (``tools/world_stats.py``) when ``--stats`` names its JSON;
- ``docs/results/real-world.md``: mean ± standard deviation over seeds of both, headed by the
  command that regenerates it, the commit, the date and the machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "results"
CAL_COLUMNS = ("brier", "pos_brier", "ece", "wql")
BON_COSTS = (0.1, 0.25)


def run_recipe(recipe: Path, work: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "dprm.cli", "run", str(recipe), "--out", str(work)]
    subprocess.run(cmd, check=True, env=env)


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def summary(frame: pd.DataFrame, keys: list[str], values: list[str]) -> pd.DataFrame:
    """Mean and standard deviation over seeds, as ``mean ± sd`` strings."""
    grouped = frame.groupby(keys, sort=False)[values]
    mean, sd, count = grouped.mean(), grouped.std(ddof=1).fillna(0.0), grouped.size()
    out = mean.copy().astype(object)
    for col in values:
        out[col] = [f"{m:.4f} ± {s:.4f}" for m, s in zip(mean[col], sd[col], strict=True)]
    out["seeds"] = count
    return out.reset_index()


def markdown(frame: pd.DataFrame) -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", type=Path, default=ROOT / "examples" / "arith.toml")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "real-world")
    parser.add_argument("--stats", type=Path, default=None, help="tools/world_stats.py --json")
    parser.add_argument("--no-run", action="store_true", help="only read WORK/results.json")
    args = parser.parse_args(argv)
    if not args.no_run:
        run_recipe(args.recipe, args.work)
    results = json.loads((args.work / "results.json").read_text(encoding="utf-8"))
    out_dir = DOCS / "real-world"
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = pd.DataFrame(results["metrics"])
    metrics.to_csv(out_dir / "calibration.csv", index=False)
    ias = pd.DataFrame(results["pays"])
    ias.to_csv(out_dir / "bon.csv", index=False)
    if args.stats is not None:
        (out_dir / "world.json").write_text(args.stats.read_text(encoding="utf-8"))
    cal_cols = [c for c in CAL_COLUMNS if c in metrics.columns]
    keys = [k for k in ("dataset", "method") if k in metrics.columns]
    held_out = metrics[metrics["dataset"].isin(["id", "ood"])] if "dataset" in metrics else metrics
    cal = summary(held_out, keys, cal_cols)
    recipe_rel = args.recipe.resolve().relative_to(ROOT)
    command = f"python benchmarks/experiments/real_world.py --recipe {recipe_rel}"
    try:
        work_rel = args.work.resolve().relative_to(ROOT)
    except ValueError:
        work_rel = args.work
    command += f" --work {work_rel}"
    if args.stats is not None:
        command += " --stats STATS.json"
    lines = [
        "# Results on the arithmetic world (models trained here)",
        "",
        f"Regenerate: `{command}`  ",
        f"Commit: `{commit()}`; date: {datetime.date.today().isoformat()}; machine: "
        f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; "
        f"seeds: {sorted(metrics['seed'].unique().tolist()) if 'seed' in metrics else '?'}.",
        "",
        "The world, its models and their provenance: [docs/real-world.md](../real-world.md). "
        "Every number below comes from the trained generator and PRM through the real pipeline "
        "(`dprm run`), held out: calibrators train on `arith-train` and are scored on `arith-id` "
        "and `arith-ood`. On real data the reference of every metric is the Monte Carlo "
        "success estimate of each prefix (the recipe's rollouts), so Brier is the squared error "
        "to the Monte Carlo truth. Mean ± standard deviation over calibrator seeds (the data, "
        "one draw of generation and rollouts, is shared by the seeds).",
        "",
        f"The run behind this page: `dprm run {recipe_rel} --out {work_rel}` "
        f"({results['run'].get('wall_time_s', '?')} s of report-stage wall time recorded in "
        "its results.json).",
        "",
        "## Calibration (held out)",
        "",
        markdown(cal),
        "",
        "CSV: [real-world/calibration.csv](real-world/calibration.csv) (every seed).",
        "",
        "## Adaptive best-of-N",
        "",
    ]
    if not ias.empty:
        lines += [
            "Accuracy of the selected answer (rule: the PRM's highest last-step score) at a "
            "given cost (the share of the full budget of N = the pool size per question); "
            "`C` is the C rule, `auto` / `auto-seq` the learnt allocations; uniform and oracle "
            "do not depend on the calibrator. Mean ± sd over seeds; `nan`: the C rule has no "
            "setting that spends exactly that cost on these questions. Pools of the recipe's "
            "`[bon] n` candidates for its `[questions] limit` questions per split: a small "
            "sample, so differences of a few points are noise.",
            "",
        ]
        for cost in BON_COSTS:
            at = ias[(ias["cost"] - cost).abs() < 1e-9]
            if at.empty:
                continue
            table = summary(at, ["kind", "method", "split"], ["accuracy"])
            wide = table.pivot_table(
                index=["kind", "method"], columns="split", values="accuracy", aggfunc="first"
            ).reset_index()
            lines += [f"### cost {cost:g}", "", markdown(wide), ""]
    else:
        lines += ["(no best-of-N rows: the run wrote none)", ""]
    lines += ["CSV: [real-world/bon.csv](real-world/bon.csv) (every seed).", ""]
    (DOCS / "real-world.md").write_text("\n".join(lines), encoding="utf-8")
    print(DOCS / "real-world.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
