"""``dprm train`` and ``dprm predict`` (contract)."""

from __future__ import annotations

import argparse
import sys

from dprm.cli._common import add_config_flags, parse_levels

ORDER = 30


def _train(args: argparse.Namespace) -> int:
    from dprm.config import parse_overrides
    from dprm.data import read_calibration_set
    from dprm.models.fit import CollapseError, fit

    data = read_calibration_set(args.data)
    overrides = parse_overrides(args.overrides)
    try:
        model = fit(
            args.method,
            data,
            config_path=args.config,
            overrides=overrides,
            seed=args.seed,
            progress=not args.quiet,
        )
    except (CollapseError, FloatingPointError) as err:
        print(f"dprm train: error: {err}; nothing written to {args.out}", file=sys.stderr)
        return 3
    run = {
        "method": args.method,
        "seed": args.seed,
        "data": str(args.data),
        "config_file": args.config,
        "overrides": overrides,
        "resolved_config": model.info.get("config", {}),
        "dprm_version": model.info.get("dprm_version"),
        "info": model.info,
        "argv": sys.argv,
    }
    model.save(args.out, extra_files={"history.json": model.history, "run.json": run})
    if not args.quiet:
        training = model.info.get("training", {})
        best = f", best step {training['best_step']}" if "best_step" in training else ""
        print(f"dprm train: {args.method} -> {args.out} ({model.info['fit_seconds']:.1f} s{best})")
    return 0


def _predict(args: argparse.Namespace) -> int:
    import numpy as np

    from dprm.data import read_calibration_set
    from dprm.io import DataError, atomic_path
    from dprm.models import load

    model = load(args.model)
    data = read_calibration_set(args.data)
    if data.hidden_dim != model.hidden_dim:
        raise DataError(
            args.data, f"hidden_dim {data.hidden_dim} does not match the model's {model.hidden_dim}"
        )
    levels = np.asarray(args.levels, dtype=np.float64)
    fixed = model.fixed_levels
    if fixed is not None:
        missing = [t for t in levels if np.abs(fixed - t).min() > 1e-6]
        if missing:
            raise DataError(
                args.model,
                f"{model.method} has quantiles only at its trained levels {fixed.tolist()}; "
                f"--levels asked for {missing}",
            )
    score = data.records["prm_score"].to_numpy(np.float32)
    hidden = data.hidden if model.uses_hidden else None
    n, chunk = len(score), args.batch_size
    with atomic_path(args.out) as tmp:
        # Stream into a memory-mapped .npy: the [N, L] output never has to fit in RAM twice.
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, len(levels)))
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            part = None if hidden is None else hidden[start:stop]
            out[start:stop] = model.quantiles(part, levels, score[start:stop], batch_size=chunk)
        out.flush()
        del out
    if not args.quiet:
        print(f"dprm predict: {n} x {len(levels)} quantiles -> {args.out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from dprm.models import REGISTRY

    methods = sorted(REGISTRY)
    parser = sub.add_parser(
        "train",
        help="fit a calibrator (" + ", ".join(methods) + ")",
        description=(
            "Fit a calibrator on a calibration set: 80/20 split by question (seed 42), hidden "
            "states standardised with training statistics, early stopping on the validation "
            "calibration area. Writes a calibrator directory: config.json + model.safetensors, "
            "history.json (per evaluation) and run.json (resolved config, version, seed, data, "
            "timing). A distribution calibrator that collapses to a constant map, or a loss "
            "that turns NaN, is an error (exit 3) and nothing is written."
        ),
    )
    parser.add_argument("--method", required=True, choices=methods, help="calibrator to fit")
    parser.add_argument("--data", required=True, help="calibration set directory")
    parser.add_argument("--out", required=True, help="output calibrator directory")
    parser.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    add_config_flags(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    parser.set_defaults(func=_train)

    parser = sub.add_parser(
        "predict",
        help="quantiles of a trained calibrator on a calibration set (.npy)",
        description=(
            "Write float32 quantiles [N, L] at --levels, row-aligned with records.parquet, to a "
            ".npy file. Hidden states are read in chunks."
        ),
    )
    parser.add_argument("--model", required=True, help="calibrator directory")
    parser.add_argument("--data", required=True, help="calibration set directory")
    parser.add_argument("--levels", required=True, type=parse_levels, help="e.g. 0,0.25,0.5")
    parser.add_argument("--out", required=True, help="output .npy file")
    parser.add_argument("--batch-size", type=int, default=8192, help="rows per chunk")
    parser.add_argument("--quiet", action="store_true", help="no summary line")
    parser.set_defaults(func=_predict)
