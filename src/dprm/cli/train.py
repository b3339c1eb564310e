"""``dprm train``: fit a calibrator on a calibration set."""

from __future__ import annotations

import argparse
import sys

from dprm.cli._common import (
    add_config_flags,
    add_output_flags,
    add_progress_flags,
    add_threads_flag,
    apply_threads,
    check_out,
    input_paths,
    integer_at_least,
    show_progress,
)

#: ``--method best-tuned``: the best tuned calibrator on validation (dprm.models.tune)
BEST_TUNED = "best-tuned"
#: earlier spellings of a ``--method`` value, still accepted (not listed in ``--help``)
METHOD_ALIASES = {"auto": BEST_TUNED}


def _method_name(value: str) -> str:
    """A ``--method`` value with an earlier spelling replaced by its name now."""
    return METHOD_ALIASES.get(value, value)


def _train(args: argparse.Namespace) -> int:
    # before any work: never discover it after training, never replace the data with a model
    out = check_out(args, directory=True, inputs=input_paths(args, "--data", "--config", "--tune"))
    apply_threads(args)
    from dprm.config import parse_overrides
    from dprm.data import read_calibration_set
    from dprm.io import strict_jsonable
    from dprm.models.do_no_harm import comparison_text
    from dprm.models.fit import CollapseError, fit

    data = read_calibration_set(args.data)
    overrides = parse_overrides(args.overrides)
    method, best_tuned = args.method, None
    if method == BEST_TUNED:
        method, overrides, best_tuned = _best_tuned(args, data, overrides)
    elif args.tune is not None:
        from dprm.config import ConfigError

        raise ConfigError(f"--tune is only read with --method {BEST_TUNED}")
    guarded = do_no_harm_applies(args.do_no_harm, args.method, method)
    try:
        model = fit(
            method,
            data,
            config_path=args.config,
            overrides=overrides,
            seed=args.seed,
            progress=show_progress(args),
            do_no_harm=guarded,
        )
    except (CollapseError, FloatingPointError) as err:
        print(f"dprm train: error: {err}; nothing written to {out}", file=sys.stderr)
        return 3
    if best_tuned is not None:
        model.info["best_tuned"] = best_tuned
    saved_method = model.method  # "base" when the do-no-harm rule replaced the fit
    run = {
        "method": saved_method,
        "fitted_method": method,
        "seed": args.seed,
        "data": str(args.data),
        "config_file": args.config,
        "overrides": overrides,
        "resolved_config": model.info.get("config", {}),
        "dprm_version": model.info.get("dprm_version"),
        "info": model.info,
        "argv": sys.argv,
    }
    extra = {"history.json": model.history, "run.json": run}
    # a full disk (OSError, safetensors' StorageFull) is one line from dprm.cli.main
    extra_json = {name: strict_jsonable(obj) for name, obj in extra.items()}
    model.save(out, extra_files=extra_json, overwrite=True)  # --out checked before training
    if not args.quiet:
        training = model.info.get("training", {})
        best = f", best step {training['best_step']}" if "best_step" in training else ""
        chosen = (
            f" ({BEST_TUNED}: best tuned on validation {best_tuned['select']})"
            if best_tuned
            else ""
        )
        stop = ""
        if training.get("stopped_early"):
            stop = f", stopped early at step {training['steps']}"
        print(
            f"dprm train: {method}{chosen} -> {out} ({model.info['fit_seconds']:.1f} s{best}{stop})"
        )
        if "small_data" in model.info:
            small = model.info["small_data"]
            settings = ", ".join(f"{k}={v}" for k, v in small["defaults"].items())
            print(f"dprm train: {small['n_train_questions']} training questions (<= "
                  f"{small['threshold']}): small-data defaults {settings}")  # fmt: skip
        if "versus_raw" in model.info:
            fell_back = saved_method != method
            print(comparison_text(method, model.info["versus_raw"], fell_back))
        refused = model.info.get("do_no_harm", {}).get("reason")
        if refused:
            print(f"dprm train: {method} refused ({refused}): saved the raw-score calibrator "
                  "(base) instead; use the raw score here")  # fmt: skip
        if best_tuned:
            print(best_tuned_scores_text(best_tuned))
            if method != "binomial":
                print(f"dprm train: {BEST_TUNED} picks for calibration tables; for IAS (ias, "
                      "solve) the recommendation is binomial (docs/calibrators.md)")  # fmt: skip
    return 0


#: ``--do-no-harm`` values; ``auto``: on for :data:`GUARDED_METHODS` and ``best-tuned``
DO_NO_HARM = ("auto", "on", "off")
#: the recommended calibrator (IAS), guarded under ``--do-no-harm auto``
GUARDED_METHODS = ("binomial",)


def do_no_harm_applies(setting: str, requested: str, method: str) -> bool:
    """Whether the fit falls back to the raw score when worse on validation (``--do-no-harm``)."""
    if setting == "auto":
        return requested == BEST_TUNED or method in GUARDED_METHODS
    return setting == "on"


