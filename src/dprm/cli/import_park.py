"""``dprm import-park``: Park et al.'s calibration JSON -> labelled text prefixes."""

from __future__ import annotations

import argparse
from pathlib import Path

from dprm.cli._common import (
    add_output_flags,
    add_progress_flags,
    claim_output,
    input_paths,
    integer_at_least,
)


def _import_park(args: argparse.Namespace) -> int:
    from dprm.data.park import import_park

    out = Path(args.out)
    out = out / "labels.parquet" if out.is_dir() else out
    claim_output(out, overwrite=args.overwrite, directory=False, inputs=input_paths(args, "--json"))
    labels = import_park(args.json, out, n_rollouts=args.n_rollouts)
    n_responses = labels.groupby("question_id")["response_id"].nunique().sum()
    if args.quiet:
        return 0
    print(
        f"wrote {len(labels)} labelled prefixes ({labels['question_id'].nunique()} question(s), "
        f"{n_responses} response(s)) to {out}"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``import-park`` subcommand."""
    parser = sub.add_parser(
        "import-park",
        help="import Park et al.'s calibration JSON as labelled prefixes (labels.parquet)",
        description=(
            "Read Park et al.'s public calibration data (a JSON list or JSON lines of records "
            "with question, reasoning_prefix, success_prob) and write labelled text prefixes "
            "for `embed`: question ids are hashes of the question text, steps count the "
            "blank-line-separated segments, and response ids are recovered from prefix chains."
        ),
    )
    parser.add_argument("--json", required=True, metavar="FILE", help="the JSON or JSONL file")
    add_output_flags(
        parser,
        "output parquet file, written atomically (a directory: DIR/labels.parquet)",
        metavar="labels.parquet",
    )
    parser.add_argument(
        "--n-rollouts",
        type=integer_at_least(1),
        metavar="N",
        default=8,
        help="Monte Carlo rollouts behind each success_prob (default: 8)",
    )
    add_progress_flags(parser)
    parser.set_defaults(func=_import_park)
