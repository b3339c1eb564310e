"""``dprm generate``: first-pass trajectories per question, sampled and graded (resumable, sharded)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from dprm.cli._sampling import (
    add_sampling_flags,
    check_backend_flags,
    run_stage,
    sampling_config,
    sampling_meta,
)
from dprm.cli._stage import add_run_flags, add_stage_parser, base_meta, claim_stage_out

if TYPE_CHECKING:
    import pandas as pd


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_stage_parser(
        subparsers,
        "generate",
        help="sample trajectories (responses) per question and grade them",
        description="First pass: n responses per question from Park et al.'s prompt (Qwen or Llama-3 chat "
        "format, '## Step k:' instruction), T=0.7, 2048 new tokens, graded with math-verify. Output columns: "
        "question_id, response_id, question, answer, response, n_tokens, finish_reason, stop_reason, correct, grade_timeout. "
        "For a best-of-N pool use e.g. --n 64 and embed it with `dprm embed --bon`.",
    )
    p.add_argument(
        "--questions",
        required=True,
        type=Path,
        help="questions file (from `dprm questions`, or raw), or a packaged set's name "
        "(math500, math, math-park, aime24, aime25) as `dprm solve --questions` takes",
    )
    p.add_argument("--limit", type=int, default=None, help="use only the first N questions")
    add_sampling_flags(p, 8, "responses per question")
    add_run_flags(p, "trajectories .parquet")
    p.set_defaults(func=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    from dprm.llm.rollout import generation_fingerprint, run_generation_stage

    check_backend_flags(args)  # before --out is claimed
    claim_stage_out(args, False, "--questions", "--model")
    sampling = sampling_config(args)
    questions = read_question_source(args.questions)
    if args.limit is not None:
        questions = questions.iloc[: args.limit]
    meta = {**base_meta(), **sampling_meta(args, sampling), "questions_file": str(args.questions)}
    return run_stage(
        args, "generate", args.questions, {"limit": args.limit}, meta,
        lambda fingerprint: generation_fingerprint(fingerprint, sampling),
        lambda generator, pool, **options: run_generation_stage(
            questions, generator, pool, args.out, sampling, **options
        ),
    )  # fmt: skip


def read_question_source(source: Path) -> pd.DataFrame:
    """``--questions``: a questions file, else a named set (``math500``, ...) as ``dprm solve``
    and ``dprm questions`` take it; anything else fails naming the file and the known sets."""
    from dprm.llm.questions import load_questions, read_questions

    if Path(source).exists():
        return read_questions(source)
    return load_questions(str(source))
