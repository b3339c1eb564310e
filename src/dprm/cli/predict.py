"""``dprm predict``: quantiles of a trained calibrator on unlabelled data."""

from __future__ import annotations

import argparse
from pathlib import Path

from dprm.cli._common import (
    add_output_flags,
    add_progress_flags,
    add_threads_flag,
    apply_threads,
    check_hidden_dim,
    check_out,
    input_paths,
    integer_at_least,
    parse_levels,
    warn_provenance,
)


def _predict(args: argparse.Namespace) -> int:
    out = check_out(args, directory=False, inputs=input_paths(args, "--model", "--data"))
    apply_threads(args)
    import numpy as np

    from dprm.data.contract import read_features
    from dprm.filesystem import reserved_memmap
    from dprm.io import DataError, atomic_path, read_json
    from dprm.models import load

    model = load(args.model)
    data = read_features(args.data)
    warn_provenance(args, model, read_json(Path(args.data) / "meta.json"), args.data)
    check_hidden_dim([model], data.hidden_dim, args.data)
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
    score = data.rows["prm_score"].to_numpy(np.float32)
    hidden = data.hidden if model.uses_hidden else None
    n, chunk = len(score), args.batch_size
    with atomic_path(out) as tmp:
        # Stream into a memory-mapped .npy: the [N, L] output never has to fit in RAM twice.
        # Its blocks are reserved first: a full disk is an OSError here, not a SIGBUS later.
        values = reserved_memmap(tmp, np.float32, (n, len(levels)))
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            part = None if hidden is None else hidden[start:stop]
            values[start:stop] = model.quantiles(part, levels, score[start:stop], batch_size=chunk)
        values.flush()
        del values
    if not args.quiet:
        print(f"dprm predict: {n} x {len(levels)} quantiles -> {out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "predict",
        help="quantiles of a trained calibrator on a calibration or best-of-N set (.npy)",
        description=(
            "Write float32 quantiles [N, L] at --levels to a .npy file, row-aligned with the "
            "rows of --data: records.parquet of a calibration-set-like directory (question_id, "
            "response_id, step, prm_score; labels not needed) or questions.parquet of a "
            "best-of-N set (one row per question: its question-only state). Hidden states are "
            "read in chunks."
        ),
    )
    parser.add_argument("--model", required=True, help="calibrator directory")
    parser.add_argument(
        "--data", required=True, help="calibration set (labels optional) or best-of-N set"
    )
    parser.add_argument("--levels", required=True, type=parse_levels, help="e.g. 0,0.25,0.5")
    add_output_flags(parser, "output .npy file", metavar="FILE.npy")
    parser.add_argument(
        "--batch-size", type=integer_at_least(1), default=8192, help="rows per chunk"
    )
    add_threads_flag(parser)
    add_progress_flags(parser)
    parser.set_defaults(func=_predict)
