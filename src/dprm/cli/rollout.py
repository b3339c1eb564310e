"""``dprm rollout``: Monte Carlo rollouts from every trajectory prefix -> labels with counts."""

from __future__ import annotations

import argparse
from pathlib import Path

from dprm.cli._sampling import (
    add_sampling_flags,
    check_backend_flags,
    run_stage,
    sampling_config,
    sampling_meta,
)
from dprm.cli._stage import add_run_flags, add_stage_parser, base_meta, claim_stage_out


def register(subparsers: argparse._SubParsersAction) -> None:
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
    add_sampling_flags(p, 8, "rollouts per prefix")
    add_run_flags(p, "labels .parquet")
    p.set_defaults(func=cmd_rollout)


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

    check_backend_flags(args)  # before --out is claimed
    claim_stage_out(args, False, "--trajectories", "--model")
    sampling = sampling_config(args)
    config = RolloutConfig(max_steps=args.max_steps, boxed_prefix=args.boxed_prefix)
    if not args.trajectories.exists():
        raise FileNotFoundError(f"{args.trajectories}: trajectories file not found")
    trajectories = pd.read_parquet(args.trajectories)
    check_trajectories(trajectories, args.trajectories)
    if args.responses is not None:
        trajectories = trajectories[trajectories["response_id"] < args.responses]
    meta = {**base_meta(), **sampling_meta(args, sampling), **config_dict(config),
            "trajectories_file": str(args.trajectories), "trajectories_meta": read_output_meta(args.trajectories)}  # fmt: skip
    return run_stage(
        args, "rollout", args.trajectories, {"responses": args.responses}, meta,
        lambda fingerprint: rollout_fingerprint(fingerprint, config, sampling),
        lambda generator, pool, **options: run_rollout_stage(
            trajectories, generator, pool, args.out, config, sampling, **options
        ),
    )  # fmt: skip
