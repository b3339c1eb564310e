"""The pre-registered draws (``draws.toml`` beside this file) and the guard that keeps results
pages on report draws.

Every world a results page reports lists its *development* draws (read while designing and
tuning a method) and its *report* draws (never read while designing). The scripts that compute
a results page's data call :func:`require_report` before computing anything: a development draw,
a draw listed nowhere, or a world not in the file stops the run with one line and exit 2. A twin
world's draw is a world seed (the preset's default seed, :func:`dprm.data.synth.default_seed`,
counts as development: the grids used it); a trained world's draw is a calibrator seed on a
question resample.

Re-rendering a page from data stored before pre-registration existed (``--render``) is not a
new computation and is not checked; the data's ``source.json`` then has no ``draws`` record.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: the pre-registration file
DRAWS_FILE = Path(__file__).resolve().parent / "draws.toml"
#: the draw kinds a world lists, by world kind
DRAW_KEYS = {
    "fitted-twin": ("world_seeds",),
    "twin": ("world_seeds",),
    "trained": ("calibrator_seeds", "question_resamples"),
}


@dataclass(frozen=True)
class WorldDraws:
    """One world's pre-registered draws.

    Attributes:
        name: the world (a twin preset's name, or a trained world's).
        kind: ``fitted-twin``, ``twin`` or ``trained``.
        development, report: draw key (``world_seeds``, ``calibrator_seeds``,
            ``question_resamples``) -> the seeds.
    """

    name: str
    kind: str
    development: dict[str, tuple[int, ...]]
    report: dict[str, tuple[int, ...]]


class PreregistrationError(ValueError):
    """The draws file is malformed, or a run asks for draws it may not report."""


def read_draws(path: Path = DRAWS_FILE) -> dict[str, WorldDraws]:
    """Every world of the draws file, checked: known kinds and keys, report draws disjoint from
    development draws.

    Raises:
        PreregistrationError: naming the file and the world at fault.
    """
    data = tomllib.loads(path.read_text())
    unknown = set(data) - {"worlds"}
    if unknown:
        raise PreregistrationError(f"{path}: unknown top-level keys {sorted(unknown)}")
    out = {}
    for name, entry in data.get("worlds", {}).items():
        kind = entry.get("kind")
        if kind not in DRAW_KEYS:
            raise PreregistrationError(
                f"{path}: world {name!r}: kind {kind!r} not in {list(DRAW_KEYS)}"
            )
        extra = set(entry) - {"kind", "development", "report"}
        if extra:
            raise PreregistrationError(f"{path}: world {name!r}: unknown keys {sorted(extra)}")
        parts = {}
        for part in ("development", "report"):
            table = entry.get(part, {})
            bad = set(table) - set(DRAW_KEYS[kind])
            if bad:
                raise PreregistrationError(
                    f"{path}: world {name!r}: {part} has keys {sorted(bad)}; a {kind} world "
                    f"lists {list(DRAW_KEYS[kind])}"
                )
            parts[part] = {
                key: tuple(int(s) for s in table.get(key, ())) for key in DRAW_KEYS[kind]
            }
        for key in DRAW_KEYS[kind]:
            both = set(parts["development"][key]) & set(parts["report"][key])
            if both:
                raise PreregistrationError(
                    f"{path}: world {name!r}: {key} {sorted(both)} are both development and report"
                )
        out[name] = WorldDraws(name, kind, parts["development"], parts["report"])
    return out


def check_report(
    world: str, draws: dict[str, Iterable[int]], path: Path = DRAWS_FILE
) -> str | None:
    """Why ``draws`` of ``world`` may not make a results page (one line), or None if they may.

    Args:
        world: the world's name in the draws file.
        draws: draw key -> the seeds the run uses (e.g. ``{"world_seeds": [101, 102]}``).
    """
    worlds = read_draws(path)
    if world not in worlds:
        return f"world {world!r} is not pre-registered in {path.name}: add its development and report draws first"
    entry = worlds[world]
    for key, seeds in draws.items():
        if key not in DRAW_KEYS[entry.kind]:
            return f"world {world!r} ({entry.kind}) has no {key}; it lists {list(DRAW_KEYS[entry.kind])}"
        seeds = [int(s) for s in seeds]
        dev = [s for s in seeds if s in entry.development[key]]
        if dev:
            return (
                f"{key} {dev} of world {world!r} are development draws in {path.name}; a results "
                f"page is written from its report draws {list(entry.report[key])} only"
            )
        unlisted = [s for s in seeds if s not in entry.report[key]]
        if unlisted:
            return (
                f"{key} {unlisted} of world {world!r} are not pre-registered report draws in "
                f"{path.name} (report: {list(entry.report[key])})"
            )
    return None


def require_report(
    script: str, world: str, draws: dict[str, Iterable[int]], path: Path = DRAWS_FILE
) -> dict:
    """Stop the run (one line on stderr, exit 2) unless ``draws`` are report draws of ``world``.

    Returns:
        the record a results page's ``source.json`` keeps: world, draws and the file.

    Raises:
        SystemExit(2): development, unlisted or unknown draws, or a malformed draws file.
    """
    try:
        why = check_report(world, draws, path)
    except (PreregistrationError, tomllib.TOMLDecodeError) as err:
        why = str(err)
    if why is not None:
        print(f"{script}: refusing to write a results page: {why}", file=sys.stderr)
        raise SystemExit(2)
    return {"world": world, "draws": {k: [int(s) for s in v] for k, v in draws.items()},
            "file": "benchmarks/experiments/draws.toml"}  # fmt: skip
