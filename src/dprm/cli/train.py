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

#: ``--method auto``: the best tuned calibrator on validation (dprm.models.tune)
AUTO = "auto"


def _train(args: argparse.Namespace) -> int:
    # before any work: never discover it after training, never replace the data with a model
    out = check_out(args, directory=True, inputs=input_paths(args, "--data", "--config", "--tune"))
    apply_threads(args)
    from dprm.config import parse_overrides
    from dprm.data import read_calibration_set
    from dprm.io import strict_jsonable
    from dprm.models.fit import CollapseError, fit

    data = read_calibration_set(args.data)
    overrides = parse_overrides(args.overrides)
    method, auto = args.method, None
    if method == AUTO:
        method, overrides, auto = _auto(args, data, overrides)
    elif args.tune is not None:
        from dprm.config import ConfigError

        raise ConfigError("--tune is only read with --method auto")
    try:
        model = fit(
            method,
            data,
            config_path=args.config,
            overrides=overrides,
            seed=args.seed,
            progress=show_progress(args),
        )
    except (CollapseError, FloatingPointError) as err:
        print(f"dprm train: error: {err}; nothing written to {out}", file=sys.stderr)
        return 3
    if auto is not None:
        model.info["auto"] = auto
    run = {
        "method": method,
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
        chosen = f" (auto: best tuned on validation {auto['select']})" if auto else ""
        print(f"dprm train: {method}{chosen} -> {out} ({model.info['fit_seconds']:.1f} s{best})")
        if auto:
            print(auto_scores_text(auto))
            if method != "binomial":
                print("dprm train: auto picks for calibration tables; for IAS (ias, solve) "
                      "the recommendation is binomial (docs/calibrators.md)")  # fmt: skip
    return 0


def auto_scores_text(auto: dict) -> str:
    """The validation scores ``--method auto`` compared, lowest (chosen) first."""
    select = auto["select"]
    scored = sorted(
        auto["scores"].items(), key=lambda kv: (kv[1] is None, kv[1] if kv[1] is not None else 0)
    )
    lines = [f"dprm train: auto compared validation {select} (lower is better; {auto['source']}):"]
    for method, score in scored:
        shown = "-" if score is None else f"{score:.4f}"
        mark = "  <- chosen" if method == auto["chosen"] else ""
        lines.append(f"  {method:<10} {shown}{mark}")
    return "\n".join(lines)


def _auto(args: argparse.Namespace, data, overrides: dict) -> tuple[str, dict, dict]:
    """``--method auto``: the best tuned calibrator on validation and its parameters.

    Read from ``--tune DIR`` (a ``dprm tune`` search), else from a search of
    ``--tune-trials`` trials per method run now in a temporary directory (not resumable).
    """
    import tempfile

    from dprm.config import ConfigError
    from dprm.models.tune import TuneSettings, choose, read_best, tune

    if overrides or args.config:
        raise ConfigError("--method auto takes its settings from the search; drop --set/--config")
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
    auto = {
        "source": source,
        "select": select,
        "chosen": method,
        "scores": {m: e.get("validation", {}).get(select) for m, e in best["methods"].items()},
        "tune_data": best.get("data"),
        "trial": entry.get("trial"),
    }
    return method, dict(entry["overrides"]), auto


def register(sub: argparse._SubParsersAction) -> None:
    from dprm.cli._names import METHODS

    methods = list(METHODS)
    parser = sub.add_parser(
        "train",
        help="fit a calibrator (" + ", ".join(methods) + ")",
        description=(
            "Fit a calibrator on a calibration set: 80/20 split by question (seed 42), hidden "
            "states standardised with training statistics, early stopping on the validation "
            "calibration area. Writes a calibrator directory: config.json + model.safetensors, "
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
        choices=[*methods, AUTO],
        help="calibrator to fit; auto: the best tuned one on validation WQL (see --tune), the "
        "choice for calibration tables; for IAS (ias, solve) train binomial "
        "(docs/calibrators.md, 'One recommendation')",
    )
    parser.add_argument("--data", required=True, help="calibration set directory")
    add_output_flags(parser, "output calibrator directory", metavar="DIR")
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    parser.add_argument(
        "--tune",
        metavar="DIR",
        help="with --method auto: a `dprm tune` directory; its best method on validation is "
        "trained with its best parameters (without it a search runs first)",
    )
    parser.add_argument(
        "--tune-trials",
        type=integer_at_least(1),
        default=20,
        help="with --method auto and no --tune: trials per method of the search",
    )
    add_config_flags(parser)
    add_threads_flag(parser)
    add_progress_flags(parser)
    parser.set_defaults(func=_train)
