"""``dprm evaluate``: calibration metrics of Base and trained calibrators (contract)."""

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
    warn_provenance,
)


def _evaluate(args: argparse.Namespace) -> int:
    out = check_out(args, directory=False, inputs=input_paths(args, "--data", "--model"))
    apply_threads(args)
    from dprm.data import read_calibration_set
    from dprm.evaluation import evaluate, model_names
    from dprm.io import strict_jsonable, write_json
    from dprm.models import load

    data = read_calibration_set(args.data)
    loaded = [(Path(m).name, load(m)) for m in args.model]
    for _, model in loaded:
        warn_provenance(args, model, data.meta, args.data)
    models = dict(zip(model_names(loaded), (m for _, m in loaded), strict=True))
    check_hidden_dim(models.values(), data.hidden_dim, args.data)
    results = evaluate(data, models)
    shift = _shift(args, data, models)
    if shift is not None:
        for row in results.values():
            row.update(shift)
    write_json(out, results)
    if not args.quiet:
        print(metrics_table(strict_jsonable(results)))
        for line in flag_lines(results, shift):
            print(line)
        print(f"dprm evaluate: every metric, as JSON -> {out}")
    return 0


def _shift(args: argparse.Namespace, data, models: dict) -> dict | None:
    """The shift score of ``--data`` against the training data (``--train-data``, else the
    first model's recorded training set when it is readable); None when there is none."""
    from dprm.data import read_calibration_set
    from dprm.ias.shift import calibration_shift

    path = args.train_data
    if path is None:
        recorded = [m.info.get("data_path") for m in models.values() if m.info.get("data_path")]
        path = next((p for p in recorded if Path(p).is_dir()), None)
        if path is None:
            return None
    train = read_calibration_set(path, check_hidden=False)
    if train.hidden_dim != data.hidden_dim:
        return None
    return calibration_shift(train, data) | {"shift_reference": str(path)}


def flag_lines(results: dict[str, dict], shift: dict | None) -> list[str]:
    """Warnings: each calibrator worse than the raw PRM beyond noise, and a shifted split."""
    from dprm.ias.allocation import SHIFT_AUC

    lines = []
    for method, row in results.items():
        if method != "base" and row.get("worse_than_raw"):
            lines.append(
                f"dprm evaluate: WARNING: {method} is worse than the raw PRM score here (Brier "
                f"{row['brier_vs_raw']:+.4f}, s.e. {row['brier_vs_raw_se']:.4f}): use the raw "
                "score on this data"
            )
    if shift is not None and shift["shifted"]:
        lines.append(
            f"dprm evaluate: WARNING: these inputs look shifted from the training data "
            f"{shift['shift_reference']} (shift AUC {shift['shift_auc']:.2f} > {SHIFT_AUC}): "
            "validation scores from training need not hold here"
        )
    return lines


#: the columns of the printed table: (JSON key, header); all lower is better
TABLE_COLUMNS = (
    ("brier", "Brier"),
    ("pos_brier", "PosBrier"),
    ("ece", "ECE"),
    ("wql", "WQL"),
    ("calibration_area", "cal.area"),
    ("crossing_rate", "crossing"),
    ("quantile_error_true", "err.true"),
)


def metrics_table(results: dict[str, dict]) -> str:
    """The metrics of each method as an aligned text table (lower is better; "-": undefined).

    A column is shown when any method has it (``err.true``: synthetic worlds only).
    """
    columns = [
        (k, h) for k, h in TABLE_COLUMNS if any(r.get(k) is not None for r in results.values())
    ]
    width = max(len("method"), *(len(m) for m in results))
    lines = [f"{'method':<{width}}  " + "  ".join(f"{h:>9}" for _, h in columns)]
    for method, row in results.items():
        cells = ["-" if row.get(k) is None else f"{row[k]:.4f}" for k, _ in columns]
        lines.append(f"{method:<{width}}  " + "  ".join(f"{c:>9}" for c in cells))
    n = next(iter(results.values())).get("n")
    return "\n".join(lines) + (f"\n({n} rows; every metric: lower is better)" if n else "")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "evaluate",
        help="Brier, PosBrier, ECE, WQL, calibration area, crossing rate (+ truth errors)",
        description=(
            "Evaluate Base (the raw PRM score) and each --model on a calibration set. Writes a JSON "
            "object mapping method name -> {brier, pos_brier, neg_brier, ece, wql, calibration_area, "
            "crossing_rate, n} (null where undefined: strict JSON), plus quantile_error_true and crps_true when "
            "the set carries synthetic truth; brier_vs_raw / brier_vs_raw_se / worse_than_raw "
            "compare each with the raw PRM score on the same records (standard error clustered "
            "by question; a calibrator worse by more than one s.e. is flagged), and shift_auc / "
            "shifted score how unlike the training data the inputs look (flagged above 0.75)."
        ),
    )
    parser.add_argument("--data", required=True, help="calibration set directory")
    parser.add_argument(
        "--model", action="append", default=[], help="calibrator directory (repeatable)"
    )
    parser.add_argument(
        "--train-data",
        metavar="DIR",
        help="the calibration set the models trained on, for the shift check (default: the "
        "first model's recorded training set, when it exists)",
    )
    add_output_flags(parser, "output JSON file", metavar="FILE.json")
    add_threads_flag(parser)
    add_progress_flags(parser)
    parser.set_defaults(func=_evaluate)
