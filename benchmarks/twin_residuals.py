"""Every twin world's Base Brier / PosBrier / ECE next to the paper's, with residuals.

Writes each of the 18 (generator, PRM) worlds with ``write_world`` (the real thing: hidden
states included, at the size's hidden dimension unless ``--hidden-dim`` says otherwise), reads
its calibration sets back, scores the raw ``prm_score`` (Base) against ``success_prob`` with
dprm.metrics and prints, per cell, ours / paper / residual and pass or fail against the
tolerances (Brier, PosBrier +-0.02, ECE +-0.04). The 36 cells are (generator, PRM) x {MATH500
= our ``id`` split, AIME24-25 = our ``ood`` split}; the ``train`` split must match the MATH500
row as well and is printed beside ``id``. The fit (benchmarks/fit_twin.py) targets paper size
at the default seeds; other sizes and seeds show how far sampling noise moves the numbers.

Usage: python benchmarks/twin_residuals.py [--size paper] [--seed N] [--hidden-dim D]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from fit_twin import PAPER_DATASET, TOLERANCE, paper_base

from dprm import metrics as M
from dprm.data import read_calibration_set
from dprm.data.synth import GENERATORS, PRMS, SIZES, write_world


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="paper", choices=sorted(SIZES))
    parser.add_argument("--seed", type=int, default=None, help="world seed (default: preset's)")
    parser.add_argument("--hidden-dim", type=int, default=None, help="default: the size's")
    parser.add_argument("--keep", default=None, help="keep the worlds under this directory")
    args = parser.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="dprm-twin-"))
    splits = [s.name for s in SIZES[args.size].splits]
    kinds = {s.name: s.kind for s in SIZES[args.size].splits}
    print(
        f"twin residuals: size={args.size} seed={args.seed or 'default'}; "
        f"ours / paper (residual); tolerance Brier, PosBrier {TOLERANCE[0]}, ECE {TOLERANCE[2]}"
    )
    header = f"{'generator':14s} {'prm':11s} {'split':6s} {'paper set':10s}"
    print(header + "".join(f" {m:>24s}" for m in ("Brier", "PosBrier", "ECE")) + "  result")
    t0 = time.perf_counter()
    n_cells = n_failed = 0
    worst = np.zeros(3)
    for prm in PRMS:
        for gen in GENERATORS:
            preset = f"{gen}__{prm}"
            out = root / preset
            paths = write_world(
                out,
                preset,
                size=args.size,
                seed=args.seed,
                hidden_dim=args.hidden_dim,
                progress=False,
            )
            for split in splits:
                records = read_calibration_set(paths[f"{split}/calib"]).records
                p, y = records["prm_score"], records["success_prob"]
                ours = np.array([M.brier(p, y), M.pos_brier(p, y), M.ece(p, y)])
                target = paper_base(prm, kinds[split], gen)
                resid = ours - target
                worst = np.maximum(worst, np.abs(resid))
                ok = bool(np.all(np.abs(resid) <= TOLERANCE))
                n_cells += 1
                n_failed += not ok
                cols = "".join(
                    f" {o:7.3f} / {t:6.3f} ({r:+6.3f})"
                    for o, t, r in zip(ours, target, resid, strict=True)
                )
                dataset = PAPER_DATASET[kinds[split]]
                print(
                    f"{gen:14s} {prm:11s} {split:6s} {dataset:10s}{cols}  {'pass' if ok else 'FAIL'}",
                    flush=True,
                )
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"\n{n_cells - n_failed}/{n_cells} split rows pass (36 paper cells; MATH500 cells are "
        f"checked on both train and id); worst |residual| Brier {worst[0]:.3f}, "
        f"PosBrier {worst[1]:.3f}, ECE {worst[2]:.3f}; {time.perf_counter() - t0:.0f}s"
    )
    return 0 if n_failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
