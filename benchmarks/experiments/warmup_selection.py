"""Checkpoint selection against the step cap: which warm-up keeps the better checkpoint?

Fits qr, mono and binomial at the demo grid's step caps (``dprm.orchestrate.grid.DEMO_OVERRIDES``)
on development worlds (demo size, the demo grid's generators with qwen-prm; never the paper
grid) with three warm-ups: the fixed 400 steps, a quarter of the step cap, and none. Prints, per
method and warm-up, the kept step, the validation calibration area of the kept checkpoint and
the held-out (``id/calib``) Brier and WQL of the model, as mean and spread over the seeds.

    python benchmarks/experiments/warmup_selection.py --seeds 0 1 2 --threads 1
    python benchmarks/experiments/warmup_selection.py --smoke   # tiny world, qr, seed 0, 20 steps
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", default="qr,mono,binomial")
    parser.add_argument("--worlds", default="qwen-2.5-7b__qwen-prm")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", default=None, help="folder for the worlds (default: a temp dir)")
    parser.add_argument("--size", default="demo", help="world size (tiny for a quick look)")
    parser.add_argument("--max-steps", type=int, default=0, help="step cap (0: the demo grid's)")
    parser.add_argument("--smoke", action="store_true", help="tiny world, qr, seed 0, 20 steps")
    args = parser.parse_args()
    if args.smoke:
        args.size, args.max_steps, args.methods, args.seeds = "tiny", 20, "qr", [0]

    import torch

    torch.set_num_threads(args.threads)
    from dprm.data import read_calibration_set
    from dprm.data.synth import write_world
    from dprm.evaluation import evaluate_calibrator
    from dprm.models.fit import fit
    from dprm.orchestrate.grid import DEMO_OVERRIDES

    work = Path(args.work or tempfile.mkdtemp(prefix="warmup-"))
    rows = []
    for world in args.worlds.split(","):
        folder = work / world
        if not (folder / "train" / "calib").exists():
            write_world(folder, world, size=args.size, progress=False, overwrite=True)
        train = read_calibration_set(folder / "train" / "calib")
        held_out = read_calibration_set(folder / "id" / "calib")
        for method in args.methods.split(","):
            cap = args.max_steps or int(DEMO_OVERRIDES[method]["max_steps"])
            warmups = {"400 (fixed)": 400, "cap/4": cap // 4, "none": 0}
            for rule, warmup in warmups.items():
                for seed in args.seeds:
                    overrides = dict(DEMO_OVERRIDES[method]) | {"warmup_steps": warmup,
                                                                "max_steps": cap}  # fmt: skip
                    model = fit(method, train, overrides=overrides, seed=seed, progress=False)
                    metrics = evaluate_calibrator(model, held_out)
                    training = model.info.get("training", {})
                    rows.append(
                        (
                            world,
                            method,
                            rule,
                            seed,
                            training.get("best_step"),
                            training.get("best_score"),
                            metrics["brier"],
                            metrics["wql"],
                        )
                    )
                    print(*rows[-1], sep="\t", flush=True)
    print("\nworld\tmethod\twarm-up\tkept steps\tval cal. area\tID Brier\tID WQL (mean ± sd)")
    keys = sorted({r[:3] for r in rows}, key=lambda k: (k[0], k[1], list(warmups).index(k[2])))
    for key in keys:
        group = [r for r in rows if r[:3] == key]

        def cell(i: int, group: list = group) -> str:
            values = [r[i] for r in group]
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            return f"{statistics.mean(values):.4f} ± {sd:.4f}"

        steps = ",".join(str(r[4]) for r in group)
        print(*key, steps, cell(5), cell(6), cell(7), sep="\t")


if __name__ == "__main__":
    main()
