"""Files as the operating system sees them: identities, names, space and a full disk.

* **Identity.** Two paths name the same file when their device and inode agree
  (:func:`same_file`), whatever the spelling: symlinks, ``..``, bind mounts. :func:`within`
  walks a path's existing ancestors by identity, so a folder reached through a bind mount is
  still found inside the folder it aliases.
* **Names.** :func:`check_output_name` refuses, before any work, an output name the filesystem
  would refuse later (too long once dprm's temporaries add their prefix and suffix) or one
  holding control characters; :func:`shown` prints a path with ``repr`` where it holds them.
* **Space.** :func:`reserved_memmap` allocates a ``.npy`` file's blocks before it is memory-mapped:
  a full disk is then an ``OSError`` (ENOSPC), never a SIGBUS on the first page touched.
* **Permissions.** :func:`publish_mode` gives a finished temporary file or folder the mode a
  plain create would have had under the user's umask.
* **A full disk** is recognised however a library reports it (:func:`disk_full`): ENOSPC / EFBIG
  / EDQUOT, safetensors' ``StorageFull``, SQLite's "database or disk is full".

No dprm import here: :mod:`dprm.io` and every writer build on it.
"""

from __future__ import annotations

import errno
import os
import unicodedata
from pathlib import Path

import numpy as np

#: bytes dprm adds to an output's name for its temporaries: ``.NAME.XXXXXXXX.tmp`` (mkstemp),
#: ``.NAME.old-PID`` (a replaced directory), ``.NAME.lock``; the name must leave room for them
TEMPORARY_NAME_BYTES = 16
#: errno values that mean "no room to write": a full disk, a file-size limit, a quota
FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
#: how libraries that do not raise OSError word a full disk (safetensors, SQLite)
FULL_DISK_WORDS = ("no space left on device", "storagefull", "database or disk is full")


# ----------------------------------------------------------------------------- identity
def identity(path: str | os.PathLike) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``path`` (symlinks followed), or None when it does not exist."""
    try:
        stat = os.stat(path)
    except (OSError, ValueError):
        return None
    return stat.st_dev, stat.st_ino


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` are one existing file or directory (device and inode)."""
    first = identity(a)
    return first is not None and first == identity(b)


def lineage(path: str | os.PathLike) -> set[tuple[int, int]]:
    """Identities of ``path`` (where it exists) and of every ancestor of its resolved form."""
    resolved = Path(path).resolve()
    found = set()
    for candidate in (resolved, *resolved.parents):
        ident = identity(candidate)
        if ident is not None:
            found.add(ident)
    return found


def within(inner: str | os.PathLike, outer: str | os.PathLike) -> bool:
    """Whether ``inner`` is ``outer`` or lies inside it, compared as files.

    Spelled paths are compared first (symlinks and ``..`` resolved: right for paths that do not
    exist yet); then ``outer``'s device and inode are looked for among ``inner``'s existing
    ancestors, which catches a bind mount or any other alias of ``outer``.
    """
    inner_path, outer_path = Path(inner).resolve(), Path(outer).resolve()
    if inner_path == outer_path or inner_path.is_relative_to(outer_path):
        return True
    ident = identity(outer_path)
    return ident is not None and ident in lineage(inner_path)


# ----------------------------------------------------------------------------- names
def has_control_characters(text: str) -> bool:
    """Whether ``text`` holds a control character (newline, tab, escape, ...)."""
    return any(unicodedata.category(c) == "Cc" for c in text)


def shown(path: str | os.PathLike) -> str:
    """``path`` as printed in a one-line message: ``repr`` where it holds control characters
    (a newline would otherwise split the line or read as a space)."""
    text = os.fspath(path)
    return repr(text) if has_control_characters(text) else text


def _name_max(path: Path) -> int:
    for candidate in (path, *path.parents):
        if candidate.exists():
            try:
                return int(os.pathconf(candidate, "PC_NAME_MAX"))
            except (OSError, ValueError):
                break
    return 255


def check_output_name(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be an output's name, or None when it can.

    Refused: control characters anywhere in it; a component longer than the filesystem allows;
    a final name too long to leave room for dprm's temporaries (:data:`TEMPORARY_NAME_BYTES`).
    """
    text = os.fspath(path)
    if has_control_characters(text):
        return "holds control characters; choose a name without them"
    limit = _name_max(Path(text).absolute().parent)
    parts = Path(text).parts
    for part in parts[:-1]:
        if len(os.fsencode(part)) > limit:
            return (
                f"has a component of {len(os.fsencode(part))} bytes; the filesystem allows {limit}"
            )
    if parts:
        size = len(os.fsencode(parts[-1]))
        if size > limit - TEMPORARY_NAME_BYTES:
            return (
                f"has a name of {size} bytes; outputs may have at most "
                f"{limit - TEMPORARY_NAME_BYTES} (the filesystem allows {limit}, and dprm's "
                f"temporary files add {TEMPORARY_NAME_BYTES})"
            )
    return None


# ----------------------------------------------------------------------------- permissions
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


def publish_mode(path: Path, directory: bool) -> None:
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


# ----------------------------------------------------------------------------- space
def reserve(fd: int, start: int, stop: int) -> None:
    """Allocate bytes ``[start, stop)`` of the open file ``fd`` on disk now.

    Where the filesystem has no ``fallocate``, zeros are written over that range instead (so
    it must hold no data yet).

    Raises:
        OSError: ENOSPC (or EFBIG, EDQUOT) when the disk cannot hold them.
    """
    if stop <= start:
        return
    try:
        os.posix_fallocate(fd, start, stop - start)
        return
    except OSError as err:
        if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
    block = b"\0" * (1 << 20)
    for offset in range(start, stop, len(block)):
        os.pwrite(fd, block[: min(len(block), stop - offset)], offset)


def reserved_memmap(path: str | os.PathLike, dtype, shape: tuple[int, ...]) -> np.memmap:
    """A new ``.npy`` file opened as a writable memory map, its blocks allocated first.

    ``np.lib.format.open_memmap`` alone makes a sparse file: on a full disk the first write to
    an unbacked page kills the process with SIGBUS. Here the disk is asked for the whole file
    before any page is touched.

    Raises:
        OSError: the disk cannot hold the file (ENOSPC naming ``path``); nothing is mapped.
    """
    array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
    try:
        fd = os.open(path, os.O_RDWR)
        try:
            reserve(fd, int(array.offset), os.fstat(fd).st_size)
        finally:
            os.close(fd)
    except OSError as err:
        del array
        raise OSError(err.errno, err.strerror, os.fspath(path)) from None
    return array


def disk_full(err: BaseException | None) -> bool:
    """Whether ``err`` (or an exception it was raised from) says the disk is full."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in FULL_DISK_ERRNOS:
            return True
        text = str(err).lower()
        if any(words in text for words in FULL_DISK_WORDS):
            return True
        err = err.__cause__ or err.__context__
    return False
