"""Content digests of the files, folders and models a command reads: the one fingerprint rule.

Every resumable command (``tune``, the pipeline stages, ``reproduce``, ``run``, ``solve``)
records what it read by content, so a resume notices an input changed in place:

* a **file**: the SHA-256 of its bytes (16 hex digits);
* a **folder**: the SHA-256 over the relative name and digest of every file under it, names
  starting with ``.`` left out (dprm's temporaries and unfinished parts), prefixed ``dir:``;
* a **model**: a local checkpoint folder (or file) by its content as above (weights, configs,
  tokenizer); a hub id by the revision it resolves to (``hub:ID@COMMIT`` from the local hub
  cache, else the revision asked for), since a hub is not read to fingerprint.

A file under :data:`FAST_PATH_MIN_BYTES` (64 MiB) is hashed whenever a command reads it (once
per :class:`FileDigests` that remembers, e.g. a run's driver). The *fast path* is an
optimisation for large files (model weights, hidden states of full-size sets), not a proof: a
large file's digest is reused while its size, mtime, ctime and inode are unchanged. That
catches every rewrite through ``write`` (ctime cannot be set back), but not one through a
writable memory map, which on some filesystems (tmpfs) changes none of the four; such a file
is read again only with :func:`verify_inputs` (``--verify-inputs``). :class:`FileDigests` keeps
the large files' entries in a dictionary the caller may persist (a run's ``state.json``);
:func:`digest` uses one per process, and remembers large files in a small on-disk cache under
``$XDG_CACHE_HOME/dprm`` so a rerun does not read gigabytes again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Files at least this large may take the fast path (their digest reused while size, mtime,
#: ctime and inode are unchanged); smaller ones are always read. Hashing runs at roughly
#: 0.4-1.5 GB/s, so an always-read file costs at most about 0.15 s: the question files,
#: labels and sets of small and medium runs are all read, while model weights (1-5 GB shards)
#: and the hidden states of full-size sets, where reading every byte on every resume would
#: cost minutes, are not.
FAST_PATH_MIN_BYTES = 64 << 20
#: set (to "1") while inputs are verified: every file is read, the fast path off; an
#: environment variable so that worker processes (``tune --jobs``) inherit it
VERIFY_ENV = "DPRM_VERIFY_INPUTS"
#: entries kept in the on-disk cache (oldest dropped first)
DISK_CACHE_ENTRIES = 512


def hash_file(path: Path) -> str:
    """SHA-256 (16 hex digits) of a file's bytes."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def stat_key(stat: os.stat_result) -> list[int]:
    """What must be unchanged for a recorded hash to be reused without reading the file.

    ``st_ctime_ns`` is the point: any write to a file (or a rename onto it) sets its change
    time, and unlike the modification time no user tool can set it back, so a file rewritten in
    place with its size and mtime restored is still read again.
    """
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def _visible_files(folder: Path) -> list[Path]:
    """Files under ``folder`` (sorted), without those under a name starting with ``.``."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


def verifying() -> bool:
    """Whether inputs are being verified (every file read: :func:`verify_inputs`)."""
    return os.environ.get(VERIFY_ENV, "") not in ("", "0")


@contextlib.contextmanager
def verify_inputs(on: bool = True) -> Iterator[None]:
    """Read every input file while the block runs (``--verify-inputs``): no digest is taken
    from a recorded stat, whatever the file's size; the records are refreshed."""
    if not on:
        yield
        return
    before = os.environ.get(VERIFY_ENV)
    os.environ[VERIFY_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(VERIFY_ENV, None)
        else:
            os.environ[VERIFY_ENV] = before


class FileDigests:
    """Content digests of files and folders, with a stat-keyed cache (see the module docstring).

    Args:
        cache: ``{"files": {path: [size, mtime_ns, ctime_ns, inode, digest]}, "last": {name:
            digest}}``, updated in place; ``files`` holds the files of the fast path (at least
            :data:`FAST_PATH_MIN_BYTES`); ``last`` is the latest digest seen for each path, the
            stand-in for a data set that was deleted after use (see :meth:`digest`).
        root: paths inside it are named relative to it (a run directory copied or moved keeps
            its names).
        disk: also keep the digests of large files in the on-disk cache (:func:`disk_cache`).
        remember: reuse a small file's digest for the life of this object while its stat is
            unchanged (a run's driver reads the same sets for many units); never persisted.
    """

    def __init__(
        self,
        cache: dict[str, Any] | None = None,
        root: Path | None = None,
        disk: bool = False,
        remember: bool = True,
    ):
        self.root = Path(root).resolve() if root is not None else None
        self.cache = cache if cache is not None else {}
        self.files: dict[str, list] = self.cache.setdefault("files", {})
        self.last: dict[str, str] = self.cache.setdefault("last", {})
        self.disk = disk
        self.remember = remember
        self.seen: dict[str, list] = {}  # read by this object: [*stat_key, digest]
        self.hashed = 0  # files read (tests and logs: the fast path at work)

    def file(self, path: Path) -> str:
        """The digest of one file: read, or for a large file from the fast path (see the module
        docstring)."""
        path = Path(path)
        key = str(path.resolve())
        stat = path.stat()
        now = stat_key(stat)
        big = stat.st_size >= FAST_PATH_MIN_BYTES
        known = self.seen.get(key) if self.remember else None
        if known is None and big and not verifying():
            known = self.files.get(key)
            if known is None and self.disk:
                known = _disk_lookup(key)
        if known is not None and known[:4] == now:
            if big:
                self.files[key] = known
            return known[4]
        digest = hash_file(path)
        self.hashed += 1
        if stat_key(path.stat()) != now:  # written while it was read: remember nothing
            return digest
        entry = now + [digest]
        if self.remember:
            self.seen[key] = entry
        if big:
            self.files[key] = entry
            if self.disk:
                _disk_store(key, entry)
        else:  # a record from before small files were always read
            self.files.pop(key, None)
        return digest

    def current(self, path: Path) -> str | None:
        """The digest of a file or folder as it is now (None if it does not exist)."""
        path = Path(path)
        if path.is_file():
            digest = self.file(path)
        elif path.is_dir():
            whole = hashlib.sha256()
            for p in _visible_files(path):
                whole.update(f"{p.relative_to(path).as_posix()}\0{self.file(p)}\n".encode())
            digest = "dir:" + whole.hexdigest()[:16]
        else:
            return None
        self.last[self.name(path)] = digest
        return digest

    def name(self, path: Path) -> str:
        """A path's name in records: relative to ``root`` when inside it, else absolute."""
        path = Path(path).resolve()
        if self.root is not None and path.is_relative_to(self.root):
            return path.relative_to(self.root).as_posix()
        return str(path)

    def digest(self, path: Path) -> str | None:
        """The digest of an input: as it is now, or, if it is gone, as it was last seen.

        A unit's inputs are fingerprinted when its stage starts. A synthetic world deleted after
        use (``paper``) is regenerated byte for byte when a later unit needs it, so the digest it
        had stands for it meanwhile; a path never seen is None.
        """
        now = self.current(path)
        return now if now is not None else self.last.get(self.name(path))

    def prune(self) -> None:
        """Forget files that no longer exist (the cache does not grow with deleted worlds)."""
        for key in [k for k in self.files if not Path(k).exists()]:
            del self.files[key]


# ----------------------------------------------------------------------------- one per process
_PROCESS = FileDigests(disk=True, remember=False)


def digest(path: str | os.PathLike) -> str | None:
    """The content digest of a file or folder now (None if it does not exist).

    Uses this process's :class:`FileDigests` (and the on-disk cache for large files); small
    files are read on every call.
    """
    return _PROCESS.current(Path(path))


def frame_digest(records: Any, *arrays: Any) -> str:
    """The content digest of data held in memory: a DataFrame's rows and numpy arrays.

    Args:
        records: a pandas DataFrame (its values, row order and dtypes; not its index).
        arrays: numpy arrays (e.g. hidden states [N, D]), by their bytes.

    Returns:
        ``memory:`` and 16 hex digits.
    """
    import numpy as np
    import pandas as pd

    whole = hashlib.sha256()
    whole.update(pd.util.hash_pandas_object(records, index=False).to_numpy().tobytes())
    for array in arrays:
        whole.update(str(array.dtype).encode() + str(array.shape).encode())
        whole.update(np.ascontiguousarray(array).tobytes())
    return "memory:" + whole.hexdigest()[:16]


def model_digest(model: str | os.PathLike, revision: str | None = None) -> str:
    """The identity of a model a command reads: its content, or its hub revision.

    Args:
        model: a local checkpoint (folder or file) or a hub id.
        revision: the hub revision asked for (None: ``main``); ignored for a local path.

    Returns:
        ``dir:...`` / a file digest for a local path; ``hub:ID@COMMIT`` for a hub id whose
        revision the local hub cache resolves, else ``hub:ID@REVISION``.
    """
    if not str(model):
        return ""
    local = Path(model).expanduser()
    if local.exists():
        return digest(local) or ""
    asked = revision or "main"
    return f"hub:{model}@{_hub_commit(str(model), asked) or asked}"


def _hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home) / "hub"


