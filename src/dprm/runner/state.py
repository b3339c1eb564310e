"""``OUT/state.json``: the finished units of a run, the fingerprint each ran with and the
digest of each output it wrote; and the digests of the files the run has read
(:class:`~dprm.runner.fingerprints.FileDigests`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dprm.io import read_json, write_json
from dprm.runner.fingerprints import FileDigests
from dprm.runner.layout import Layout

#: version 3: units record their outputs' digests; the file digest cache
VERSION = 3


class State:
    """``state.json``: completed units (key -> record with fingerprint), written atomically."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.path = Layout(self.out).state
        self.data: dict[str, Any] = (
            read_json(self.path) if self.path.exists() else {"version": VERSION, "done": {}}
        )
        self.digests = FileDigests(self.data.setdefault("digests", {}), root=self.out)

    def name_of(self, path: Path) -> str:
        """A path's name in records: relative to the run directory when inside it."""
        return self.digests.name(path)

    def output_digests(self, outputs: list[Path]) -> dict[str, str | None]:
        return {self.name_of(p): self.digests.current(p) for p in outputs}

    def changed(self, key: str, outputs: list[Path]) -> list[Path]:
        """Outputs of a recorded unit that exist but differ from what it wrote (damaged, edited)."""
        recorded = (self.data["done"].get(key) or {}).get("outputs")
        if not recorded:
            return []  # recorded before outputs had digests (state version 2): trusted
        out = []
        for path in outputs:
            name = self.name_of(path)
            exists = name in recorded and Path(path).exists()
            if exists and self.digests.current(path) != recorded[name]:
                out.append(Path(path))
        return out

    def done(self, key: str, outputs: list[Path], inputs: str | None = None) -> bool:
        """Recorded, with the same input fingerprint (when given), and every output present and
        as it was written."""
        record = self.data["done"].get(key)
        if record is None or (inputs is not None and record.get("inputs") != inputs):
            return False
        return all(p.exists() for p in outputs) and not self.changed(key, outputs)

    def mark(self, key: str, seconds: float, outputs: list[Path] | None = None, **extra) -> None:
        """Record a finished unit (with the digest of each of its ``outputs``) and save."""
        record: dict[str, Any] = {
            "seconds": round(seconds, 3),
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **extra,
        }
        if outputs:
            record["outputs"] = self.output_digests(outputs)
        self.data["done"][key] = record
        self.save()

    def save(self) -> None:
        self.data["version"] = VERSION
        write_json(self.path, self.data)