def best_tuned_scores_text(best_tuned: dict) -> str:
    """The validation scores ``--method best-tuned`` compared, lowest (chosen) first."""
    select = best_tuned["select"]
    scored = sorted(
        best_tuned["scores"].items(),
        key=lambda kv: (kv[1] is None, kv[1] if kv[1] is not None else 0),
    )
    lines = [
        f"dprm train: {BEST_TUNED} compared validation {select} (lower is better; "
        f"{best_tuned['source']}):"
    ]
    for method, score in scored:
        shown = "-" if score is None else f"{score:.4f}"
        mark = "  <- chosen" if method == best_tuned["chosen"] else ""
        lines.append(f"  {method:<10} {shown}{mark}")
    return "\n".join(lines)


def _best_tuned(args: argparse.Namespace, data, overrides: dict) -> tuple[str, dict, dict]:
    """``--method best-tuned``: the best tuned calibrator on validation and its parameters.

    Read from ``--tune DIR`` (a ``dprm tune`` search), else from a search of
    ``--tune-trials`` trials per method run now in a temporary directory (not resumable).
    """
    import tempfile

    from dprm.config import ConfigError
    from dprm.models.tune import TuneSettings, choose, read_best, tune

    if overrides or args.config:
        raise ConfigError(
            f"--method {BEST_TUNED} takes its settings from the search; drop --set/--config"
        )
    if args.tune is not None:
        best = read_best(args.tune)
        source = str(args.tune)
    else:
        settings = TuneSettings(trials=args.tune_trials, seed=args.seed)
        with tempfile.TemporaryDirectory(prefix=".dprm-tune-") as tmp:
            best = tune(data, tmp, settings=settings, progress=show_progress(args))
        source = f"search of {args.tune_trials} trials per method"
    select = best.get("select", "wql")
    method = choose(best["methods"], select)
    if method is None:
        raise ConfigError(f"{source}: no tuned method has a validation {select}")
    entry = best["methods"][method]
    chosen = {
        "source": source,
        "select": select,
        "chosen": method,
        "scores": {m: e.get("validation", {}).get(select) for m, e in best["methods"].items()},
        "tune_data": best.get("data"),
        "trial": entry.get("trial"),
    }
    return method, dict(entry["overrides"]), chosen


def register(sub: argparse._SubParsersAction) -> None:
    from dprm.cli._names import METHODS

    methods = list(METHODS)
    parser = sub.add_parser(
        "train",
        help="fit a calibrator (" + ", ".join(methods) + ")",
        description=(
            "Fit a calibrator on a calibration set: 80/20 split by question (seed 42), hidden "
            "states standardised with training statistics, early stopping on the validation "
            "score (patience in steps: a run stops once the steps since its best checkpoint "
            "reach min(patience, patience_fraction x best step), defaults 250 and 1, i.e. by "
            "twice the kept step, or by twice a lower count NLL that the warm-up passed over "
            "(qr: or a lower WQL, patience_from_wql); ot: 400 "
            "and 0.5, by 1.5 times; --set patience=0 turns it off) and keeps the checkpoint with "
            "the lowest validation score (binomial from step 0; qr, mono and ot after a "
            "warm-up, docs/calibrators.md). With <= 50 training questions the defaults "
            "regularise (weight decay 1e-3, a smaller context network, binomial's warm-up). After fitting, the "
            "validation Brier of the calibrator, the raw PRM score and Platt is printed; under "
            "--do-no-harm a calibrator worse than the raw score beyond noise (more than one "
            "question-clustered standard error) is replaced by the raw-score calibrator "
            "(base), said so and recorded in config.json's info.do_no_harm. Writes a calibrator directory: config.json + model.safetensors, "
            "history.json (per evaluation) and run.json (resolved config, version, seed, data, "
            "timing). A distribution calibrator that collapses to a constant map, or a loss "
            "that turns NaN, is an error (exit 3) and nothing is written. An existing --out is "
            "refused unless --overwrite is given (then replaced only once training succeeded); "
            "training does not resume."
        ),
    )
    parser.add_argument(
        "--method",
        required=True,
        type=_method_name,
        choices=[*methods, BEST_TUNED],
        help=f"calibrator to fit; {BEST_TUNED}: the best tuned one on validation WQL (see --tune), the "
        "choice for calibration tables; for IAS (ias, solve) train binomial "
        "(docs/calibrators.md, 'One recommendation')",
    )
    parser.add_argument("--data", required=True, help="calibration set directory")
    add_output_flags(parser, "output calibrator directory", metavar="DIR")
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    parser.add_argument(
        "--tune",
        metavar="DIR",
        help=f"with --method {BEST_TUNED}: a `dprm tune` directory; its best method on validation is "
        "trained with its best parameters (without it a search runs first)",
    )
    parser.add_argument(
        "--tune-trials",
        type=integer_at_least(1),
        default=20,
        help=f"with --method {BEST_TUNED} and no --tune: trials per method of the search",
    )
    parser.add_argument(
        "--do-no-harm",
        choices=DO_NO_HARM,
        default="auto",
        help="replace a calibrator that is worse than the raw PRM score on validation (beyond "
        f"one standard error) by the raw-score calibrator; auto (default): for {BEST_TUNED} and "
        f"{', '.join(GUARDED_METHODS)}, the recommended methods; off: always keep the fit "
        "(e.g. to reproduce a paper's table)",
    )
    add_config_flags(parser)
    add_threads_flag(parser)
    add_progress_flags(parser)
    parser.set_defaults(func=_train)
