"""Atomic file output and the input error every reader raises.

Every writer in dprm goes through these helpers so that an interrupted job never leaves a
half-written file under its final name (DESIGN.md section 6).
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


def write_json(path: str | os.PathLike, obj: Any, *, allow_nan: bool = True) -> None:
    """Write JSON atomically. NaN is kept as ``NaN`` unless ``allow_nan`` is False (then null)."""
    if not allow_nan:
        obj = _nan_to_none(json.loads(json.dumps(obj, default=_json_default)))
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=_json_default, allow_nan=allow_nan) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file, naming the file in any parse error."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "file not found")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DataError(path, f"not valid JSON ({err})") from err
