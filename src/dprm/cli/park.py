"""``dprm import-park``: Park et al.'s calibration JSON -> labelled text prefixes."""

from __future__ import annotations

import argparse
from pathlib import Path

ORDER = 20


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _import_park(args: argparse.Namespace) -> int:
    from dprm.data.park import import_park

    labels = import_park(args.json, args.out, n_rollouts=args.n_rollouts)
    out = Path(args.out)
    out = out / "labels.parquet" if out.is_dir() else out
    n_responses = labels.groupby("question_id")["response_id"].nunique().sum()
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
    parser.add_argument(
        "--out",
        required=True,
        metavar="labels.parquet",
        help="output parquet file (written atomically)",
    )
    parser.add_argument(
        "--n-rollouts",
        type=_positive_int,
        metavar="N",
        default=8,
        help="Monte Carlo rollouts behind each success_prob (default: 8)",
    )
    parser.set_defaults(func=_import_park)