def _hub_commit(repo_id: str, revision: str) -> str | None:
    """The commit a hub revision resolved to when it was downloaded (None if not cached)."""
    if len(revision) == 40 and all(c in "0123456789abcdef" for c in revision):
        return revision
    ref = _hub_cache() / f"models--{repo_id.replace('/', '--')}" / "refs" / revision
    try:
        return ref.read_text().strip() or None
    except OSError:
        return None


# ----------------------------------------------------------------------------- on-disk cache
def disk_cache() -> Path:
    """The on-disk digest cache of large files (``$XDG_CACHE_HOME/dprm/digests.json``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(root) / "dprm" / "digests.json"


def _disk_read() -> dict[str, list]:
    try:
        data = json.loads(disk_cache().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _disk_lookup(key: str) -> list | None:
    entry = _disk_read().get(key)
    ok = isinstance(entry, list) and len(entry) == 5 and isinstance(entry[4], str)
    return entry if ok else None


def _disk_store(key: str, entry: list) -> None:
    """Remember one large file's digest (best effort: a cache that cannot be written is skipped)."""
    path = disk_cache()
    data = _disk_read()
    data.pop(key, None)
    data[key] = entry
    while len(data) > DISK_CACHE_ENTRIES:
        data.pop(next(iter(data)))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        pass
