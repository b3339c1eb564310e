"""Which calibrator for calibration tables, which for IAS: measured on a development world.

Fits ``ot``, ``qr``, ``mono`` and ``binomial`` at the demo grid's step caps
(``dprm.orchestrate.grid.DEMO_OVERRIDES``, the current selection rule) on the training split of a
demo-size development world (never the paper grid), for each seed; scores each held out:
Brier and WQL on ``id/calib`` and ``ood/calib`` (the calibration table), and the accuracy of
``auto`` against uniform best-of-N at equal cost 0.05 / 0.1 / 0.25 on ``id/bon`` and
``ood/bon`` (``dprm ias --train-bon``'s pays table, highest-last). Prints mean ± sd over seeds.
``--ot-fixed-warmup`` adds ``ot`` with the former fixed 400-step warm-up (warmup_fraction 1).

    python benchmarks/experiments/recommendation.py --seeds 0 1 2 --threads 1
    python benchmarks/experiments/recommendation.py --smoke   # tiny world, qr, seed 0, 20 steps
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

COSTS = (0.05, 0.1, 0.25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", default="ot,qr,mono,binomial")
    parser.add_argument("--world", default="qwen-2.5-7b__qwen-prm")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ot-fixed-warmup", action="store_true")
    parser.add_argument("--work", default=None, help="folder for the world (default: a temp dir)")
    parser.add_argument("--size", default="demo", help="world size (tiny for a quick look)")
    parser.add_argument("--max-steps", type=int, default=0, help="step cap (0: the demo grid's)")
    parser.add_argument("--smoke", action="store_true", help="tiny world, qr, seed 0, 20 steps")
    args = parser.parse_args()
    if args.smoke:
        args.size, args.max_steps, args.methods, args.seeds = "tiny", 20, "qr", [0]

    from dprm.data import read_bon_set, read_calibration_set
    from dprm.data.synth import write_world
    from dprm.evaluation import evaluate_calibrator
    from dprm.ias import run_ias
    from dprm.ias.curves.pays import pays_table
    from dprm.models.fit import fit
    from dprm.orchestrate.grid import DEMO_OVERRIDES

    folder = Path(args.work or tempfile.mkdtemp(prefix="recommend-")) / args.world
    if not (folder / "ood" / "bon" / "meta.json").exists():
        write_world(folder, args.world, size=args.size, progress=False, overwrite=True)
    train = read_calibration_set(folder / "train" / "calib")
    calib = {s: read_calibration_set(folder / s / "calib") for s in ("id", "ood")}
    bon = {s: read_bon_set(folder / s / "bon") for s in ("id", "ood", "train")}
    cap = {"max_steps": args.max_steps} if args.max_steps else {}
    variants = {m: (m, dict(DEMO_OVERRIDES.get(m, {})) | cap) for m in args.methods.split(",")}
    if args.ot_fixed_warmup:
        variants["ot (fixed 400 warm-up)"] = (
            "ot", DEMO_OVERRIDES["ot"] | {"warmup_fraction": 1} | cap
        )  # fmt: skip
    rows: dict[str, dict[str, list[float]]] = {}
    for name, (method, overrides) in variants.items():
        for seed in args.seeds:
            model = fit(method, train, overrides=overrides, seed=seed, progress=False,
                        threads=args.threads)  # fmt: skip
            cell = rows.setdefault(name, {})
            for split in ("id", "ood"):
                scores = evaluate_calibrator(model, calib[split])
                cell.setdefault(f"{split} Brier", []).append(scores["brier"])
                cell.setdefault(f"{split} WQL", []).append(scores["wql"])
                summary, _ = run_ias(bon[split], {method: model}, mc_trials=0, seed=seed,
                                     train_bon=bon["train"], threads=args.threads)  # fmt: skip
                pays = pays_table(summary)
                auto = pays[(pays["allocation"] == "auto") & (pays["method"] == method)]
                for cost in COSTS:
                    gain = auto.loc[(auto["cost"] - cost).abs() < 1e-9, "gain"]
                    cell.setdefault(f"{split} auto {cost:g}", []).append(float(gain.iloc[0]))
            print(name, seed, {k: round(v[-1], 4) for k, v in cell.items()}, flush=True)
    columns = list(next(iter(rows.values())))
    print(f"\nworld {args.world} ({args.size} size), seeds {args.seeds}: held out; Brier / WQL lower is "
          "better; 'auto c' = auto's accuracy minus uniform best-of-N at equal cost c")  # fmt: skip
    print("method\t" + "\t".join(columns))
    for name, cell in rows.items():
        values = []
        for key in columns:
            v = cell[key]
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            values.append(f"{statistics.mean(v):+.4f} ± {sd:.4f}" if "auto" in key
                          else f"{statistics.mean(v):.4f} ± {sd:.4f}")  # fmt: skip
        print(name + "\t" + "\t".join(values))


if __name__ == "__main__":
    main()
