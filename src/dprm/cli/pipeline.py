"""``dprm questions | generate | rollout | embed | merge``: the real-data pipeline.

questions.jsonl -> generate -> trajectories.parquet -> rollout -> labels.parquet -> embed ->
calibration set (or, with ``--bon``, trajectories -> BoN set). Every compute stage takes
``--shard i/n`` (0-based), shows progress, resumes from its finished parts after a kill, writes
atomically, and skips a finished shard; ``dprm merge OUT`` joins ``OUT.shards/``. See
docs/pipeline.md. Heavy libraries (transformers, vLLM, math-verify) load only when a stage runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ORDER = 50


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    pass


def _shard_arg(text: str):
    from dprm.llm.shard import parse_shard

    try:
        return parse_shard(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _add_run_flags(parser: argparse.ArgumentParser, out_help: str) -> None:
    parser.add_argument("--out", required=True, type=Path, help=out_help)
    parser.add_argument(
        "--shard",
        default=None,
        type=_shard_arg,
        metavar="I/N",
        help="do only block I of N (0-based) of the questions; output goes to OUT.shards/ and "
        "`dprm merge OUT` joins the shards (SLURM: --shard $SLURM_ARRAY_TASK_ID/N)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an output made with other settings"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _add_sampling_flags(parser: argparse.ArgumentParser, n_default: int, n_help: str) -> None:
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
    p = subparsers.add_parser(
        "questions",
        help="normalise a question set to question_id, question, answer",
        description="Load MATH-500, the MATH test set (Park's every-10th subset: --every 10 or the name "
        "math-park), AIME 2024 or AIME 2025 from a local JSONL/JSON/parquet file (or a hub name when "
        "online) and write question_id, question, answer (gold from \\boxed{} in the solution when "
        "there is no answer field). Instant, so it has no --shard: later stages shard by question.",
        formatter_class=_Formatter,
    )
    p.add_argument(
        "source", help="question file, or math500 | math | math-park | aime24 | aime25 (hub)"
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
    p.set_defaults(func=cmd_questions)

    p = subparsers.add_parser(
        "generate",
        help="sample trajectories (responses) per question and grade them",
        description="First pass: n responses per question from Park et al.'s prompt (Qwen or Llama-3 chat "
        "format, '## Step k:' instruction), T=0.7, 2048 new tokens, graded with math-verify. Output columns: "
        "question_id, response_id, question, answer, response, n_tokens, finish_reason, correct, grade_timeout. "
        "For a best-of-N pool use e.g. --n 64 and embed it with `dprm embed --bon`.",
        formatter_class=_Formatter,
    )
    p.add_argument(
        "--questions",
        required=True,
        type=Path,
        help="questions file (from `dprm questions`, or raw)",
    )
    p.add_argument("--limit", type=int, default=None, help="use only the first N questions")
    _add_sampling_flags(p, 8, "responses per question")
    _add_run_flags(p, "trajectories .parquet")
    p.set_defaults(func=cmd_generate)

    p = subparsers.add_parser(
        "rollout",
        help="Monte Carlo rollouts from every trajectory prefix -> labels with counts",
        description="For each trajectory split on blank lines and each k = 0..K (--max-steps): n rollouts "
        "continue from the first k steps; the continuation is graded; n_correct, n_rollouts and "
        "success_prob = n_correct/n_rollouts are stored. k = #steps is the complete trajectory (label = its "
        "own correctness, n_rollouts = 1); a prefix that already holds \\boxed{} gets no rollouts "
        "(--boxed-prefix grade: label = the committed answer's correctness; drop: no row). Park's MC "
        "script used k = 0..19 (--max-steps 19).",
        formatter_class=_Formatter,
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
    _add_run_flags(p, "labels .parquet")
    p.set_defaults(func=cmd_rollout)

    p = subparsers.add_parser(
        "embed",
        help="PRM scores + hidden states: labels -> calibration set, --bon pool -> BoN set",
        description="One forward pass per trajectory returns the PRM score and the final-layer hidden state "
        "(input of the score head) at every step, plus one forward per question for the empty prefix. "
        "Inputs longer than --max-tokens are cut; rows past the cut are left out and counted in "
        "meta.json stats (printed). PRM kinds: qwen-prm, math-shepherd, reasoneval, token-classification.",
        formatter_class=_Formatter,
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--labels",
        type=Path,
        help="labels .parquet (from `dprm rollout`) or Park et al.'s calibration JSON",
    )
    source.add_argument(
        "--bon", type=Path, help="best-of-N pool: trajectories .parquet with a 'correct' column"
    )
    p.add_argument("--prm", required=True, help="PRM directory or hub id")
    p.add_argument("--kind", default=None, help="PRM wrapper (default: inferred from name/config)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available)")
    p.add_argument(
        "--dtype",
        default=None,
        help="bfloat16 | float16 | float32 (default: bf16 on GPU, fp32 on CPU)",
    )
    p.add_argument(
        "--max-tokens", type=int, default=4096, help="PRM input cap (the reference's 4096)"
    )
    p.add_argument(
        "--batch-tokens", type=int, default=16384, help="padded tokens per forward batch"
    )
    p.add_argument("--separator", default=None, help="token-classification: step separator token")
    p.add_argument(
        "--positive-label",
        type=int,
        default=None,
        help="token-classification: positive class index",
    )
    p.add_argument(
        "--hidden-dtype",
        default="float16",
        choices=["float16", "float32"],
        help="stored hidden states",
    )
    p.add_argument(
        "--park-rollouts", type=int, default=8, help="rollouts behind Park JSON success_prob values"
    )
    p.add_argument(
        "--questions-per-part", type=int, default=32, help="questions per resumable part"
    )
    _add_run_flags(p, "output set directory")
    p.set_defaults(func=cmd_embed)

    p = subparsers.add_parser(
        "merge",
        help="join the finished shards OUT.shards/ into OUT",
        description="Checks that all n shards are finished and were made with the same settings, then "
        "writes OUT atomically (parquet tables concatenated; sets joined with their hidden states). "
        "Duplicate keys across shards are an error.",
        formatter_class=_Formatter,
    )
    p.add_argument("out", type=Path, help="the --out path the sharded runs were given")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.set_defaults(func=cmd_merge)


# ----------------------------------------------------------------------------- helpers
def _input_id(path: Path) -> dict:
    path = Path(path)
    return {
        "input": str(path.resolve()),
        "input_bytes": path.stat().st_size if path.exists() else None,
    }


def _base_meta() -> dict:
    from dprm import __version__

    return {"dprm_version": __version__, "python": sys.version.split()[0]}


def _sampling(args: argparse.Namespace):
    from dprm.llm.rollout import SamplingConfig

    return SamplingConfig(
        n=args.n,
        temperature=args.temperature,
        top_p=args.top_p,
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


def _park_labels(path: Path, n_rollouts: int):
    """Park et al.'s calibration JSON as labels (ids and chains recovered by dprm.data.park)."""
    from dprm.data.park import park_to_labels, read_park_json

    return park_to_labels(read_park_json(path), n_rollouts, source=path)


