"""``dprm ias``: instance-adaptive best-of-N sweeps on a BoN set (contract, docs/design.md §4)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dprm.cli._common import (
    add_output_flags,
    add_progress_flags,
    add_threads_flag,
    apply_threads,
    check_out,
    integer_at_least,
    unit_interval,
)

#: every file ``dprm ias`` writes into --out, and what it holds (the help lists them)
OUTPUT_FILES = {
    "ias.csv": "method, sweep, C, level, cost, accuracy, accuracy_mc (one row per point)",
    "ias_full.csv": "ias.csv plus accuracy_mc_se, cost_mc (Monte Carlo mean draws / n_max), "
    "n_questions",
    "budgets.parquet": "per-question budget n (question_id, method, sweep, C, level, n); for the "
    "beta sweep n is the cap N_i",
    "uniform.csv": "reference: the same n for every question (plain best-of-n), exact",
    "ias_meta.json": "settings, inputs, column meanings, version",
}

COLUMN_DOC = {
    "method": "calibrator display name (base = the raw PRM score; names as in dprm evaluate)",
    "sweep": "C (target sweep), tau (quantile-level sweep at C=0.99) or beta (beta-threshold early stopping, cap at C=0.9)",
    "C": "target probability of at least one correct candidate",
    "level": "tau (tau sweep) or beta (beta sweep); empty for the C sweep",
    "cost": "exact expected mean number of candidates drawn per question / n_max",
    "accuracy": "exact expectation over draws of the share of questions whose pick (highest uncalibrated PRM score among the drawn candidates) is correct",
    "accuracy_mc": "seeded Monte Carlo estimate of the same (mc_trials trials, common random draws across rows)",
}


def _ias(args: argparse.Namespace) -> int:
    out = check_out(args, directory=True)
    apply_threads(args)
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dprm.data import read_bon_set
    from dprm.evaluation import model_names
    from dprm.ias import BUDGET_COLUMNS, SUMMARY_COLUMNS, Pools, run_ias, uniform_curve
    from dprm.io import atomic_dir
    from dprm.models import load

    bon = read_bon_set(args.bon)
    loaded = [(Path(m).name, load(m)) for m in args.model]
    names = model_names(loaded)
    models = {name: m for name, (_, m) in zip(names, loaded, strict=True) if name != "base"}
    summary, budgets = run_ias(
        bon,
        models,
        beta=args.beta,
        n_max=args.n_max,
        mc_trials=args.mc_trials,
        seed=args.seed,
        greedy=args.greedy,
    )
    with atomic_dir(out) as tmp:
        summary[SUMMARY_COLUMNS].to_csv(tmp / "ias.csv", index=False)
        summary.to_csv(tmp / "ias_full.csv", index=False)
        pq.write_table(
            pa.Table.from_pandas(budgets[BUDGET_COLUMNS], preserve_index=False),
            tmp / "budgets.parquet",
        )
        uniform_curve(Pools.from_bon(bon), n_max=args.n_max).to_csv(
            tmp / "uniform.csv", index=False
        )
        _write_meta(tmp / "ias_meta.json", args, bon, names)
    if not args.quiet:
        c_rows = summary[summary["sweep"] == "C"]
        for method, grp in c_rows.groupby("method", sort=False):
            pts = ", ".join(
                f"C={c:g}: {a:.3f}@{x:.3f}"
                for c, a, x in zip(grp["C"], grp["accuracy"], grp["cost"], strict=True)
            )
            print(f"{method:>12}  accuracy@cost  {pts}")
        print(f"wrote {out / 'ias.csv'} ({len(summary)} rows) and {out / 'budgets.parquet'}")
    return 0


def _write_meta(path: Path, args: argparse.Namespace, bon, names: list[str]) -> None:
    from dprm import __version__
    from dprm.io import write_json

    write_json(
        path,
        {
            "bon": str(bon.path),
            "models": {name: str(Path(args.model[i])) for i, name in enumerate(names)},
            "beta": args.beta,
            "n_max": args.n_max,
            "mc_trials": args.mc_trials,
            "seed": args.seed,
            "greedy": args.greedy,
            "n_questions": len(bon),
            "columns": COLUMN_DOC,
            "extra_files": {
                name: OUTPUT_FILES[name]
                for name in ("ias_full.csv", "uniform.csv", "budgets.parquet")
            },
            "dprm_version": __version__,
        },
    )


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "ias",
        help="instance-adaptive best-of-N: C, tau and beta sweeps (exact + Monte Carlo)",
        description=(
            "Allocate a per-question sample budget with Base (the raw PRM score), each --model "
            "(QR: point rule at Q(beta); full-distribution calibrators: the mixture rule over 100 "
            "mid-point levels) and pick the candidate with the highest uncalibrated PRM score. "
            "'accuracy' is the exact expectation over draws; 'accuracy_mc' a seeded Monte "
            "Carlo.\n\nWrites the directory OUT (atomically, all files or none):\n"
            + "\n".join(f"  {name:<16} {what}" for name, what in OUTPUT_FILES.items())
        ),
    )
    parser.add_argument("--bon", required=True, help="best-of-N set directory")
    parser.add_argument(
        "--model", action="append", default=[], help="calibrator directory (repeatable)"
    )
    add_output_flags(parser, "output directory", metavar="DIR")
    parser.add_argument(
        "--beta",
        type=unit_interval,
        default=0.1,
        help="QR's quantile level for the point rule (default 0.1)",
    )
    parser.add_argument(
        "--n-max", type=integer_at_least(1), default=64, help="maximum budget N_max (default 64)"
    )
    parser.add_argument(
        "--mc-trials",
        type=integer_at_least(0),
        default=100,
        help="Monte Carlo trials (default 100; 0 skips)",
    )
    parser.add_argument("--seed", type=int, default=0, help="Monte Carlo seed (default 0)")
    parser.add_argument(
        "--greedy",
        action="store_true",
        help="also write sweep='greedy' rows: at each C, the C rule's total budget spent on the "
        "largest marginal gains of the same success curves (optimal for them; beyond the paper, "
        "see docs/calibrators.md)",
    )
    add_threads_flag(parser)
    add_progress_flags(parser)
    parser.set_defaults(func=_ias)
