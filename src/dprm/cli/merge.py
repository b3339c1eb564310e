"""``dprm merge OUT``: join the finished shards ``OUT.shards/`` of a pipeline stage into ``OUT``."""

from __future__ import annotations

import argparse
from pathlib import Path

from dprm.cli._stage import add_quiet_flag, add_stage_parser, say


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_stage_parser(
        subparsers,
        "merge",
        help="join the finished shards OUT.shards/ into OUT",
        description="Checks that all n shards are finished and were made with the same settings, then "
        "writes OUT atomically (parquet tables concatenated; sets joined with their hidden states). "
        "Duplicate keys across shards are an error.",
    )
    p.add_argument("out", type=Path, help="the --out path the sharded runs were given")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars (none here)")
    add_quiet_flag(p)
    p.set_defaults(func=cmd_merge)


def cmd_merge(args: argparse.Namespace) -> int:
    from dprm.cli._common import claim_output
    from dprm.llm.shard import find_shards, merge_shards, shards_dir

    shards = find_shards(args.out)
    claim_output(
        args.out,
        overwrite=args.overwrite,
        directory=shards[0].is_dir(),
        resumable=True,  # merge_shards refuses an existing OUT without --overwrite
        inputs=[("OUT.shards", shards_dir(args.out))],
    )
    path = merge_shards(args.out, overwrite=args.overwrite)
    say(args, f"merge: joined {len(shards)} shards into {path}")
    return 0
