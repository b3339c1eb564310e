"""Default training time on the twin demo with early stopping vs without (one run, a ratio).

Fits each gradient-trained method of the demo grid at the demo's step caps
(``dprm.orchestrate.grid.DEMO_OVERRIDES``) on the demo worlds, twice per seed, interleaved:
*after* with the defaults (patience in steps, binomial without a warm-up), *before* with the
previous release's behaviour (``patience=0``: every step to the cap; the warm-up
min(400, cap / 4) for binomial too). ``ot``'s early stopping did not change (400 steps of
patience after its 400-step warm-up, both arms), so it is left out unless ``--methods`` names
it. Prints per method the steps run and the CPU-process wall time of both arms, and the ratio
after / before of the summed time. Usage::

    python benchmarks/perf/bench_train_stop.py [--seeds 0 1] [--size demo] [--threads 1]
    python benchmarks/perf/bench_train_stop.py --size tiny --seeds 0   # a quick look
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

WORLDS = ("qwen-2.5-7b__qwen-prm", "r1-qwen-7b__qwen-prm")
#: the previous release's training: no early stopping, the warm-up min(400, cap / 4)
BEFORE = {"patience": 0, "warmup_steps": 400, "warmup_fraction": 0.25}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="qr,mono,binomial")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--size", default="demo")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", default=None, help="folder for the worlds (default: temp)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from dprm.data import read_calibration_set
    from dprm.data.synth import write_world
    from dprm.models.fit import fit
    from dprm.orchestrate.grid import DEMO_OVERRIDES

    work = Path(args.work or tempfile.mkdtemp(prefix="train-stop-"))
    totals = {"before": 0.0, "after": 0.0}
    print("world\tmethod\tseed\tsteps before\tsteps after\ts before\ts after")
    for world in WORLDS:
        folder = work / world
        if not (folder / "train" / "calib").exists():
            write_world(folder, world, size=args.size, progress=False, overwrite=True)
        data = read_calibration_set(folder / "train" / "calib")
        for method in args.methods.split(","):
            demo = dict(DEMO_OVERRIDES.get(method, {}))
            for seed in args.seeds:
                steps, seconds = {}, {}
                for arm, extra in (("before", BEFORE if method != "ot" else {}), ("after", {})):
                    started = time.perf_counter()
                    model = fit(method, data, overrides=demo | extra, seed=seed, progress=False)
                    seconds[arm] = time.perf_counter() - started
                    steps[arm] = model.info["training"]["steps"]
                    totals[arm] += seconds[arm]
                print(f"{world}\t{method}\t{seed}\t{steps['before']}\t{steps['after']}\t"
                      f"{seconds['before']:.1f}\t{seconds['after']:.1f}", flush=True)  # fmt: skip
    ratio = totals["after"] / totals["before"]
    print(
        f"total: before {totals['before']:.1f} s, after {totals['after']:.1f} s; "
        f"after / before = {ratio:.2f}"
    )


if __name__ == "__main__":
    main()
