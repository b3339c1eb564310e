"""What the real-data pipeline commands share: stage parsers, run flags, provenance, skipping.

questions.jsonl -> generate -> trajectories.parquet -> rollout -> labels.parquet -> embed ->
calibration set (or, with ``--bon``, trajectories -> BoN set). Every compute stage takes
``--shard i/n`` (0-based), shows progress, resumes from its finished parts after a kill, writes
atomically, and skips a finished shard; ``dprm merge OUT`` joins ``OUT.shards/``. See
docs/pipeline.md. Heavy libraries (transformers, vLLM, math-verify) load only when a stage runs.

The stages live in :mod:`dprm.cli.questions` (``questions``), :mod:`dprm.cli.generate`,
:mod:`dprm.cli.rollout`, :mod:`dprm.cli.embed` and :mod:`dprm.cli.merge`; the command table in
:mod:`dprm.cli` lists them in pipeline order.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dprm.cli._common import add_verify_inputs_flag


class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Help kept as written, with each flag's default."""


def add_stage_parser(
    subparsers: argparse._SubParsersAction, name: str, help: str, description: str
) -> argparse.ArgumentParser:
    """A pipeline subcommand's parser (help as written, defaults shown)."""
    return subparsers.add_parser(
        name, help=help, description=description, formatter_class=Formatter
    )


def _shard_arg(text: str):
    from dprm.llm.shard import parse_shard

    try:
        return parse_shard(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_run_flags(parser: argparse.ArgumentParser, out_help: str) -> None:
    """``--out``, ``--shard I/N``, ``--overwrite`` and ``--no-progress`` of a compute stage."""
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
    add_quiet_flag(parser)
    add_verify_inputs_flag(parser)


def claim_stage_out(args: argparse.Namespace, directory: bool, *flags: str) -> Path:
    """Check a stage's ``--out`` before any work and lock this shard's output.

    ``--out`` may not be, contain or lie inside an input (``flags``; hub ids are not paths),
    the working directory, the home folder or a filesystem root. An existing output is the
    stage's own resumable work (its fingerprint decides); ``--overwrite`` replaces only one dprm
    wrote. Each shard locks its own output, so shards of one ``--out`` run side by side.
    """
    from dprm.cli._common import claim_output, input_paths, local_inputs
    from dprm.io import guard_output
    from dprm.llm.shard import Shard, output_path

    inputs = local_inputs(input_paths(args, *flags))
    guard_output(args.out, inputs)
    return claim_output(
        output_path(args.out, args.shard or Shard()),
        overwrite=args.overwrite,
        directory=directory,
        resumable=True,
        inputs=inputs,
    )


def add_quiet_flag(parser: argparse.ArgumentParser) -> None:
    """``--quiet``: print nothing but errors (implies ``--no-progress``)."""
    parser.add_argument(
        "--quiet", action="store_true", help="print nothing but errors (implies --no-progress)"
    )


def say(args: argparse.Namespace, *text: str) -> None:
    """Print a summary line unless ``--quiet``."""
    if not getattr(args, "quiet", False):
        print(*text)


def input_id(path: Path, *models: str | Path | None) -> dict:
    """Identity of a stage's input in its fingerprint: the input's path and what it read.

    ``reads`` maps the input file and every model (``models``: local checkpoints or hub ids;
    None left out) to its content digest (:func:`dprm.digests.model_digest`), so an input
    changed in place makes the finished output stale (:func:`dprm.llm.shard.changed_reads`).
    """
    from dprm.digests import model_digest

    path = Path(path)
    named = [path, *(m for m in models if m is not None)]
    reads = {str(Path(m).resolve()) if Path(m).exists() else str(m): model_digest(m) for m in named}
    return {"input": str(path.resolve()), "reads": reads}


def base_meta() -> dict:
    """Provenance every stage records: package and Python versions."""
    from dprm.version import __version__

    return {"dprm_version": __version__, "python": sys.version.split()[0]}


def skip(path: Path, what: str, quiet: bool = False) -> int:
    """Report a shard already finished with these settings (exit code 0)."""
    if quiet:
        return 0
    print(
        f"{what}: {path} is already finished with these settings; skipped (use --overwrite to redo)"
    )
    return 0
