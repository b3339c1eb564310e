"""``dprm questions``: normalise a question set, the first stage of the real-data pipeline."""

from __future__ import annotations

import argparse
from pathlib import Path

from dprm.cli._stage import add_quiet_flag, add_stage_parser, say


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_stage_parser(
        subparsers,
        "questions",
        help="normalise a question set to question_id, question, answer",
        description="Load MATH-500, the MATH test set (Park's every-10th subset: --every 10 or the name "
        "math-park), AIME 2024 or AIME 2025 (packaged with dprm: no network), Park's calibration set "
        "math500train (every 15th row of the MATH train split; from the hub), or a local "
        "JSONL/JSON/parquet file, and write question_id, question, answer (gold from \\boxed{} in "
        "the solution when there is no answer field). Instant, so it has no --shard: later stages "
        "shard by question.",
    )
    p.add_argument(
        "source",
        help="question file, or math500 | math | math-park | aime24 | aime25 (packaged) | "
        "math500train (hub)",
    )
    p.add_argument(
        "--hub", action="store_true", help="load a packaged set from the hub instead (online)"
    )
    p.add_argument("--out", required=True, type=Path, help="output .jsonl or .parquet")
    p.add_argument(
        "--every", type=int, default=1, help="keep every k-th question (Park's MATH subset: 10)"
    )
    p.add_argument("--offset", type=int, default=0, help="first question kept")
    p.add_argument("--limit", type=int, default=None, help="keep at most this many questions")
    p.add_argument(
        "--id-prefix", default=None, help="prefix of generated question ids (default: file stem)"
    )
    p.add_argument("--no-progress", action="store_true", help="hide progress bars (none here)")
    add_quiet_flag(p)
    p.set_defaults(func=cmd_questions)


def cmd_questions(args: argparse.Namespace) -> int:
    from dprm.cli._common import claim_output, input_paths, local_inputs
    from dprm.llm.questions import load_questions, write_questions

    # an existing --out is replaced (the command is instant), but never an input or a folder
    claim_output(
        args.out,
        overwrite=False,
        directory=False,
        resumable=True,
        inputs=local_inputs(input_paths(args, "source")),
    )
    frame = load_questions(
        args.source,
        every=args.every,
        offset=args.offset,
        limit=args.limit,
        id_prefix=args.id_prefix,
        hub=args.hub,
    )
    write_questions(args.out, frame)
    say(args, f"questions: wrote {len(frame)} questions to {args.out}")
    return 0
