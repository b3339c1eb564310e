"""Fingerprints of a unit's inputs: a stable hash of its settings and the content of what it reads.

The content digests themselves (:class:`FileDigests`, the fast path on size, mtime, ctime and
inode) live in :mod:`dprm.digests`, shared with the commands below the run layer.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from dprm.digests import FileDigests

__all__ = ["FileDigests", "content_hash", "fingerprint"]


def fingerprint(obj: Any) -> str:
    """A short, stable hash of a JSON-able object."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def content_hash(directory: Path) -> str:
    """SHA-256 (16 hex digits) of every file of a directory (names and bytes, sorted)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]
