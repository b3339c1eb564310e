"""``dprm synth``: write synthetic worlds with a known truth."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ORDER = 10


def _synth(args: argparse.Namespace) -> int:
    from dprm.data.synth import write_world

    presets = [p for p in args.preset.split(",") if p]
    for preset in presets:
        out = Path(args.out) if len(presets) == 1 else Path(args.out) / preset
        start = time.perf_counter()
        written = write_world(
            out,
            preset,
            size=args.size,
            seed=args.seed,
            hidden_dim=args.hidden_dim,
            progress=not args.quiet,
        )
        if not args.quiet:
            print(
                f"{preset}: wrote {', '.join(str(p) for p in written.values())} in {time.perf_counter() - start:.1f}s"
            )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from dprm.data.synth import SIZES, preset_names

    parser = sub.add_parser(
        "synth",
        help="write a synthetic world (calibration + best-of-N sets with known truth)",
        description=(
            "Write OUT/{id,ood}/calib (calibration sets) and OUT/{id,ood}/bon (best-of-N sets) for "
            "a synthetic generator x PRM world whose true distribution of p given h is known in "
            "closed form (true_* columns). In distribution: MATH-500-like; out of distribution: "
            "AIME-like (harder, shifted, 60 questions)."
        ),
    )
    parser.add_argument(
        "--preset",
        required=True,
        help="GENERATOR__PRM or 'demo' (comma-separate several; each then goes to OUT/PRESET). "
        f"Known: {', '.join(preset_names())}",
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument(
        "--seed", type=int, default=None, help="world seed (default: derived from the preset)"
    )
    parser.add_argument(
        "--size",
        choices=sorted(SIZES),
        default=None,
        help="world size (default: paper; demo for --preset demo)",
    )
    parser.add_argument(
        "--hidden-dim",
        type=int,
        default=None,
        help="override the hidden dimension (paper size: 3584)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(func=_synth)
