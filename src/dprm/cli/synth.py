"""``dprm synth``: write synthetic worlds with a known truth."""

from __future__ import annotations

import argparse
import time

from dprm.cli._common import (
    add_output_flags,
    add_progress_flags,
    check_out,
    claim_output,
    integer_at_least,
    show_progress,
)


def _synth(args: argparse.Namespace) -> int:
    from dprm.config import ConfigError
    from dprm.data.synth import preset_names, write_world
    from dprm.data.synth.fitted_presets import fitted_preset_names
    from dprm.io import atomic_dir, check_output

    presets = [p for p in args.preset.split(",") if p]
    known = preset_names() + fitted_preset_names()
    unknown = [p for p in presets if p not in known]
    if unknown or not presets:
        raise ConfigError(
            f"--preset {args.preset!r}: unknown preset(s) {unknown}; expected GENERATOR__PRM "
            f"or demo, one of {', '.join(known)}"
        )
    if len(presets) == 1:
        targets = [check_out(args, directory=True)]
    else:  # OUT holds one world per preset: OUT itself is never replaced, each world may be
        out = claim_output(args.out, overwrite=False, directory=True, resumable=True)
        targets = [out / preset for preset in presets]
        for target in targets:
            check_output(target, overwrite=args.overwrite, directory=True)
    for preset, target in zip(presets, targets, strict=True):
        start = time.perf_counter()
        with atomic_dir(target) as tmp:  # a world appears whole or not at all
            written = write_world(
                tmp,
                preset,
                size=args.size,
                seed=args.seed,
                hidden_dim=args.hidden_dim,
                progress=show_progress(args),
            )
        if not args.quiet:
            paths = ", ".join(str(target / p.relative_to(tmp)) for p in written.values())
            print(f"{preset}: wrote {paths} in {time.perf_counter() - start:.1f}s")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from dprm.cli._names import SYNTH_SIZES, synth_fitted_presets, synth_presets

    parser = sub.add_parser(
        "synth",
        help="write a synthetic world (calibration + best-of-N sets with known truth)",
        description=(
            "Write a synthetic generator x PRM world whose true distribution of p given h is\n"
            "known in closed form (true_* columns):\n\n"
            "  OUT/train/calib, OUT/train/bon  the training split: fit calibrators on train/calib;\n"
            "                                  train/bon teaches `dprm ias --train-bon` (auto)\n"
            "  OUT/id/calib, OUT/id/bon        held out, in distribution (MATH-500-like)\n"
            "  OUT/ood/calib, OUT/ood/bon      held out, out of distribution (AIME-like: harder,\n"
            "                                  shifted, 60 questions)\n\n"
            "calib: calibration sets (prefixes with labels); bon: best-of-N sets (pools)."
        ),
    )
    parser.add_argument(
        "--preset",
        required=True,
        help="GENERATOR__PRM or 'demo' (comma-separate several; each then goes to OUT/PRESET). "
        f"Known: {', '.join(synth_presets())}; best-of-N pools fitted to published "
        f"best-of-8 numbers: {', '.join(synth_fitted_presets())}",
    )
    add_output_flags(parser, "output directory", metavar="DIR")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="world seed (default: derived from the generator and the size, so the three PRM worlds of a generator share their rollouts)",
    )
    parser.add_argument(
        "--size",
        choices=list(SYNTH_SIZES),
        default=None,
        help="world size (default: paper; demo for --preset demo)",
    )
    parser.add_argument(
        "--hidden-dim",
        type=integer_at_least(1),
        default=None,
        help="override the hidden dimension (paper size: 3584)",
    )
    add_progress_flags(parser)
    parser.set_defaults(func=_synth)
