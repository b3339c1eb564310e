"""``OUT/state.json``: the finished units of a run and the fingerprint each ran with."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dprm.io import read_json, write_json
from dprm.runner.layout import Layout


class State:
    """``state.json``: completed units (key -> record with fingerprint), written atomically."""

    def __init__(self, out: Path):
        self.path = Layout(out).state
        self.data: dict[str, Any] = (
            read_json(self.path) if self.path.exists() else {"version": 2, "done": {}}
        )

    def done(self, key: str, outputs: list[Path], inputs: str | None = None) -> bool:
        """Recorded, with the same input fingerprint (when given), and every output present."""
        record = self.data["done"].get(key)
        if record is None or (inputs is not None and record.get("inputs") != inputs):
            return False
        return all(p.exists() for p in outputs)

    def mark(self, key: str, seconds: float, **extra) -> None:
        self.data["done"][key] = {
            "seconds": round(seconds, 3),
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **extra,
        }
        write_json(self.path, self.data)
