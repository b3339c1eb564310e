"""Experiment: does a cost-aware allocation turn better calibration into a better IAS frontier?

The C rules (docs/design.md §4) give every question the smallest n whose success curve
reaches C. ``dprm.ias.budget_greedy`` instead spends a total budget on the largest marginal gains
of the same curves. For each world: fit ``ot`` and ``binomial`` (default settings, one seed) on
the training split (train/calib), then on the held-out ID and OOD best-of-N sets compare, at the mean costs of ot's
C sweep, the exact accuracy of: ot / binomial / truth oracle with the C rule, the same three
with the greedy allocation, and plain best-of-n with the same n for every question (uniform).

Usage::

    python benchmarks/greedy_ias.py --work runs/grid_beyond [--presets llama-3.1-8b__qwen-prm]

(``--work`` reuses the worlds written by ``benchmarks/grid_beyond.py``; missing ones are
synthesised.)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from dprm.data import read_bon_set, read_calibration_set
from dprm.data.synth import write_world
from dprm.ias import (
    C_GRID,
    N_MAX,
    Pools,
    budget_greedy,
    estimate_from_model,
    exact_accuracy_table,
    lookup,
    success_curve_mixture,
    truth_estimate,
    uniform_curve,
)
from dprm.models.fit import fit


def frontier(table, pools, budgets) -> tuple[float, float]:
    """(mean cost as a fraction of N_max, exact accuracy) of one budget vector."""
    return np.minimum(budgets, pools.size).mean() / N_MAX, float(lookup(table, budgets).mean())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", default="runs/grid_beyond")
    parser.add_argument("--size", default="paper")
    parser.add_argument(
        "--presets", nargs="*", default=["llama-3.1-8b__qwen-prm", "r1-qwen-7b__qwen-prm"]
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for preset in args.presets:
        world = Path(args.work) / "worlds" / f"{preset}-{args.size}"
        if not (world / "ood" / "bon" / "meta.json").exists():
            write_world(world, preset, size=args.size, progress=False, overwrite=True)
        data = read_calibration_set(
            world / "train" / "calib"
        )  # held-out protocol: train split only
        started = time.perf_counter()
        models = {m: fit(m, data, seed=args.seed, progress=False) for m in ("ot", "binomial")}
        print(f"\n== {preset}: fitted ot and binomial in {time.perf_counter() - started:.0f} s")
        for split in ("id", "ood"):
            bon = read_bon_set(world / split / "bon")
            pools = Pools.from_bon(bon)
            table = exact_accuracy_table(pools)
            estimates = {m: estimate_from_model(model, bon) for m, model in models.items()}
            estimates["truth"] = truth_estimate(bon)
            curves = {m: success_curve_mixture(e.q_mid, N_MAX) for m, e in estimates.items()}
            uniform = uniform_curve(pools)
            print(f"-- {split}: exact accuracy at matched mean cost (fraction of N_max = {N_MAX})")
            names = ["ot", "binomial", "truth"]
            head = " ".join(f"{n + ' C':>11s}" for n in names)
            head += " " + " ".join(f"{n + ' greedy':>15s}" for n in names)
            print(f"{'cost':>6s} {head} {'uniform':>8s}")
            for c in C_GRID:
                cost, _ = frontier(table, pools, estimates["ot"].budgets(c))
                row = []
                for n in names:  # the C rule, interpolated at ot's cost
                    points = sorted(frontier(table, pools, estimates[n].budgets(x)) for x in C_GRID)
                    row.append(np.interp(cost, *zip(*points, strict=True)))
                for n in names:
                    row.append(frontier(table, pools, budget_greedy(curves[n], cost * N_MAX))[1])
                row.append(np.interp(cost, uniform["cost"], uniform["accuracy"]))
                cells = " ".join(f"{v:11.4f}" for v in row[:3])
                cells += " " + " ".join(f"{v:15.4f}" for v in row[3:6])
                print(f"{cost:6.3f} {cells} {row[6]:8.4f}")


if __name__ == "__main__":
    main()
