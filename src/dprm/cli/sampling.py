"""``dprm generate | rollout``: the pipeline stages that sample from a generator and grade.

``generate`` samples and grades n responses per question (trajectories); ``rollout`` continues
every trajectory prefix n times and grades the continuations (labels with counts). Both share
the sampling and grading flags, the fingerprint that lets a finished shard be skipped before
the generator loads, and the run with a grading pool. See :mod:`dprm.cli.pipeline`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from dprm.cli.pipeline import add_run_flags, add_stage_parser, base_meta, input_id, skip


def _add_sampling_flags(parser: argparse.ArgumentParser, n_default: int, n_help: str) -> None:
    """Generator, sampling (Park et al.'s defaults) and grading flags."""
    group = parser.add_argument_group("sampling (Park et al.'s defaults)")
    group.add_argument("--model", required=True, help="generator: local directory or hub id")
    group.add_argument(
        "--backend",
        default="transformers",
        choices=["transformers", "vllm"],
        help="sampling backend",
    )
    group.add_argument("--n", type=int, default=n_default, help=n_help)
    group.add_argument("--temperature", type=float, default=0.7, help="sampling temperature")
    group.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1 = off)")
    group.add_argument(
        "--top-k", type=int, default=0, help="keep the k most likely tokens (0 = off)"
    )
    group.add_argument(
        "--repetition-penalty",
        type=float,
        default=1.0,
        help="1.0 = off; a checkpoint's generation_config.json is never used",
    )
    group.add_argument("--max-new-tokens", type=int, default=2048, help="completion token limit")
    group.add_argument(
        "--seed", type=int, default=42, help="base seed; each prompt's seed derives from it"
    )
    group.add_argument(
        "--template",
        default="auto",
        choices=["auto", "qwen", "llama3"],
        help="chat format (auto: qwen if the model id says so)",
    )
    group.add_argument(
        "--boxed-first",
        action="store_true",
        help="Park's filter: draw 1.25n, keep boxed answers first, then n (labels no longer i.i.d.)",
    )
    group.add_argument(
        "--device", default=None, help="transformers device (default: cuda if available)"
    )
    group.add_argument(
        "--dtype",
        default=None,
        help="bfloat16 | float16 | float32 (default: bf16 on GPU, fp32 on CPU)",
    )
    group.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="prompt+completion limit (vLLM default 4096)",
    )
    group.add_argument(
        "--tensor-parallel-size", type=int, default=1, help="vLLM: GPUs per model replica"
    )
    group.add_argument(
        "--gpu-memory-utilization", type=float, default=0.9, help="vLLM: GPU memory share"
    )
    group.add_argument(
        "--no-prefix-caching", action="store_true", help="vLLM: turn prefix caching off"
    )
    grading = parser.add_argument_group("grading (math-verify in worker processes)")
    grading.add_argument(
        "--grader-timeout",
        type=float,
        default=5.0,
        help="hard seconds per graded item (timeout = wrong, counted)",
    )
    grading.add_argument("--grader-workers", type=int, default=2, help="grading worker processes")
    parser.add_argument(
        "--questions-per-part", type=int, default=8, help="questions per resumable part"
    )


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
        help="questions file (from `dprm questions`, or raw)",
    )
    p.add_argument("--limit", type=int, default=None, help="use only the first N questions")
    _add_sampling_flags(p, 8, "responses per question")
    add_run_flags(p, "trajectories .parquet")
    p.set_defaults(func=cmd_generate)

    p = add_stage_parser(
        subparsers,
        "rollout",
        help="Monte Carlo rollouts from every trajectory prefix -> labels with counts",
        description="For each trajectory split on blank lines and each k = 0..K (--max-steps): n rollouts "
        "continue from the first k steps; the continuation is graded; n_correct, n_rollouts and "
        "success_prob = n_correct/n_rollouts are stored. k = #steps is the complete trajectory (label = its "
        "own correctness, n_rollouts = 1); a prefix that already holds \\boxed{} gets no rollouts "
        "(--boxed-prefix grade: label = the committed answer's correctness; drop: no row). Park's MC "
        "script used k = 0..19 (--max-steps 19).",
    )
    p.add_argument(
        "--trajectories",
        required=True,
        type=Path,
        help="trajectories .parquet from `dprm generate`",
    )
    p.add_argument("--max-steps", type=int, default=20, help="largest prefix length k")
    p.add_argument(
        "--boxed-prefix",
        default="grade",
        choices=["grade", "drop"],
        help="what to do with prefixes that already hold a boxed answer",
    )
    p.add_argument(
        "--responses", type=int, default=None, help="use only the first N responses per question"
    )
    _add_sampling_flags(p, 8, "rollouts per prefix")
    add_run_flags(p, "labels .parquet")
    p.set_defaults(func=cmd_rollout)


