"""Every twin world's Base Brier / PosBrier / ECE next to the paper's, with residuals.

Writes each of the 18 (generator, PRM) worlds with ``write_world`` (the real thing: hidden
states included, at the size's hidden dimension unless ``--hidden-dim`` says otherwise), reads
its calibration sets back, scores the raw ``prm_score`` (Base) against ``success_prob`` with
dprm.metrics and prints, per cell, ours / paper / residual and pass or fail against the
tolerances (Brier, PosBrier +-0.02, ECE +-0.04). The 36 cells are (generator, PRM) x {MATH500
= our ``id`` split, AIME24-25 = our ``ood`` split}; the ``train`` split must match the MATH500
row as well and is printed beside ``id``. The fit (tools/fit_twin.py) targets paper size
at the default seeds; other sizes and seeds show how far sampling noise moves the numbers.

With ``--qr`` it also trains, per world, a converged linear QR with dprm's own trainer
(``dprm.fit("qr", ...)`` on the ``train`` split, the settings in ``CONVERGED_QR``: 4000 steps,
checkpoint by validation WQL, i.e. the pinball objective) and prints its Brier / PosBrier / ECE
(point estimate: the median, as the paper's QR) next to the paper's QR cells with residuals and
pass or fail (Brier, PosBrier +-0.03, ECE +-0.05), the count of the 36 cells in tolerance, and
each world's linear R^2: a ridge regression of the true logit's location ``true_mu`` on h, fitted
on ``train`` and scored on the held-out ``id`` split.

Always, it also prints the ceiling on what any converged QR can reach in distribution: on each
MATH500 cell, the ECE of a converged median is at most E|y - median(y)| of the cell's labels
(``dprm.metrics.median_ece_ceiling``); a cell whose paper QR ECE minus the tolerance lies above
that ceiling cannot be reached by a converged QR of any features, whatever h carries. The QR part reads the hidden states into
memory: at paper size use ``--hidden-dim 256`` (h is an affine image of the embedding's 128
units at any D >= 128, so a linear model of h is the same model class).

Usage: python benchmarks/experiments/twin_residuals.py [--size paper] [--seed N] [--hidden-dim D] [--qr]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from dprm import metrics as M
from dprm.data import read_calibration_set
from dprm.data.synth import GENERATORS, PRMS, SIZES, write_world
from dprm.metrics import linear_r2
from fit_twin import (  # noqa: E402
    CONVERGED_QR,
    PAPER_DATASET,
    QR_TOLERANCE,
    TOLERANCE,
    paper_base,
    paper_cell,
)


def qr_rows(paths, splits, kinds, gen: str, prm: str):
    """Train dprm's converged QR on ``train``; per split (ours [3], paper [3]); linear R^2."""
    from dprm.models.fit import fit

    sets = {split: read_calibration_set(paths[f"{split}/calib"]) for split in splits}
    model = fit("qr", sets["train"], overrides=CONVERGED_QR, seed=0, progress=False)
    rows = {}
    for split in splits:
        hidden = np.asarray(sets[split].hidden, dtype=np.float32)
        p = model.point_estimate(hidden)
        y = sets[split].records["success_prob"].to_numpy(np.float64)
        ours = np.array([M.brier(p, y), M.pos_brier(p, y), M.ece(p, y)])
        rows[split] = (ours, paper_cell(prm, kinds[split], gen, "qr"))
    train, held_out = sets["train"], sets["id"]
    r2 = linear_r2(
        np.asarray(train.hidden, dtype=np.float64),
        train.records["true_mu"].to_numpy(np.float64),
        np.asarray(held_out.hidden, dtype=np.float64),
        held_out.records["true_mu"].to_numpy(np.float64),
    )
    return rows, r2


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="paper", choices=sorted(SIZES))
    parser.add_argument("--seed", type=int, default=None, help="world seed (default: preset's)")
    parser.add_argument("--hidden-dim", type=int, default=None, help="default: the size's")
    parser.add_argument("--keep", default=None, help="keep the worlds under this directory")
    parser.add_argument(
        "--qr", action="store_true", help="also train dprm's converged QR per world (slow)"
    )
    parser.add_argument("--generators", default=",".join(GENERATORS))
    parser.add_argument("--prms", default=",".join(PRMS))
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
    qr_lines: list[str] = []
    qr_cells = qr_failed = 0
    qr_resid: list[np.ndarray] = []
    r2s: list[float] = []
    out_of_reach: list[str] = []
    for prm in args.prms.split(","):
        for gen in args.generators.split(","):
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
                if split == "id":  # the QR is trained on this distribution: the ceiling holds
                    ceiling = M.median_ece_ceiling(y)
                    needed = paper_cell(prm, kinds[split], gen, "qr")[2] - QR_TOLERANCE[2]
                    if needed > ceiling:
                        out_of_reach.append(
                            f"{gen} x {prm} {dataset}: paper QR ECE - {QR_TOLERANCE[2]} = "
                            f"{needed:.3f} > ceiling {ceiling:.3f}"
                        )
                print(
                    f"{gen:14s} {prm:11s} {split:6s} {dataset:10s}{cols}  {'pass' if ok else 'FAIL'}",
                    flush=True,
                )
            if args.qr:
                rows, r2 = qr_rows(paths, splits, kinds, gen, prm)
                r2s.append(r2)
                for split, (ours, target) in rows.items():
                    resid = ours - target
                    ok = bool(np.all(np.abs(resid) <= QR_TOLERANCE))
                    if split != "train":  # the 36 cells: MATH500 on id, AIME24-25 on ood
                        qr_cells += 1
                        qr_failed += not ok
                        qr_resid.append(resid)
                    cols = "".join(
                        f" {o:7.3f} / {t:6.3f} ({r:+6.3f})"
                        for o, t, r in zip(ours, target, resid, strict=True)
                    )
                    qr_lines.append(
                        f"{gen:14s} {prm:11s} {split:6s} {PAPER_DATASET[kinds[split]]:10s}{cols}"
                        f"  {'pass' if ok else 'FAIL'}  linear R2 {r2:.3f}"
                    )
                    print("QR " + qr_lines[-1], flush=True)
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"\n{n_cells - n_failed}/{n_cells} split rows pass (36 paper cells; MATH500 cells are "
        f"checked on both train and id); worst |residual| Brier {worst[0]:.3f}, "
        f"PosBrier {worst[1]:.3f}, ECE {worst[2]:.3f}; {time.perf_counter() - t0:.0f}s"
    )
    print(
        f"\nQR cells no converged QR can reach (MATH500 ECE ceiling E|y - median y|): "
        f"{len(out_of_reach)}; so at most {36 - len(out_of_reach)} of 36 under that assumption"
        + "".join(f"\n  {line}" for line in out_of_reach)
    )
    if args.qr:
        resid = np.abs(np.array(qr_resid))
        print(
            f"\nconverged linear QR (dprm) vs the paper's QR; tolerance Brier, PosBrier "
            f"{QR_TOLERANCE[0]}, ECE {QR_TOLERANCE[2]}"
        )
        print(header + "".join(f" {m:>24s}" for m in ("Brier", "PosBrier", "ECE")) + "  result")
        print("\n".join(qr_lines))
        print(
            f"\n{qr_cells - qr_failed}/{qr_cells} QR cells pass (MATH500 on id, AIME24-25 on "
            f"ood; train rows printed, not counted); |residual| median / max: Brier "
            f"{np.median(resid[:, 0]):.3f} / {resid[:, 0].max():.3f}, PosBrier "
            f"{np.median(resid[:, 1]):.3f} / {resid[:, 1].max():.3f}, ECE "
            f"{np.median(resid[:, 2]):.3f} / {resid[:, 2].max():.3f}; linear R2 of true_mu on h "
            f"(ridge, train -> id) {min(r2s):.3f}-{max(r2s):.3f}"
        )
    return 0 if n_failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
