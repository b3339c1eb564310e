"""``dprm reproduce``: the paper's experiments end to end on a grid of worlds, resumable."""

from __future__ import annotations

import argparse

from dprm.cli._common import add_verify_inputs_flag


def _overrides(items: list[str]) -> dict[str, dict[str, str]]:
    """``["ot.max_steps=5"]`` -> ``{"ot": {"max_steps": "5"}}`` (values typed by the config class)."""
    from dprm.config import ConfigError, parse_overrides

    overrides: dict[str, dict[str, str]] = {}
    for key, value in parse_overrides(items).items():
        method, dot, name = key.partition(".")
        if not dot or not method or not name:
            raise ConfigError(
                f"--set {key}={value}: expected METHOD.KEY=VALUE, e.g. ot.max_steps=500"
            )
        overrides.setdefault(method, {})[name] = value
    return overrides


def _reproduce(args: argparse.Namespace) -> int:
    import dataclasses

    from dprm.cli._common import claim_run_folder, report_failures
    from dprm.orchestrate.grid import resolve
    from dprm.orchestrate.reproduce import reproduce

    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    # every override is checked against its method's config class here, before any work
    config = resolve(
        args.grid,
        methods=methods,
        seeds=args.seeds,
        overrides=_overrides(args.overrides),
        keep_worlds=True if args.keep_worlds else None,
        jobs=args.jobs if args.jobs is not None else _default_jobs(),
        worlds=[w.strip() for w in args.worlds.split(",") if w.strip()] if args.worlds else None,
        tune_trials=args.tune_trials,
    )
    if args.sequential:
        config = dataclasses.replace(config, ias_sequential=True)
    claim_run_folder(args.out, "reproduce")  # only a folder reproduce made; locked till the end
    outcome = reproduce(
        args.out,
        config,
        progress=not (args.quiet or args.no_progress),
        log=(lambda s: None) if args.quiet else print,
    )
    return report_failures("reproduce", outcome.failures, outcome.report)


def _default_jobs() -> int:
    import os

    return 2 if (os.cpu_count() or 1) >= 2 else 1


def register(sub: argparse._SubParsersAction) -> None:
    from dprm.cli._common import integer_at_least

    parser = sub.add_parser(
        "reproduce",
        help="synth -> train -> evaluate -> ias -> tables, figures and report.md (resumable)",
        description=(
            "Run the paper's experiments on a grid of synthetic worlds: 'demo' (2 generators x "
            "Qwen-PRM, ID + OOD, 1 seed, a few minutes on 2 CPU cores) or 'paper' (6 generators x "
            "3 PRMs x ID/OOD x 3 seeds at 3584 dims, Base / OT / QR; see --methods). Writes OUT/report.md (figures and "
            "tables embedded), OUT/results.json (every number), OUT/tables, OUT/figures and "
            "OUT/run.json. Finished units are recorded in OUT/state.json with a fingerprint of "
            "their inputs: rerun the same command to resume; a unit whose inputs changed (e.g. "
            "a new --set) runs again. Exits 1 when any unit failed (the report lists them)."
        ),
    )
    parser.add_argument(
        "--grid",
        "--preset",
        dest="grid",
        choices=["demo", "paper"],
        required=True,
        help="grid of worlds to run (--preset is the same flag)",
    )
    parser.add_argument(
        "--out",
        required=True,
        help="output directory: new, empty, or one reproduce made (then resumed)",
    )
    parser.add_argument(
        "--methods",
        default=None,
        help="comma-separated calibrators to train (default: demo every trainable method in the "
        "registry among ot, qr, mono, binomial, isotonic, platt, conformal; paper ot, qr)",
    )
    parser.add_argument(
        "--seeds",
        type=integer_at_least(1),
        default=None,
        metavar="N",
        help="how many training seeds per method, seeds 0..N-1 (demo: 1, paper: 3)",
    )
    parser.add_argument(
        "--tune-trials",
        type=integer_at_least(0),
        default=0,
        metavar="N",
        help="tune every gradient-trained method with N Optuna trials on each world's training "
        "split before training (dprm tune; the same N for every method; 0 = the defaults)",
    )
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="also score the sequential allocation in the 'does it pay?' rows: each "
        "calibrator's IAS unit adds 'auto-seq' rows (draws candidates one at a time and updates "
        "each question's posterior from the drawn candidates' calibrated estimates and final "
        "answers; Monte Carlo over draw orders). Slower than 'auto' (a policy loop per question "
        "and draw order); changing it re-runs only the calibrators' IAS units",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="METHOD.KEY=VALUE",
        action="append",
        default=[],
        help="training override for one method (repeatable), e.g. --set ot.max_steps=500; "
        "checked against the method's config before any work (unknown method or key: error)",
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
        "between them (default: 2 when there are >= 2 CPU cores, else 1)",
    )
    parser.add_argument(
        "--worlds",
        default=None,
        help="comma-separated worlds of the grid to run (default: all), e.g. "
        "r1-qwen-7b__qwen-prm to time one paper-size world",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    add_verify_inputs_flag(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.set_defaults(func=_reproduce)
