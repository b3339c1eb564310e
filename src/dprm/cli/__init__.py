"""The ``dprm`` command-line program.

Thin by design: :data:`COMMANDS` is the table of subcommands (name -> module, one-line help,
whether an interrupted run resumes). Only the module of the command being run is imported, so
``dprm --help`` and ``dprm questions --help`` load neither torch nor a calibrator. Each module
adds its subcommands through ``register(subparsers)`` and turns flags into library calls.

Errors: bad input, bad settings and unwritable outputs end with one line on stderr and exit
code 2; an interrupt with exit code 130; a traceback only with ``--debug`` or for an internal
bug (docs/cli.md).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from dprm.version import __version__


@dataclass(frozen=True)
class Command:
    """A row of the command table."""

    module: str
    help: str
    resumable: bool = False


#: every subcommand, in ``dprm --help`` order (pipeline order)
COMMANDS: dict[str, Command] = {
    "synth": Command(
        "dprm.cli.synth", "write a synthetic world (calibration + best-of-N sets with known truth)"
    ),
    "import-park": Command(
        "dprm.cli.import_park",
        "import Park et al.'s calibration JSON as labelled prefixes (labels.parquet)",
    ),
    "questions": Command(
        "dprm.cli.questions", "normalise a question set to question_id, question, answer"
    ),
    "generate": Command(
        "dprm.cli.generate", "sample trajectories (responses) per question and grade them", True
    ),
    "rollout": Command(
        "dprm.cli.rollout",
        "Monte Carlo rollouts from every trajectory prefix -> labels with counts",
        True,
    ),
    "embed": Command(
        "dprm.cli.embed",
        "PRM scores + hidden states: labels -> calibration set, --bon pool -> BoN set",
        True,
    ),
    "merge": Command("dprm.cli.merge", "join the finished shards OUT.shards/ into OUT"),
    "train": Command("dprm.cli.train", "fit a calibrator on a calibration set"),
    "tune": Command(
        "dprm.cli.tune",
        "hyper-parameter search of ot, qr, mono, binomial (same trials each; resumable)",
        True,
    ),
    "predict": Command(
        "dprm.cli.predict",
        "quantiles of a trained calibrator on a calibration or best-of-N set (.npy)",
    ),
    "evaluate": Command(
        "dprm.cli.evaluate",
        "Brier, PosBrier, ECE, WQL, calibration area, crossing rate (+ truth errors)",
    ),
    "ias": Command(
        "dprm.cli.ias", "instance-adaptive best-of-N: C, tau and beta sweeps (exact + Monte Carlo)"
    ),
    "reproduce": Command(
        "dprm.cli.reproduce",
        "synth -> train -> evaluate -> ias -> tables, figures and report.md (resumable)",
        True,
    ),
    "run": Command(
        "dprm.cli.run",
        "a recipe (TOML) from questions to report on one box, Ray or SLURM (resumable)",
        True,
    ),
    "solve": Command(
        "dprm.cli.solve",
        "live adaptive best-of-N / beam search with a calibrated PRM (+ fixed baseline)",
        True,
    ),
    "serve": Command(
        "dprm.cli.serve",
        "serve a PRM + calibrator over HTTP: step scores, quantiles, budgets (batched)",
    ),
    "doctor": Command(
        "dprm.cli.doctor",
        "first thing on a GPU machine: the extras installed, then the real PRMs vs published "
        "step rewards",
    ),
}

INTERRUPTED = {
    True: "interrupted; finished work is kept, rerun the same command to resume",
    False: "interrupted; nothing was written for the unfinished output (files that existed "
    "before are unchanged); rerun to start again",
}


#: signals that end a command like Ctrl-C (the handler's KeyboardInterrupt carries the name)
TERMINATING = ("SIGTERM", "SIGHUP")


class _TableSubparsers:
    """The subparsers action as modules see it: the one-line help comes from the table."""

    def __init__(self, action: argparse._SubParsersAction):
        self._action = action

    def add_parser(self, name: str, **kwargs) -> argparse.ArgumentParser:
        kwargs["help"] = COMMANDS[name].help
        kwargs["formatter_class"] = _formatter()  # one rule for defaults in every --help
        return self._action.add_parser(name, **kwargs)

    def __getattr__(self, attr: str):
        return getattr(self._action, attr)


def _formatter() -> type[argparse.HelpFormatter]:
    from dprm.cli._common import HelpFormatter

    return HelpFormatter


def _module_available(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def build_parser(commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``dprm`` parser; only the modules of ``commands`` (None: all) are imported.

    Commands not asked for get a placeholder parser carrying their one-line help.
    """
    parser = argparse.ArgumentParser(
        prog="dprm",
        description=(
            "Distributional process reward models: calibrate a PRM's success estimates as a "
            "full conditional quantile function Q(tau | h) and spend inference-time compute "
            "per question (instance-adaptive best-of-N)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dprm {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of any error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    table = _TableSubparsers(sub)
    wanted = {COMMANDS[name].module for name in (COMMANDS if commands is None else commands)}
    for name, command in COMMANDS.items():
        if name in sub.choices:
            continue  # registered with an earlier command of its module
        if command.module in wanted and _module_available(command.module):
            importlib.import_module(command.module).register(table)
        if name not in sub.choices:
            sub.add_parser(name, help=command.help)  # placeholder: help listing only
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (top-level flags take no values)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dprm``; returns the exit code (0 ok, 2 user error, 3 training failure, 130 ^C)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    name = _command_of(argv)
    parser = build_parser([name] if name in COMMANDS else [])
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.error(f"{args.command}: not available in this installation")
    from dprm.cli._common import (
        apply_threads,
        end_on_termination,
        output_session,
        quiet_libraries,
    )
    from dprm.digests import verify_inputs

    if getattr(args, "quiet", False) or getattr(args, "no_progress", False):
        quiet_libraries()

    try:
        if hasattr(args, "threads"):  # a torch command
            # torch's import (seconds) before --out is locked and SIGTERM / SIGHUP are handled:
            # an interrupt raised inside `from torch._C import *` leaves a half-loaded
            # extension, and the process could then die by SIGINT instead of exiting 130
            apply_threads(args)
        with (
            output_session(args.command) as outputs,  # --out locks held until the end
            verify_inputs(getattr(args, "verify_inputs", False)),  # --verify-inputs
        ):
            # SIGTERM / SIGHUP end every command like Ctrl-C, through the same cleanup (the
            # lock and temporaries removed, worker pools ended, one line said)
            end_on_termination()
            result = args.func(args)
            if int(result or 0) in (0, 1):  # 1: a resumable run with failed units, still ours
                outputs.mark_finished()
    except KeyboardInterrupt as err:
        if args.debug:
            raise
        note = INTERRUPTED[COMMANDS[args.command].resumable]
        if err.args and err.args[0] in TERMINATING:  # raised by the handler: say which signal
            note = note.replace("interrupted", f"interrupted by {err.args[0]}", 1)
        # a new line first: a progress bar (stderr, no newline of its own) may hold the line
        print(f"\ndprm {args.command}: {note}", file=sys.stderr)
        return 130
    except Exception as err:
        from dprm.config import ConfigError
        from dprm.filesystem import disk_full, shown
        from dprm.io import DataError

        out = getattr(args, "out", None)
        full = disk_full(err)
        if args.debug or not (full or isinstance(err, DataError | ConfigError | OSError)):
            raise  # an internal bug: the traceback is the report
        message = " ".join(str(err).split()) or type(err).__name__
        if full:  # however the library words it (OSError, safetensors, SQLite): one line
            where = shown(out) if out is not None else "the output"
            message = (
                f"{where}: could not be written: no space left on device ({message[:200]}); "
                "nothing was published: free some space and rerun"
            )
        elif isinstance(err, OSError) and err.filename is None and out is not None:
            message = f"{shown(out)}: {message}"  # say where it was writing
        print(f"dprm {args.command}: error: {message}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())


def program() -> None:
    """The ``dprm`` program (console script and ``python -m dprm.cli``): :func:`main`, then exit.

    An interrupt exits with 130 whatever the interpreter saw: a signal that lands inside a
    module import (torch and numpy import lazily while a command runs) can leave CPython
    marked as ended by an unhandled ``KeyboardInterrupt``, and it would then end the process
    by SIGINT after :func:`main` has already cleaned up and said so. The streams are flushed
    and the process ends at once (the command's own cleanup has run; nothing else is owed).
    """
    code = main()
    if code == 130:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe
                stream.flush()
        os._exit(130)
    sys.exit(code)