def _sampling(args: argparse.Namespace):
    from dprm.llm.rollout import SamplingConfig

    return SamplingConfig(
        n=args.n,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        repetition_penalty=args.repetition_penalty,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        boxed_first=args.boxed_first,
        template=None if args.template == "auto" else args.template,
    )


def _generator(args: argparse.Namespace):
    from dprm.llm.generate import load_generator

    if args.backend == "vllm":
        opts = dict(
            tensor_parallel_size=args.tensor_parallel_size,
            enable_prefix_caching=not args.no_prefix_caching,
            seed=args.seed,
            max_model_len=args.max_model_len or 4096,
            dtype=args.dtype or "auto",
            gpu_memory_utilization=args.gpu_memory_utilization,
        )
    else:
        opts = dict(device=args.device, dtype=args.dtype, max_model_len=args.max_model_len)
    return load_generator(args.backend, args.model, **opts)


def _sampling_meta(args: argparse.Namespace, sampling) -> dict:
    from dataclasses import asdict

    from dprm.llm.grading import grader_info
    from dprm.llm.prompts import template_for

    return {
        "generator": args.model,
        "backend": args.backend,
        "template": sampling.template or template_for(args.model),
        "sampling": asdict(sampling),
        "seed": sampling.seed,
        **grader_info(),
        "grader_timeout_s": args.grader_timeout,
    }


def _run_stage(
    args: argparse.Namespace,
    stage: str,
    source: Path,
    inputs: dict,
    meta: dict,
    full_fingerprint: Callable[[dict], dict],
    run: Callable[..., tuple[Path, bool]],
) -> int:
    """What ``generate`` and ``rollout`` share once their input is read.

    Args:
        args: the parsed flags.
        stage: the subcommand (in messages).
        source: the input file (its identity goes into the fingerprint).
        inputs: the input selection (``--limit`` / ``--responses``) for the fingerprint.
        meta: the provenance written with the output.
        full_fingerprint: input fingerprint -> the stage's full fingerprint (with its settings).
        run: ``run(generator, pool, **options)`` runs the stage for one shard.

    Returns:
        The exit code: 0 (a shard already finished is skipped before loading the generator).
    """
    from dprm.llm.grading import GradingPool
    from dprm.llm.shard import Shard, check_finished, output_path

    shard = args.shard or Shard()
    fingerprint = {
        **input_id(source),
        **inputs,
        **{k: meta[k] for k in ("generator", "backend", "template")},
    }
    final = output_path(args.out, shard)
    if check_finished(
        final, {**full_fingerprint(fingerprint), "shard": str(shard)}, args.overwrite
    ):
        return skip(final, stage)
    generator = _generator(args)
    with GradingPool(args.grader_workers, args.grader_timeout) as pool:
        path, _ = run(
            generator, pool, shard=shard, fingerprint=fingerprint, meta=meta,
            per_part=args.questions_per_part, overwrite=args.overwrite, progress=not args.no_progress,
        )  # fmt: skip
    print(f"{stage}: wrote {path}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from dprm.llm.questions import read_questions
    from dprm.llm.rollout import generation_fingerprint, run_generation_stage

    sampling = _sampling(args)
    questions = read_questions(args.questions)
    if args.limit is not None:
        questions = questions.iloc[: args.limit]
    meta = {**base_meta(), **_sampling_meta(args, sampling), "questions_file": str(args.questions)}
    return _run_stage(
        args, "generate", args.questions, {"limit": args.limit}, meta,
        lambda fingerprint: generation_fingerprint(fingerprint, sampling),
        lambda generator, pool, **options: run_generation_stage(
            questions, generator, pool, args.out, sampling, **options
        ),
    )  # fmt: skip


def cmd_rollout(args: argparse.Namespace) -> int:
    import pandas as pd

    from dprm.llm.rollout import (
        RolloutConfig,
        check_trajectories,
        config_dict,
        rollout_fingerprint,
        run_rollout_stage,
    )
    from dprm.llm.shard import read_output_meta

    sampling = _sampling(args)
    config = RolloutConfig(max_steps=args.max_steps, boxed_prefix=args.boxed_prefix)
    if not args.trajectories.exists():
        raise FileNotFoundError(f"{args.trajectories}: trajectories file not found")
    trajectories = pd.read_parquet(args.trajectories)
    check_trajectories(trajectories, args.trajectories)
    if args.responses is not None:
        trajectories = trajectories[trajectories["response_id"] < args.responses]
    meta = {**base_meta(), **_sampling_meta(args, sampling), **config_dict(config),
            "trajectories_file": str(args.trajectories), "trajectories_meta": read_output_meta(args.trajectories)}  # fmt: skip
    return _run_stage(
        args, "rollout", args.trajectories, {"responses": args.responses}, meta,
        lambda fingerprint: rollout_fingerprint(fingerprint, config, sampling),
        lambda generator, pool, **options: run_rollout_stage(
            trajectories, generator, pool, args.out, config, sampling, **options
        ),
    )  # fmt: skip
