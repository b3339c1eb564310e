"""What ``dprm generate`` and ``dprm rollout`` share: the stages that sample from a generator and grade.

``generate`` samples and grades n responses per question (trajectories); ``rollout`` continues
every trajectory prefix n times and grades the continuations (labels with counts). Both share
the sampling and grading flags, the fingerprint that lets a finished shard be skipped before
the generator loads, and the run with a grading pool. See :mod:`dprm.cli._stage`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from dprm.cli._names import GENERATION_BACKENDS
from dprm.cli._stage import input_id, say, skip


def add_sampling_flags(parser: argparse.ArgumentParser, n_default: int, n_help: str) -> None:
    """Generator, sampling (Park et al.'s defaults) and grading flags."""
    group = parser.add_argument_group("sampling (Park et al.'s defaults)")
    group.add_argument("--model", required=True, help="generator: local directory or hub id")
    group.add_argument(
        "--backend",
        default="transformers",
        choices=GENERATION_BACKENDS,
        help="sampling backend: in-process (transformers, vllm) or a served model (openai: an "
        "OpenAI-compatible server at --base-url serving --model)",
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
        help="prompt+completion limit (default: the model's; vLLM: at most 4096)",
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
    group.add_argument(
        "--enforce-eager",
        action="store_true",
        help="vLLM: no compilation or CUDA graphs (a faster start, slower steps)",
    )
    add_server_flags(parser)
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


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of ``--backend openai`` (a generator served behind an OpenAI-compatible API)."""
    group = parser.add_argument_group("served generator (--backend openai)")
    group.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="the server's API root, e.g. http://127.0.0.1:8000/v1 (requests go to URL/completions)",
    )
    group.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help="environment variable holding the API key (sent as a bearer token, never printed)",
    )
    group.add_argument(
        "--max-in-flight", type=int, default=None, help="requests open at a time (default 16)"
    )
    group.add_argument(
        "--max-attempts",
        type=int,
        default=None,
        help="tries per request (default 6); 408/429/5xx and connection errors are retried "
        "with exponential backoff and jitter",
    )
    group.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR_OR_ID",
        help="tokenizer for prompt lengths and end-of-turn tokens (default: the model name, "
        "when readable here)",
    )


def _transformers_options(args: argparse.Namespace) -> dict:
    return dict(device=args.device, dtype=args.dtype, max_model_len=args.max_model_len)


def _vllm_options(args: argparse.Namespace) -> dict:
    from dprm.cli._common import require_vllm

    require_vllm()
    return dict(
        tensor_parallel_size=args.tensor_parallel_size,
        enable_prefix_caching=not getattr(args, "no_prefix_caching", False),
        seed=getattr(args, "seed", 42),
        max_model_len=args.max_model_len,
        dtype=args.dtype or "auto",
        gpu_memory_utilization=args.gpu_memory_utilization,
        enforce_eager=getattr(args, "enforce_eager", False),
    )


def server_options(args: argparse.Namespace) -> dict:
    """The served generator's options that were given (the others keep the engine's defaults)."""
    options = dict(
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        max_in_flight=args.max_in_flight,
        max_attempts=args.max_attempts,
        tokenizer=args.tokenizer,
    )
    return {k: v for k, v in options.items() if v is not None}


def _openai_options(args: argparse.Namespace) -> dict:
    return server_options(args) | {"max_model_len": args.max_model_len}


#: ``--backend`` -> the generator's options from the parsed flags
BACKEND_OPTIONS: dict[str, Callable[[argparse.Namespace], dict]] = {
    "transformers": _transformers_options,
    "vllm": _vllm_options,
    "openai": _openai_options,
}


def check_backend_flags(args: argparse.Namespace) -> None:
    """``--backend openai`` needs ``--base-url``; the server flags need ``--backend openai``."""
    from dprm.config import ConfigError

    if args.backend == "openai":
        if not args.base_url:
            raise ConfigError(
                "--backend openai needs --base-url URL (e.g. http://127.0.0.1:8000/v1)"
            )
        from dprm.llm.openai_engine import check_base_url, read_api_key

        check_base_url(args.base_url)
        read_api_key(args.api_key_env)
        for flag in ("max_in_flight", "max_attempts"):
            if getattr(args, flag) is not None and getattr(args, flag) < 1:
                raise ConfigError(
                    f"--{flag.replace('_', '-')} {getattr(args, flag)}: expected >= 1"
                )
        return
    server_flags = ("base_url", "api_key_env", "max_in_flight", "max_attempts", "tokenizer")
    given = [f for f in server_flags if getattr(args, f) is not None]
    if given:
        flags = ", ".join("--" + f.replace("_", "-") for f in given)
        raise ConfigError(
            f"{flags}: only --backend openai reads them (--backend is {args.backend})"
        )


def backend_options(args: argparse.Namespace) -> dict:
    """The options of ``args.backend``'s generator (flags checked first)."""
    check_backend_flags(args)
    return BACKEND_OPTIONS[args.backend](args)


def sampling_config(args: argparse.Namespace):
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


def load_generator_for(args: argparse.Namespace):
    from dprm.llm.generate import load_generator

    return load_generator(args.backend, args.model, **backend_options(args))


def sampling_meta(args: argparse.Namespace, sampling) -> dict:
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


def run_stage(
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
        source: the input file (its identity and content, and the generator's, go into the
            fingerprint).
        inputs: the input selection (``--limit`` / ``--responses``) for the fingerprint.
        meta: the provenance written with the output.
        full_fingerprint: input fingerprint -> the stage's full fingerprint (with its settings).
        run: ``run(generator, pool, **options)`` runs the stage for one shard.

    Returns:
        The exit code: 0 (a shard already finished is skipped before loading the generator).
    """
    from dprm.llm.grading import GradingPool, require_grader, timeout_fingerprint
    from dprm.llm.shard import Shard, check_finished, output_path

    shard = args.shard or Shard()
    fingerprint = {
        **input_id(source, args.model),
        **inputs,
        **{k: meta[k] for k in ("generator", "backend", "template")},
        **timeout_fingerprint(args.grader_timeout),  # a longer one can grade answers right
    }
    final = output_path(args.out, shard)
    if check_finished(
        final, {**full_fingerprint(fingerprint), "shard": str(shard)}, args.overwrite
    ):
        return skip(final, stage, args.quiet)
    require_grader()  # before loading the generator: a missing grader is one line, not a run
    generator = load_generator_for(args)
    with GradingPool(args.grader_workers, args.grader_timeout) as pool:
        path, _ = run(
            generator, pool, shard=shard, fingerprint=fingerprint, meta=meta,
            per_part=args.questions_per_part, overwrite=args.overwrite, progress=not (args.no_progress or args.quiet),
        )  # fmt: skip
    say(args, f"{stage}: wrote {path}")
    return 0
