"""Resumable per-question JSONL logs and the run directory layout of ``dprm solve``.

One JSON object per finished question, appended and flushed to disk (``fsync``) as soon as the
question is done. A run killed part-way leaves at most one partial last line; reopening the log
drops it (rewriting the file atomically) so the question is redone, and every complete line is
kept. A rerun skips the questions already in the log.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dprm.io import DataError, _json_default, atomic_path, read_json, write_json

RUN_FILE = "run.json"


def shard_suffix(index: int, count: int) -> str:
    """``""`` for an unsharded run, else ``".shard-00003-of-00008"`` (file-name infix)."""
    return "" if count == 1 else f".shard-{index:05d}-of-{count:05d}"


class ResultLog:
    """An append-only JSONL file of finished questions keyed by ``question_id``.

    Args:
        path: the ``.jsonl`` file (created on the first append).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.records: dict[str, dict[str, Any]] = {}
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        complete, tail = lines[:-1], lines[-1]
        if tail.strip():
            # A partial last line (the run died mid-write): keep every complete line, drop it.
            with atomic_path(self.path) as tmp:
                tmp.write_bytes(b"".join(line + b"\n" for line in complete))
        for number, line in enumerate(complete, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(self.path, f"line {number}: not valid JSON ({err})") from err
            if not isinstance(record, dict) or not isinstance(record.get("question_id"), str):
                raise DataError(
                    self.path, f"line {number}: expected an object with a string 'question_id'"
                )
            self.records[self.key(record)] = record

    def key(self, record: dict[str, Any]) -> Any:
        """The record's key in :attr:`records` (a later line with the same key wins)."""
        return record["question_id"]

    def __contains__(self, key: Any) -> bool:
        return key in self.records

    def __len__(self) -> int:
        return len(self.records)

    def append(self, record: dict[str, Any]) -> None:
        """Append one finished question and force it to disk."""
        line = json.dumps(record, default=_json_default, ensure_ascii=False, allow_nan=False)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.records[self.key(record)] = record


def read_results(out: str | os.PathLike, mode: str) -> list[dict[str, Any]]:
    """All finished records of ``mode`` in a run directory (every shard's log, in file order)."""
    out = Path(out)
    records: list[dict[str, Any]] = []
    for path in sorted(out.glob(f"{mode}*.jsonl")):
        records.extend(ResultLog(path).records.values())
    return records


def check_run_config(out: Path, config: dict[str, Any], keys: Iterable[str]) -> None:
    """Refuse to resume a run directory made with other settings (``keys`` must match).

    The first run writes ``run.json`` (the resolved config, package version, seed); a rerun with
    a different value of any key in ``keys`` fails instead of mixing two configurations, and so
    does a ``run.json`` that lacks one of them (written by another dprm version).
    """
    path = out / RUN_FILE
    if not path.exists():
        write_json(path, config)
        return
    found = read_json(path)
    absent = [k for k in keys if k not in found]
    if absent:
        raise DataError(
            path,
            f"has no {', '.join(map(repr, absent))} (written by another dprm version); "
            "use a new --out",
        )
    found = {k: found[k] for k in keys}
    diff = {k: (found[k], config.get(k)) for k in keys if found[k] != config.get(k)}
    if diff:
        detail = "; ".join(f"{k}: was {a!r}, now {b!r}" for k, (a, b) in diff.items())
        raise DataError(
            path,
            f"this run directory was made with other settings ({detail}); use a new --out or the same flags",
        )


#: the key of ``run.json`` holding the content digests of what the run reads
INPUT_DIGESTS = "input_digests"


def check_run_inputs(out: Path, digests: dict[str, str]) -> None:
    """Refuse to resume a run directory whose inputs changed by content since it started.

    ``digests`` (input name -> :func:`dprm.digests.model_digest`) is what this run reads; the
    first run recorded its own in ``run.json`` (:func:`check_run_config` writes it first).
    Every finished question depends on every input, so a changed one makes the whole folder
    stale: the run is refused with the reason, never continued.
    """
    found = read_json(out / RUN_FILE).get(INPUT_DIGESTS)
    if not isinstance(found, dict):
        raise DataError(
            out / RUN_FILE,
            "this run directory recorded no content digests of its inputs (made by an older "
            "dprm), so a resume cannot tell whether they changed; use a new --out",
        )
    changed = sorted(k for k in {*found, *digests} if found.get(k) != digests.get(k))
    if changed:
        flags = ", ".join("--" + k.replace("_", "-") for k in changed)
        raise DataError(
            out / RUN_FILE,
            f"the content of {flags} changed since this run directory was started (content "
            "digest); use a new --out",
        )
