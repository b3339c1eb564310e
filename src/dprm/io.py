"""Atomic file output and the input error every reader raises.

Every writer in dprm goes through these helpers so that an interrupted job never leaves a
half-written file under its final name, and finished files get the permissions the user's umask
gives any new file (docs/design.md §6).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


class DataError(ValueError):
    """Bad input: the message names the file, the column or row, and what was expected."""

    def __init__(self, path: str | os.PathLike | None, what: str):
        self.path = None if path is None else Path(path)
        prefix = f"{self.path}: " if self.path is not None else ""
        super().__init__(prefix + what)


class OutputError(DataError):
    """An output path that cannot be written: it exists (and no overwrite was asked for), it is
    the wrong kind (a file where a directory is expected, or back), or it is not writable."""


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux: /proc)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _publish_mode(path: Path, directory: bool) -> None:
    """Give a temporary file (0600) or directory (0700) the mode a plain create would have.

    A directory's contents get the same treatment: some writers (safetensors) create 0600 files.
    """
    mask = current_umask()
    if not directory:
        os.chmod(path, 0o666 & ~mask)
        return
    for root, _dirs, files in os.walk(path):
        os.chmod(root, 0o777 & ~mask)
        for name in files:
            os.chmod(Path(root) / name, 0o666 & ~mask)


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def check_output(
    path: str | os.PathLike, *, overwrite: bool, directory: bool, resumable: bool = False
) -> Path:
    """Check, before any work, that ``path`` may be written as a file or directory.

    Args:
        path: the output file or directory.
        overwrite: whether an existing output may be replaced.
        directory: True when the output is a directory, False for a file.
        resumable: an existing directory is the command's own resumable work (kept as is).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OutputError: the output exists and ``overwrite`` is False; it exists with the other kind
            (file vs directory); or its directory cannot be written.
    """
    path = Path(path)
    kind, other = ("directory", "file") if directory else ("file", "directory")
    if path.exists() or path.is_symlink():
        if path.is_dir() != directory:
            raise OutputError(path, f"exists and is a {other}; expected a {kind} path")
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
        _publish_mode(tmp_path, directory=False)
        os.replace(tmp_path, final)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary directory beside ``final``; swap it in only on success.

    An existing ``final`` is kept until the new one is complete, so nothing already written is
    lost when a job dies part-way.
    """
    final = Path(final)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} exists; pass overwrite=True to replace it")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        yield tmp
        _publish_mode(tmp, directory=True)
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
    """Read a JSON file, naming the file in any parse error."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "file not found")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DataError(path, f"not valid JSON ({err})") from err
