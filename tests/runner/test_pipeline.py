"""A resume redoes what reads a changed input, and says so once per changed input."""

from __future__ import annotations

import os
from pathlib import Path

from dprm.orchestrate.grid import resolve
from dprm.runner.pipeline import Pipeline
from dprm.runner.units import Unit


def _copy_upper(source: Path, target: Path, ran: list[str], key: str) -> None:
    ran.append(key)
    target.write_text(source.read_text().upper())


def _resume(out: Path, source: Path, logs: list[str], ran: list[str]) -> None:
    """Two stages: ``a`` reads ``source``, ``b`` reads what ``a`` wrote (units built per stage,
    as the stage builders do, so ``b`` sees ``a``'s new output)."""
    pipe = Pipeline(out, resolve("tiny", keep_worlds=False), progress=False, log=logs.append)
    first, second = out / "a.txt", out / "b.txt"

    def unit(key: str, reads: Path, writes: Path) -> Unit:
        return Unit(
            key=key,
            outputs=[writes],
            run=lambda: _copy_upper(reads, writes, ran, key),
            needs_world=False,
            reads=pipe.reads(reads),
        )

    pipe.run_stage("a", [unit("a", source, first)])
    pipe.run_stage("b", [unit("b", first, second)])


def test_a_changed_input_redoes_its_readers_and_is_said_once(tmp_path):
    source = tmp_path / "labels.txt"
    source.write_text("yes")
    out = tmp_path / "run"
    out.mkdir()
    logs: list[str] = []
    ran: list[str] = []
    _resume(out, source, logs, ran)
    assert ran == ["a", "b"]
    _resume(out, source, logs, ran)
    assert ran == ["a", "b"] and not logs  # nothing changed: nothing redone, nothing said

    stat = source.stat()
    source.write_text("yep")
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    _resume(out, source, logs, ran)
    assert ran == ["a", "b", "a", "b"]
    assert (out / "b.txt").read_text() == "YEP"
    assert len(logs) == 1 and str(source.resolve()) in logs[0] and "changed" in logs[0], logs
