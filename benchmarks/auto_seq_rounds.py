"""The price of choosing ``auto-seq`` draws in rounds (``dprm solve --auto-seq --round-size R``).

Live, a round of R draws is chosen before any of their estimates is read (so a GPU generates
them in one batch). This replays that on twin worlds offline: ``dprm ias --sequential``'s
``auto-seq`` rows (``binomial`` calibrator, highest-last, 32 draw orders, costs 0.05 / 0.1 /
0.25) with the policy run at each round size, and reports ``auto-seq`` - ``auto`` (paired on the
same orders). R = 1 is the offline policy; R >= the budget is one round after the floor (the
candidates' estimates never read). Usage::

    python benchmarks/auto_seq_rounds.py --out /tmp/rounds.csv \\
        [--preset llama-3.1-8b__qwen-prm --preset qwen-2.5-7b__qwen-prm] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
from functools import partialmethod
from pathlib import Path
from unittest import mock

import pandas as pd

ROUND_SIZES = (1, 4, 16, 64, 200, 10**6)
DEV_WORLDS = ("llama-3.1-8b__qwen-prm", "qwen-2.5-7b__qwen-prm")


def rows(preset: str, seed: int, worlds: Path, round_sizes) -> list[dict]:
    import torch

    import dprm
    from dprm.data import read_bon_set, read_calibration_set
    from dprm.data.synth import write_world
    from dprm.ias import run_ias
    from dprm.ias.sequential import SequentialAuto

    torch.set_num_threads(1)
    root = worlds / preset
    if not (root / "id" / "bon" / "meta.json").exists():
        write_world(root, preset, size="demo", progress=False, overwrite=True)
    bon, train = read_bon_set(root / "id" / "bon"), read_bon_set(root / "train" / "bon")
    calib = read_calibration_set(root / "train" / "calib")
    model = dprm.fit("binomial", calib, seed=seed, progress=False)
    out = []
    for r in round_sizes:
        # run_ias has no round-size setting: run its auto-seq rows with the policy in rounds of r
        rounds = partialmethod(SequentialAuto.budgets, round_size=r)
        with mock.patch.object(SequentialAuto, "budgets", rounds):
            summary, _ = run_ias(
                bon, {"binomial": model}, mc_trials=0, rules=["highest-last"], train_bon=train,
                sequential=True, include_base=False,
            )  # fmt: skip
        seq = summary[(summary["sweep"] == "auto-seq") & (summary["method"] == "binomial")]
        for _, row in seq.iterrows():
            out.append(
                {"preset": preset, "seed": seed, "round_size": r, "cost": row["level"],
                 "questions": len(bon), "minus_auto": row["minus_auto"],
                 "minus_auto_se": row["minus_auto_se"], "accuracy": row["accuracy"]}
            )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="CSV of every cell")
    parser.add_argument("--preset", action="append", help="twin world (default: the dev pair)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--worlds", type=Path, default=Path("/tmp/dprm-auto-seq-rounds"))
    args = parser.parse_args()
    cells = []
    for preset in args.preset or DEV_WORLDS:
        for seed in args.seeds:
            cells += rows(preset, seed, args.worlds, ROUND_SIZES)
    frame = pd.DataFrame(cells)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False)
    summary = frame.groupby("round_size")["minus_auto"].agg(["mean", "std", "size"])
    summary["cells > 0"] = frame.groupby("round_size")["minus_auto"].apply(lambda x: (x > 0).sum())
    print(summary.round(4).to_string())


if __name__ == "__main__":
    main()
