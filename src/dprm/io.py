"""Atomic file output and the input error every reader raises.

Every writer in dprm goes through these helpers so that an interrupted job never leaves a
half-written file under its final name, and finished files get the permissions the user's umask
gives any new file (docs/design.md §6).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dprm.filesystem import check_output_name, publish_mode, shown, within
from dprm.textfiles import TextError, parse_json


class DataError(ValueError):
    """Bad input: the message names the file, the column or row, and what was expected."""

    def __init__(self, path: str | os.PathLike | None, what: str):
        self.path = None if path is None else Path(path)
        prefix = f"{shown(self.path)}: " if self.path is not None else ""
        super().__init__(prefix + what)


class OutputError(DataError):
    """An output path that cannot be written: it exists (and no overwrite was asked for), it is
    the wrong kind (a file where a directory is expected, or back), or it is not writable."""


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


# ----------------------------------------------------------------------------- what dprm wrote
#: the marker inside every directory a dprm command publishes (docs/cli.md, "Outputs")
MARKER_FILE = ".dprm-output.json"
#: the registry, in a folder, of the single-file outputs dprm commands wrote there
REGISTRY_FILE = ".dprm-outputs.json"

#: the dprm command whose outputs are being written (set by the CLI; None in library use)
_OUTPUT_COMMAND: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "dprm_output_command", default=None
)


@contextlib.contextmanager
def output_command(command: str) -> Iterator[None]:
    """While active, every directory :func:`atomic_dir` publishes carries the marker of
    ``command`` (``dprm COMMAND``), so a later ``--overwrite`` can recognise it as dprm's."""
    token = _OUTPUT_COMMAND.set(command)
    try:
        yield
    finally:
        _OUTPUT_COMMAND.reset(token)


#: the root folder of the run being written (set by a resumable command once it claimed it)
_OUTPUT_ROOT: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "dprm_output_root", default=None
)


