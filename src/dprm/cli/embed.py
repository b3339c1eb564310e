"""``dprm embed``: PRM scores and hidden states, the last stage of the real-data pipeline.

Labels become a calibration set and a best-of-N pool (``--bon``) a BoN set; one forward pass
per trajectory gives every step's score and state (:mod:`dprm.llm.embed`). See
:mod:`dprm.cli._stage`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dprm.cli._stage import (
    add_run_flags,
    add_stage_parser,
    base_meta,
    claim_stage_out,
    input_id,
    say,
    skip,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_stage_parser(
        subparsers,
        "embed",
        help="PRM scores + hidden states: labels -> calibration set, --bon pool -> BoN set",
        description="One forward pass per trajectory returns the PRM score and the final-layer hidden state "
        "(input of the score head) at every step, plus one forward per question for the empty prefix. "
        "Inputs longer than --max-tokens are cut; rows past the cut are left out and counted in "
        "meta.json stats (printed). PRM kinds: qwen-prm, math-shepherd, reasoneval, skywork-prm, "
        "rlhflow-prm, token-classification. --adapter adds Park et al.'s calibrated quantiles "
        "(park_q10/park_q50/park_q90); --device-map auto shards a PRM larger than one GPU.",
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
    p.add_argument(
        "--prm-prompt",
        default="park",
        choices=["park", "model-card"],
        help="qwen-prm / token-classification system prompt: Park et al.'s 'in \\boxed{}' "
        "(default; the paper's calibration data) or the model card's 'within \\boxed{}'",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="fail on the first response the PRM cannot score (default: leave it out, count it "
        "in meta.json stats and list it under 'unscorable')",
    )
    p.add_argument("--separator", default=None, help="token-classification: step separator token")
    p.add_argument(
        "--positive-label",
        type=int,
        default=None,
        help="token-classification: positive class index",
    )
    p.add_argument(
        "--adapter",
        default=None,
        metavar="DIR_OR_ID",
        help="Park et al.'s calibrated LoRA adapter for a qwen-prm (e.g. young-j-park/"
        "Qwen2.5-Math-PRM-7B-calibrated-Llama-3.2-1B-Instruct): writes its quantiles at tau = "
        "0.1/0.5/0.9 as park_q10/park_q50/park_q90 next to prm_score (needs peft); the raw "
        "score and the hidden state stay the base PRM's",
    )
    p.add_argument(
        "--device-map",
        default=None,
        help="shard the PRM with accelerate ('auto': over all visible GPUs, in layer order; "
        "e.g. Qwen2.5-Math-PRM-72B on 4 GPUs); the hidden state is read off the last shard",
    )
    p.add_argument(
        "--max-memory",
        default=None,
        metavar="DEV=SIZE,...",
        help="with --device-map: memory per device, e.g. '0=70GiB,1=70GiB,2=70GiB,3=70GiB' "
        "(add cpu=SIZE to allow CPU offload)",
    )
    p.add_argument(
        "--offload-folder",
        default=None,
        help="with --device-map: where layers that fit on no device are offloaded to disk",
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
    add_run_flags(p, "output set directory")
    p.set_defaults(func=cmd_embed)


def _park_labels(path: Path, n_rollouts: int):
    """Park et al.'s calibration JSON as labels (ids and chains recovered by dprm.data.park)."""
    from dprm.data.park import park_to_labels, read_park_json

    return park_to_labels(read_park_json(path), n_rollouts, source=path)


def cmd_embed(args: argparse.Namespace) -> int:
    import pandas as pd

    from dprm.data.contract import read_labels
    from dprm.io import DataError
    from dprm.llm.embed import EmbedConfig, run_embed
    from dprm.llm.prm import load_prm
    from dprm.llm.prm_interface import parse_max_memory
    from dprm.llm.rollout import check_trajectories
    from dprm.llm.shard import Shard, output_path, read_output_meta

    claim_stage_out(args, True, "--labels", "--bon", "--prm", "--adapter")
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
    if args.adapter is not None and kind != "calibration":
        raise DataError(
            args.adapter,
            "--adapter writes Park et al.'s quantiles into calibration sets (--labels); "
            "BoN sets do not carry them yet",
        )
    identity = input_id(source, args.prm, args.adapter)  # content of the input, PRM, adapter
    quick = {**identity, "stage": f"embed-{kind}", "prm": args.prm, "hidden_dtype": args.hidden_dtype,
             "questions_per_part": args.questions_per_part, "shard": str(shard)}  # fmt: skip
    if args.prm_prompt != "park":  # the park default keeps fingerprints of earlier runs valid
        quick["prm_system_prompt"] = args.prm_prompt
    quick["prm_adapter"] = args.adapter  # None matches fingerprints made without one
    found = read_output_meta(output_path(args.out, shard)).get("fingerprint") or {}
    if not args.overwrite and found and all(found.get(k) == v for k, v in quick.items()):
        return skip(output_path(args.out, shard), "embed", args.quiet)  # without loading the PRM
    options = {
        k: v
        for k, v in (("separator", args.separator), ("positive_label", args.positive_label))
        if v is not None
    }
    if args.prm_prompt != "park":
        options["prompt"] = args.prm_prompt
    if args.device_map is not None:
        options["device_map"] = args.device_map
        options["max_memory"] = parse_max_memory(args.max_memory)
        options["offload_folder"] = args.offload_folder
    prm = load_prm(
        args.prm,
        args.kind,
        device=args.device,
        dtype=args.dtype,
        max_tokens=args.max_tokens,
        batch_tokens=args.batch_tokens,
        **options,
    )
    if args.adapter is not None:
        from dprm.llm.park_adapter import attach_adapter

        attach_adapter(prm, args.adapter)
    config = EmbedConfig(
        questions_per_part=args.questions_per_part,
        hidden_dtype=args.hidden_dtype,
        strict=args.strict,
    )
    provenance = {
        **base_meta(),
        "source_file": str(source),
        "source_meta": read_output_meta(source) if source.suffix == ".parquet" else {},
    }
    source_meta = provenance["source_meta"]
    for key in ("generator", "grader", "grader_version", "seed"):
        if key in source_meta:
            provenance[key] = source_meta[key]
    path, skipped = run_embed(
        frame, prm, args.out, kind=kind, shard=shard, config=config, fingerprint=identity,
        provenance=provenance, overwrite=args.overwrite, progress=not (args.no_progress or args.quiet),
    )  # fmt: skip
    if skipped:
        return skip(path, "embed", args.quiet)
    stats = read_output_meta(path).get("stats", {})
    truncated = stats.get("rows_truncated", stats.get("responses_truncated", 0))
    say(args, f"embed: wrote {path} ({stats})")
    if truncated:
        print(
            f"embed: {truncated} row(s) exceeded --max-tokens={prm.max_tokens} (see meta.json stats)",
            file=sys.stderr,
        )
    unscorable = stats.get("rows_unscorable", stats.get("responses_unscorable", 0))
    if unscorable:
        reasons = {
            k.removeprefix("unscorable_"): v
            for k, v in stats.items()
            if k.startswith("unscorable_")
        }
        print(
            f"embed: left out {unscorable} row(s) the PRM cannot score {reasons} "
            "(listed under 'unscorable' in meta.json; --strict makes this an error)",
            file=sys.stderr,
        )
    return 0