def _skip(path: Path, what: str) -> int:
    print(
        f"{what}: {path} is already finished with these settings; skipped (use --overwrite to redo)"
    )
    return 0


# ----------------------------------------------------------------------------- commands
def cmd_questions(args: argparse.Namespace) -> int:
    from dprm.llm.questions import load_questions, write_questions

    frame = load_questions(
        args.source,
        every=args.every,
        offset=args.offset,
        limit=args.limit,
        id_prefix=args.id_prefix,
    )
    write_questions(args.out, frame)
    print(f"questions: wrote {len(frame)} questions to {args.out}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from dprm.llm.grading import GradingPool
    from dprm.llm.questions import read_questions
    from dprm.llm.rollout import generation_fingerprint, run_generation_stage
    from dprm.llm.shard import Shard, check_finished, output_path

    shard, sampling = args.shard or Shard(), _sampling(args)
    questions = read_questions(args.questions)
    if args.limit is not None:
        questions = questions.iloc[: args.limit]
    meta = {**_base_meta(), **_sampling_meta(args, sampling), "questions_file": str(args.questions)}
    fingerprint = {
        **_input_id(args.questions),
        "limit": args.limit,
        **{k: meta[k] for k in ("generator", "backend", "template")},
    }
    full = {**generation_fingerprint(fingerprint, sampling), "shard": str(shard)}
    if check_finished(output_path(args.out, shard), full, args.overwrite):
        return _skip(output_path(args.out, shard), "generate")
    generator = _generator(args)
    with GradingPool(args.grader_workers, args.grader_timeout) as pool:
        path, _ = run_generation_stage(
            questions, generator, pool, args.out, sampling, shard=shard, fingerprint=fingerprint, meta=meta,
            per_part=args.questions_per_part, overwrite=args.overwrite, progress=not args.no_progress,
        )  # fmt: skip
    print(f"generate: wrote {path}")
    return 0


def cmd_rollout(args: argparse.Namespace) -> int:
    import pandas as pd

    from dprm.llm.grading import GradingPool
    from dprm.llm.rollout import (
        RolloutConfig,
        check_trajectories,
        config_dict,
        rollout_fingerprint,
        run_rollout_stage,
    )
    from dprm.llm.shard import Shard, check_finished, output_path, read_output_meta

    shard, sampling = args.shard or Shard(), _sampling(args)
    config = RolloutConfig(max_steps=args.max_steps, boxed_prefix=args.boxed_prefix)
    if not args.trajectories.exists():
        raise FileNotFoundError(f"{args.trajectories}: trajectories file not found")
    trajectories = pd.read_parquet(args.trajectories)
    check_trajectories(trajectories, args.trajectories)
    if args.responses is not None:
        trajectories = trajectories[trajectories["response_id"] < args.responses]
    meta = {**_base_meta(), **_sampling_meta(args, sampling), **config_dict(config),
            "trajectories_file": str(args.trajectories), "trajectories_meta": read_output_meta(args.trajectories)}  # fmt: skip
    fingerprint = {
        **_input_id(args.trajectories),
        "responses": args.responses,
        **{k: meta[k] for k in ("generator", "backend", "template")},
    }
    full = {**rollout_fingerprint(fingerprint, config, sampling), "shard": str(shard)}
    if check_finished(output_path(args.out, shard), full, args.overwrite):
        return _skip(output_path(args.out, shard), "rollout")
    generator = _generator(args)
    with GradingPool(args.grader_workers, args.grader_timeout) as pool:
        path, _ = run_rollout_stage(
            trajectories, generator, pool, args.out, config, sampling, shard=shard, fingerprint=fingerprint,
            meta=meta, per_part=args.questions_per_part, overwrite=args.overwrite, progress=not args.no_progress,
        )  # fmt: skip
    print(f"rollout: wrote {path}")
    return 0


def cmd_embed(args: argparse.Namespace) -> int:
    import pandas as pd

    from dprm.data.contract import read_labels
    from dprm.io import DataError
    from dprm.llm.embed import EmbedConfig, run_embed
    from dprm.llm.prm import load_prm
    from dprm.llm.rollout import check_trajectories
    from dprm.llm.shard import Shard, output_path, read_output_meta

    shard = args.shard or Shard()
    source = args.labels or args.bon
    if args.labels is not None:
        kind = "calibration"
        frame = (
            read_labels(source)
            if source.suffix == ".parquet" or source.is_dir()
            else _park_labels(source, args.park_rollouts)
        )
    else:
        kind = "bon"
        frame = pd.read_parquet(source)
        check_trajectories(frame, source)
        if "correct" not in frame.columns:
            raise DataError(
                source, "missing column 'correct' (a BoN pool is `dprm generate` output)"
            )
    quick = {**_input_id(source), "stage": f"embed-{kind}", "prm": args.prm, "hidden_dtype": args.hidden_dtype,
             "questions_per_part": args.questions_per_part, "shard": str(shard)}  # fmt: skip
    found = read_output_meta(output_path(args.out, shard)).get("fingerprint") or {}
    if not args.overwrite and found and all(found.get(k) == v for k, v in quick.items()):
        return _skip(output_path(args.out, shard), "embed")  # without loading the PRM
    options = {
        k: v
        for k, v in (("separator", args.separator), ("positive_label", args.positive_label))
        if v is not None
    }
    prm = load_prm(
        args.prm,
        args.kind,
        device=args.device,
        dtype=args.dtype,
        max_tokens=args.max_tokens,
        batch_tokens=args.batch_tokens,
        **options,
    )
    config = EmbedConfig(questions_per_part=args.questions_per_part, hidden_dtype=args.hidden_dtype)
    provenance = {
        **_base_meta(),
        "source_file": str(source),
        "source_meta": read_output_meta(source) if source.suffix == ".parquet" else {},
    }
    source_meta = provenance["source_meta"]
    for key in ("generator", "grader", "grader_version", "seed"):
        if key in source_meta:
            provenance[key] = source_meta[key]
    path, skipped = run_embed(
        frame, prm, args.out, kind=kind, shard=shard, config=config, fingerprint=_input_id(source),
        provenance=provenance, overwrite=args.overwrite, progress=not args.no_progress,
    )  # fmt: skip
    if skipped:
        return _skip(path, "embed")
    stats = read_output_meta(path).get("stats", {})
    truncated = stats.get("rows_truncated", stats.get("responses_truncated", 0))
    print(f"embed: wrote {path} ({stats})")
    if truncated:
        print(
            f"embed: {truncated} row(s) exceeded --max-tokens={prm.max_tokens} (see meta.json stats)",
            file=sys.stderr,
        )
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from dprm.llm.shard import find_shards, merge_shards

    n = len(find_shards(args.out))
    path = merge_shards(args.out, overwrite=args.overwrite)
    print(f"merge: joined {n} shards into {path}")
    return 0