def _marker_record(command: str | None, root: str | None = None) -> dict[str, Any]:
    from dprm.version import __version__

    record = {
        "written_by": "dprm",
        "command": command,
        "dprm_version": __version__,
        "pid": os.getpid(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return record if root is None else record | {"root": root}


def _root_of(directory: Path) -> str:
    """The marker's ``root`` of ``directory``: ``"."`` for an output of its own, else the
    relative path up to the run folder it was written inside (see :func:`output_root`)."""
    root = _OUTPUT_ROOT.get()
    if root is None:
        return "."
    final, root = directory.resolve(), root.resolve()
    if final == root or not final.is_relative_to(root):
        return "."
    return os.path.relpath(root, final)


@contextlib.contextmanager
def output_root(root: str | os.PathLike) -> Iterator[None]:
    """While active, directories published inside ``root`` name it in their markers' ``root``
    (a relative path such as ``../..``): a folder inside a run is not a run of its own."""
    token = _OUTPUT_ROOT.set(Path(root))
    try:
        yield
    finally:
        _OUTPUT_ROOT.reset(token)


def write_marker(directory: str | os.PathLike, command: str) -> Path:
    """Mark ``directory`` (created if missing) as written by ``dprm COMMAND``; returns the marker."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / MARKER_FILE
    write_json(marker, _marker_record(command, _root_of(directory)))
    return marker


def read_marker(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The marker of a directory dprm wrote, or None (no marker, or not one of dprm's)."""
    marker = Path(directory) / MARKER_FILE
    try:
        record = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("written_by") != "dprm":
        return None
    return record


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def folder_locked(folder: Path) -> Iterator[None]:
    """An exclusive lock on a folder itself (flock on its descriptor): registry updates,
    creating a shared SQLite schema."""
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _read_registry(folder: Path) -> dict[str, Any]:
    try:
        registry = json.loads((folder / REGISTRY_FILE).read_text())
    except (OSError, ValueError):
        return {}
    files = registry.get("files") if isinstance(registry, dict) else None
    return files if isinstance(files, dict) else {}


def register_file_output(path: str | os.PathLike, command: str) -> None:
    """Record a finished single-file output of ``dprm COMMAND`` in its folder's registry
    (``.dprm-outputs.json``: name -> command, version, pid, time, size and SHA-256).

    Only a file whose bytes still match its entry counts as dprm's (:func:`written_by_dprm`): a
    file the user edited or replaced afterwards is theirs again.
    """
    path = Path(path)
    folder = path.parent
    with folder_locked(folder):
        files = {name: e for name, e in _read_registry(folder).items() if (folder / name).exists()}
        files[path.name] = {
            **_marker_record(command),
            "size": path.stat().st_size,
            "sha256": _sha256(path),
        }
        write_json(folder / REGISTRY_FILE, {"written_by": "dprm", "files": files})


def written_by_dprm(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an output a dprm command wrote: a directory with dprm's marker, or a
    file listed with its current size and SHA-256 in its folder's registry."""
    path = Path(path)
    if path.is_dir():
        return read_marker(path) is not None
    if not path.is_file():
        return False
    entry = _read_registry(path.parent).get(path.name)
    if not isinstance(entry, dict):
        return False
    size = path.stat().st_size
    return entry.get("size") == size and entry.get("sha256") == _sha256(path)


# ----------------------------------------------------------------------------- the output guard
def _resolved(path: str | os.PathLike) -> Path:
    """``path`` made absolute with symlinks and ``..`` resolved (missing parts kept as given;
    ``~`` is not expanded: the writers do not expand it either, the shell does)."""
    return Path(path).resolve()


def guard_output(
    path: str | os.PathLike, inputs: Iterable[tuple[str, str | os.PathLike]] = ()
) -> Path:
    """Refuse an output path whose replacement would destroy what the command reads or more.

    An output is refused (with or without ``--overwrite``) when it is, contains or lies inside
    one of ``inputs``, or when it is or contains the working directory, the home folder or a
    filesystem root (a mount point). Paths are compared as files (device and inode, see
    :func:`dprm.filesystem.within`), so symlinks, ``..`` and bind mounts are seen through.

    Args:
        path: the output file or directory (``--out``).
        inputs: ``(flag, path)`` pairs of everything the command reads, e.g.
            ``[("--data", "w/id/calib"), ("--model", "m/ot")]``.

    Returns:
        ``path`` resolved.

    Raises:
        OutputError: one line naming the output and the path it would destroy, or why its
            name cannot be written (:func:`dprm.filesystem.check_output_name`).
    """
    given = Path(path)
    reason = check_output_name(given)  # too long, or control characters: refused up front
    if reason is not None:
        raise OutputError(given, reason)
    out = _resolved(given)
    if out == Path(out.anchor) or os.path.ismount(out):
        raise OutputError(given, f"is the filesystem root {out}; choose another --out")
    for label, folder in (("the home folder", Path.home()), ("the working directory", Path.cwd())):
        folder = _resolved(folder)
        if within(folder, out):
            relation = "is" if within(out, folder) else "contains"
            raise OutputError(given, f"{relation} {label} {folder}; choose another --out")
    for flag, raw in inputs:
        if raw is None:
            continue
        inside, contains = within(out, raw), within(raw, out)
        if inside and contains:
            relation = "is"
        elif contains:
            relation = "contains"
        elif inside:
            relation = "lies inside"
        else:
            continue
        raise OutputError(
            given,
            f"{relation} the input {flag} {shown(raw)}; writing there would destroy what the command "
            "reads: choose another --out",
        )
    return out


def check_output(
    path: str | os.PathLike,
    *,
    overwrite: bool,
    directory: bool,
    resumable: bool = False,
    inputs: Iterable[tuple[str, str | os.PathLike]] = (),
    command: str | None = None,
) -> Path:
    """Check, before any work, that ``path`` may be written as a file or directory.

    Args:
        path: the output file or directory.
        overwrite: whether an existing output may be replaced; only one dprm wrote is
            (:func:`written_by_dprm`), or an empty directory.
        directory: True when the output is a directory, False for a file.
        resumable: an existing directory is the command's own resumable work (kept as is).
        inputs: ``(flag, path)`` pairs of what the command reads (see :func:`guard_output`).
        command: with ``resumable``, an existing directory is continued only when its marker
            names this command (or it is empty): ``reproduce`` resumes only its own folders.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OutputError: the output would destroy an input, the working directory, the home folder
            or a filesystem root; it exists and ``overwrite`` is False; ``overwrite`` is asked
            for something dprm did not write; it exists with the other kind (file vs
            directory); or its directory cannot be written.
    """
    path = Path(path)
    guard_output(path, inputs)
    kind, other = ("directory", "file") if directory else ("file", "directory")
    if path.is_symlink() and not path.exists():
        raise OutputError(
            path,
            f"is a link to {os.readlink(path)}, which does not exist; create it or remove the link",
        )
    if path.exists() or path.is_symlink():
        if path.is_dir() != directory:
            raise OutputError(path, f"exists and is a {other}; expected a {kind} path")
        empty = path.is_dir() and not any(path.iterdir())
        if overwrite and not (empty or written_by_dprm(path)):
            where = (
                f"no {MARKER_FILE} marker in it"
                if directory
                else f"not listed unchanged in {path.parent / REGISTRY_FILE}"
            )
            raise OutputError(
                path,
                f"exists and was not written by dprm ({where}); --overwrite only "
                "replaces dprm's own outputs: move it away yourself or choose another --out",
            )
        if resumable and not overwrite and directory and command is not None and not empty:
            marker = read_marker(path)
            if marker is None or marker.get("command") != command:
                found = "no dprm marker" if marker is None else f"made by dprm {marker['command']}"
                raise OutputError(
                    path,
                    f"exists and is not a dprm {command} folder ({found} in {MARKER_FILE}); "
                    f"dprm {command} resumes only its own folders: choose a new or empty --out",
                )
        if not (overwrite or resumable):
            raise OutputError(path, "exists; pass --overwrite to replace it")
    parent = _nearest_existing(path.parent)
    if not parent.is_dir():
        raise OutputError(path, f"cannot be created: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(path, f"cannot be written: {parent} is read-only")
    if (path.exists() and directory and resumable and not overwrite) and not os.access(
        path, os.W_OK | os.X_OK
    ):
        raise OutputError(path, "cannot be written: the directory is read-only")
    return path


# ----------------------------------------------------------------------------- one writer
def lock_path(path: str | os.PathLike) -> Path:
    """The lock file of an output: ``.NAME.lock`` beside it (symlinks resolved)."""
    target = _resolved(path)
    return target.parent / f".{target.name}.lock"


@contextlib.contextmanager
def output_lock(path: str | os.PathLike, command: str | None = None) -> Iterator[Path]:
    """Hold the only right to write ``path`` while the block runs (fcntl lock on
    :func:`lock_path`, which records the owner's pid and command; removed on exit).

    A second writer is refused, not queued: it would otherwise replace the first one's
    finished output or interleave with it.

    Raises:
        OutputError: another process holds the lock (the message names its pid).
    """
    import fcntl

    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                os.close(fd)
                raise
            try:
                owner = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
            except ValueError:
                owner = {}
            os.close(fd)
            who = f"pid {owner.get('pid', '?')}"
            if owner.get("command"):
                who += f", dprm {owner['command']}"
            raise OutputError(
                path,
                f"is being written by another process ({who}; lock {lock}); wait for it to "
                "finish or choose another --out",
            ) from None
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file as we opened it: take the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_marker_record(command)).encode(), 0)
        yield lock
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)  # before unlocking: a waiter then sees a fresh file
        os.close(fd)


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it onto ``final`` only on success."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        publish_mode(tmp_path, directory=False)
        os.replace(tmp_path, final)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary directory beside ``final``; swap it in only on success.

    An existing ``final`` is kept until the new one is complete, so nothing already written is
    lost when a job dies part-way. A symlink ``final`` keeps pointing where it did: the
    directory it names is the one replaced. Under :func:`output_command` the new directory
    carries dprm's marker (:data:`MARKER_FILE`).
    """
    final = Path(final)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} exists; pass overwrite=True to replace it")
    if final.is_symlink():
        final = Path(os.path.realpath(final))  # swap the target, not the link
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        yield tmp
        command = _OUTPUT_COMMAND.get()
        if command is not None:
            record = _marker_record(command, _root_of(final))
            (tmp / MARKER_FILE).write_text(json.dumps(record, indent=2) + "\n")
        publish_mode(tmp, directory=True)
        old = None
        if final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _nan_to_none(obj: Any) -> Any:
    """Strict JSON has no NaN: write undefined metrics as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj


def strict_jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values with NaN / infinities replaced by None (strict JSON)."""
    return _nan_to_none(json.loads(json.dumps(obj, default=_json_default)))


def write_json(path: str | os.PathLike, obj: Any, *, allow_nan: bool = False) -> None:
    """Write strict JSON atomically: NaN and infinities become ``null``.

    Args:
        path: the output file.
        obj: dicts, lists, numbers, strings; numpy scalars/arrays and paths are converted.
        allow_nan: keep non-finite floats as the non-standard ``NaN`` / ``Infinity`` tokens
            (only for internal files read back by :func:`read_json`).
    """
    if not allow_nan:
        obj = strict_jsonable(obj)
    text = json.dumps(obj, indent=2, default=_json_default, allow_nan=allow_nan)
    with atomic_path(path) as tmp:
        tmp.write_text(text + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file as UTF-8 (a byte-order mark accepted), within the limits of
    :mod:`dprm.textfiles`, naming the file in any error."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "file not found")
    try:
        return parse_json(path.read_bytes())
    except TextError as err:
        raise DataError(path, str(err)) from None
