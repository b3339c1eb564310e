"""``dprm run RECIPE.toml``: a real-data run from questions to report, on one box or a cluster."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dprm.cli._common import add_verify_inputs_flag


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "run",
        description=(
            "Run every stage a recipe declares: questions -> first-pass generation -> rollouts + "
            "grading (or Park et al.'s released labels) -> PRM embedding -> BoN pools + embedding "
            "-> train -> evaluate -> IAS -> tables, figures and report.md (the same report as "
            "`dprm reproduce`). Finished units are recorded in OUT/state.json with a fingerprint "
            "of their inputs: rerun the same command to resume; a changed setting re-runs only "
            "what depends on it. Exits 1 when any unit failed (the report lists them; a "
            "calibrator its collapse guard refused is listed, not a failure). See "
            "docs/cluster.md."
        ),
    )
    parser.add_argument("recipe", help="recipe TOML file (see examples/park.toml)")
    parser.add_argument(
        "--executor",
        default="local",
        choices=["local", "ray", "slurm"],
        help="where units run: this machine, a Ray cluster ([ray] extra) or SLURM job arrays "
        "([slurm] extra)",
    )
    parser.add_argument(
        "--out", default=None, help="run directory (default: the recipe's [run] out)"
    )
    parser.add_argument(
        "--address",
        default=None,
        help="ray: cluster address ('auto' joins `ray start`; default: the recipe's, else a "
        "local instance)",
    )
    parser.add_argument(
        "--slurm-cluster",
        default=None,
        choices=["slurm", "local"],
        help="slurm: 'slurm' (default; needs sbatch on PATH) or 'local' (submitit's local "
        "executor: every task a process on this machine, for dry runs); overrides the recipe's "
        "[executor.slurm] cluster",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (stages, units, engines, devices) and what this machine lacks for "
        "it; run and write nothing",
    )
    parser.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the check of extras, GPU, hub / local paths and disk before any unit (e.g. "
        "to resume a run whose GPU stages finished elsewhere)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    add_verify_inputs_flag(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from dprm.cli._common import claim_run_folder, report_failures
    from dprm.recipe import load_recipe, run_recipe
    from dprm.runner.executors import check_executor

    recipe = load_recipe(args.recipe)
    options = {"address": args.address} if args.executor == "ray" and args.address else {}
    if args.executor == "slurm" and args.slurm_cluster:
        options["cluster"] = args.slurm_cluster
    if args.dry_run:
        return _dry_run(args, recipe, options)
    # an executor that cannot run here (no SLURM, no Ray) says so before --out is claimed
    check_executor(args.executor, recipe, **options)
    if not args.no_preflight:  # every requirement before any unit: one block, exit 2
        from dprm.recipe.preflight import missing_block, missing_requirements

        out_dir = Path(args.out if args.out is not None else recipe.run.out)
        missing = missing_requirements(recipe, args.executor, out_dir, executor_options=options)
        if missing:
            print(missing_block(args.recipe, missing), file=sys.stderr)
            return 2
    out = claim_run_folder(  # only a folder `dprm run` made, never the recipe; locked till the end
        args.out if args.out is not None else recipe.run.out, "run", [("RECIPE", args.recipe)]
    )
    outcome = run_recipe(
        recipe,
        out,
        executor=args.executor,
        progress=not (args.quiet or args.no_progress),
        log=(lambda s: None) if args.quiet else print,
        executor_options=options,
    )
    return report_failures("run", outcome.failures, outcome.report)


def _dry_run(args: argparse.Namespace, recipe, options: dict) -> int:
    """``--dry-run``: the plan and what this machine lacks for it; nothing runs or is written."""
    from dprm.recipe.preflight import missing_requirements, plan_lines

    out = Path(args.out if args.out is not None else recipe.run.out)
    print("\n".join(plan_lines(recipe, args.executor, out)))
    missing = missing_requirements(recipe, args.executor, out, executor_options=options)
    if missing:
        print(f"this machine lacks ({len(missing)}; a real run stops here with exit 2):")
        print("\n".join(m.line() for m in missing))
    else:
        print("preflight: every requirement is met here")
    return 0
