"""Measure a candidate generator (and PRM) of the arithmetic world on development questions.

    python tools/world_dev.py --models DIR --block 1 --out dev1.json   # DIR/generator, DIR/prm

The world's targets, computed by the world page's own code (``world_stats.collect``,
``world_metrics.summarise``) on questions no test split holds: ID-like questions are a block of
200 ``arith-train`` questions (block 1: 0-199, block 2: 200-399); OOD-like questions are 100
fresh questions of the OOD distribution (5-6 operations, two digits) from a stream no packaged
set uses, block k taking the k-th hundred. Draw seed 10 + block. Design choices of the world
(training length, learning rates) are made here, never on the test splits.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tools"))

#: seed offset of the development OOD stream (packaged sets use < 5e6, training 9e6 on)
DEV_OOD_OFFSET = 6_000_000


def dev_rows(block: int) -> dict[str, list[dict]]:
    """The development questions of ``block`` (1 or 2), by split."""
    from dprm.llm.tasks.arith import SPLIT_SPECS, make_set
    from dprm.llm.tasks.arith_sets import SEED, packaged_questions, set_rows

    if block not in (1, 2):
        raise SystemExit(f"--block must be 1 or 2, got {block}")
    ood = make_set(
        SPLIT_SPECS["ood"], 100 * block, SEED + DEV_OOD_OFFSET, "dev-ood",
        exclude=packaged_questions(),
    )  # fmt: skip
    return {"id": set_rows("train")[200 * (block - 1) : 200 * block], "ood": ood[-100:]}


def main(argv: list[str] | None = None) -> int:
    from dprm.io import atomic_path
    from world_metrics import summarise
    from world_stats import collect

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, required=True, help="holds generator/ and prm/")
    parser.add_argument("--block", type=int, default=1, help="1 or 2 (see above)")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, help="the draws and scores, as JSON")
    args = parser.parse_args(argv)
    for name in ("generator", "prm"):
        if not (args.models / name / "config.json").is_file():
            raise SystemExit(f"--models {args.models}: no {name}/config.json")
    if args.out and args.out.resolve().is_relative_to(args.models.resolve()):
        raise SystemExit(f"--out {args.out} is inside --models {args.models} (an input)")
    data = collect(
        args.models, None, args.samples, 10 + args.block, True, args.workers, dev_rows(args.block)
    )
    if args.out:
        with atomic_path(args.out) as tmp:
            tmp.write_text(json.dumps(data), encoding="utf-8")
    for row in summarise(data, args.samples, None)["targets"]:
        low, high = row["ci"]
        print(f"{row['target']:50s} {row['measured']:.3f} [{low:.3f}, {high:.3f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
