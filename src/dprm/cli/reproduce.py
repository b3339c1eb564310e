"""``dprm reproduce``: the paper's experiments end to end on a preset grid, resumable."""

from __future__ import annotations

import argparse

ORDER = 70


def _reproduce(args: argparse.Namespace) -> int:
    from dprm.config import parse_overrides
    from dprm.report.reproduce import reproduce, resolve

    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    overrides: dict[str, dict[str, str]] = {}
    for key, value in parse_overrides(args.overrides).items():
        method, dot, name = key.partition(".")
        if not dot:
            from dprm.config import ConfigError

            raise ConfigError(
                f"--set {key}={value}: expected METHOD.KEY=VALUE, e.g. ot.max_steps=500"
            )
        overrides.setdefault(method, {})[name] = value
    config = resolve(
        args.preset,
        methods=methods,
        seeds=args.seeds,
        overrides=overrides,
        keep_worlds=True if args.keep_worlds else None,
        jobs=args.jobs if args.jobs is not None else _default_jobs(args.preset),
    )
    reproduce(
        args.out, config, progress=not args.quiet, log=(lambda s: None) if args.quiet else print
    )
    return 0


def _default_jobs(preset: str) -> int:
    import os

    return 2 if preset == "demo" and (os.cpu_count() or 1) >= 2 else 1


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "reproduce",
        help="synth -> train -> evaluate -> ias -> tables, figures and report.md (resumable)",
        description=(
            "Run the paper's experiments on a synthetic grid: 'demo' (2 generators x Qwen-PRM, ID + "
            "OOD, 1 seed, a few minutes on 2 CPU cores) or 'paper' (6 generators x 3 PRMs x ID/OOD x "
            "3 seeds at 3584 dims; hours). Writes OUT/report.md (figures and tables embedded), "
            "OUT/results.json (every number), OUT/tables, OUT/figures and OUT/run.json. Finished "
            "units are recorded in OUT/state.json: rerun the same command to resume."
        ),
    )
    parser.add_argument("--preset", choices=["demo", "paper"], required=True, help="grid to run")
    parser.add_argument("--out", required=True, help="output directory (resumed if it exists)")
    parser.add_argument(
        "--methods",
        default=None,
        help="comma-separated calibrators to train (default: every trainable method in the "
        "registry among ot, qr, mono, binomial, isotonic, platt, conformal)",
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="training seeds per method (demo: 1, paper: 3)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="METHOD.KEY=VALUE",
        action="append",
        default=[],
        help="training override for one method (repeatable), e.g. --set ot.max_steps=500",
    )
    parser.add_argument(
        "--keep-worlds",
        action="store_true",
        help="keep the synthetic worlds (paper deletes each after use)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="training and evaluation units run in parallel worker processes, torch threads split "
        "between them (default: 2 for demo when there are >= 2 CPU cores, else 1)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    parser.set_defaults(func=_reproduce)
