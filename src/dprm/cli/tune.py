"""``dprm tune``: per-method hyper-parameter search of the gradient-trained calibrators."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from dprm.cli._common import (
    add_output_flags,
    add_progress_flags,
    add_threads_flag,
    add_verify_inputs_flag,
    apply_threads,
    check_out,
    claim_run_folder,
    input_paths,
    integer_at_least,
    show_progress,
)

COMMAND = "tune"

#: the methods tuned when --methods is not given (dprm.models.tune.TUNED_METHODS; not imported
#: here so that building the parser stays free of torch)
DEFAULT_METHODS = "ot,qr,mono,binomial"
#: dprm.models.tune.OBJECTIVES and DEFAULT_OBJECTIVE, for the same reason (a test ties them)
OBJECTIVES, DEFAULT_OBJECTIVE = ("wql", "checkpoint"), "wql"


def _tune(args: argparse.Namespace) -> int:
    inputs = input_paths(args, "--data")
    if args.overwrite:  # only a folder dprm wrote is replaced (once every input is checked)
        out = check_out(args, directory=True, resumable=True, inputs=inputs)
    else:  # a new or empty folder, or one `dprm tune` made (resumed); locked till the end
        out = claim_run_folder(args.out, COMMAND, inputs=inputs)
    apply_threads(args)
    from dprm.data import read_calibration_set
    from dprm.models.tune import TuneSettings, check_request, tune

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    settings = TuneSettings(
        trials=args.trials, seed=args.seed, max_steps=args.max_steps, objective=args.objective
    )
    check_request(methods, args.select, settings)
    data = read_calibration_set(args.data)
    if args.overwrite:  # everything checked: now the earlier search may go
        _discard(out)
    best = tune(
        data,
        out,
        methods=methods,
        settings=settings,
        select=args.select,
        restart=args.overwrite,
        jobs=args.jobs,
        threads=args.threads or 0,
        progress=show_progress(args),
    )
    if not args.quiet:
        for method, entry in best["methods"].items():
            trials = entry["trials"]
            score = entry.get("validation", {}).get(args.select)
            shown = "-" if score is None else f"{score:.4f}"
            print(
                f"dprm tune: {method}: {trials['complete']} complete, {trials['pruned']} pruned; "
                f"validation {args.select} {shown}"
                + (f" ({entry['error']})" if "error" in entry else "")
            )
            note = refit_note(method, entry)
            if note:
                print(f"dprm tune: {method}: {note}")
        print(f"dprm tune: best on validation {args.select}: {best['best_method']} -> {out}")
    return 0


def _discard(out: Path) -> None:
    """Remove an earlier search in ``out`` and mark the emptied folder as this command's; a
    symlinked ``out`` keeps its link, the folder it names is the one replaced."""
    from dprm.io import write_marker

    target = Path(os.path.realpath(out))
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    write_marker(out, COMMAND)


#: a refit within this of its trial's score is the same model up to float rounding
SAME_SCORE = 5e-4


def refit_note(method: str, entry: dict) -> str | None:
    """Why the refitted calibrator's score differs from its best trial's (None: no scores).

    The trial and the refit use the same settings, seed and 80/20 split; they differ in what
    :data:`dprm.models.tune.TRIAL_ONLY` changes for trials only (``ot``: one map instead of the
    ensemble) and in that trials train on the split standardised once in float32 while the
    refit reads the raw set (rounding moves the path of training a little).
    """
    from dprm.models.tune import TRIAL_ONLY

    value, refit = entry.get("value"), entry.get("refit_value")
    if value is None or refit is None:
        return None
    metric = entry.get("metric", "score")
    scores = f"best trial {entry.get('trial')} {metric} {value:.4f}, refit {refit:.4f}"
    trial_only = TRIAL_ONLY.get(method, {})
    if trial_only:
        changed = ", ".join(f"{k}={v}" for k, v in trial_only.items())
        return (
            f"{scores}: trials ran with {changed} (for speed), the refit with the method's own "
            "setting; same parameters, seed and split otherwise"
        )
    if abs(refit - value) <= SAME_SCORE:
        return f"{scores}: the same model up to float rounding"
    return (
        f"{scores}: same parameters, seed and split; the trial trained on the split "
        "standardised once, the refit on the raw set, and float rounding moves training's path"
    )


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "tune",
        description=(
            "Hyper-parameter search (Optuna: seeded TPE sampler, median pruning) of the "
            "gradient-trained calibrators on one calibration set, with the same number of "
            "trials for every method. Trials are scored on the validation questions of the "
            "set's own 80/20 split by question (seed 42), by the validation WQL of the "
            "returned model (default) or (--objective checkpoint) by the trainer's checkpoint "
            "score; "
            "pass the training split (W/train/calib), never a test split. Writes OUT/study.db "
            "(the studies: rerunning the same command resumes a killed search without "
            "repeating finished trials), OUT/best.json (per method: best parameters, scores, "
            "trial counts), OUT/trials.csv and OUT/METHOD/ (the calibrator refitted with the "
            "best parameters). A search whose data changed since it ran (by content, see "
            "docs/cli.md) or whose settings differ is refused; --overwrite discards an earlier "
            "search in OUT."
        ),
    )
    parser.add_argument("--data", required=True, help="calibration set directory (training split)")
    add_output_flags(parser, "search directory", metavar="DIR")
    parser.add_argument(
        "--methods", default=DEFAULT_METHODS, help="comma-separated methods to tune"
    )
    parser.add_argument(
        "--trials",
        type=integer_at_least(1),
        default=50,
        help="finished trials (complete + pruned) per method",
    )
    parser.add_argument("--seed", type=int, default=0, help="training and sampler seed")
    parser.add_argument(
        "--max-steps",
        type=integer_at_least(0),
        default=0,
        help="step cap of every trial and tuned model (default: 0, each method's own max_steps)",
    )
    parser.add_argument(
        "--select",
        choices=["wql", "brier", "calibration_area"],
        default="wql",
        help="validation score best.json's best_method is chosen by",
    )
    parser.add_argument(
        "--objective",
        choices=list(OBJECTIVES),
        default=DEFAULT_OBJECTIVE,
        help="what every method's trials are scored by on the validation questions: the "
        "WQL at 11 levels of the returned model (default: %(default)s) or the trainer's own "
        "checkpoint score (calibration area; count NLL for binomial), which picked "
        "near-marginal ot settings on the development worlds (docs/calibrators.md); a search "
        "is resumed only with its own",
    )
    parser.add_argument(
        "--jobs",
        type=integer_at_least(1),
        default=1,
        help="methods searched in parallel processes (results do not depend on it)",
    )
    add_threads_flag(parser)
    add_progress_flags(parser)
    add_verify_inputs_flag(parser)
    parser.set_defaults(func=_tune)
