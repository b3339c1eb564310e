"""A GPU stage's output cut into shard units and the merge unit that joins them.

A shard is a slice of the questions (:class:`dprm.llm.shard.Shard`); ``count = min(shards,
questions)``, and with one shard the unit writes the final output directly. Every shard unit
asks its executor for one engine (``resources``); a merge is cheap and runs in the driver.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dprm.digests import model_digest
from dprm.recipe.bodies import merge
from dprm.runner.units import Unit

if TYPE_CHECKING:
    from dprm.runner.pipeline import Pipeline

#: resources of a unit cheap enough to run in the driver (question files, merges of shards): no
#: cluster job or task is worth its start-up, and engine workers stay up around it
DRIVER = {"driver": True}


def count_questions(path: Path, column: str = "question_id") -> int:
    """Questions in a stage's input (0 if it is not there: its producer failed)."""
    if not path.exists():
        return 0
    if path.suffix == ".jsonl":
        from dprm.llm.questions import read_questions

        return len(read_questions(path))
    import pyarrow.parquet as pq

    return len(set(pq.read_table(path, columns=[column]).column(column).to_pylist()))


def sharded(
    pipe: Pipeline,
    key: str,
    final: Path,
    items: int,
    shards: int,
    body,
    inputs: dict[str, Any],
    resources: dict[str, Any],
    reads: dict[str, str | None],
) -> tuple[list[Unit], Unit | None]:
    """Shard units of one output (``count = min(shards, items)``) and its merge unit (or None).

    ``body(index, count)`` is the unit's picklable work; with one shard it writes ``final``
    directly and no merge is needed. ``reads`` are the digests of what every shard reads; the
    merge reads the shards.
    """
    from dprm.llm.shard import Shard, output_path

    count = max(1, min(shards, items))
    units = []
    for i in range(count):
        path = output_path(final, Shard(i, count))
        unit_key = key if count == 1 else f"{key}/shard{i:03d}-of-{count:03d}"
        units.append(
            Unit(
                key=unit_key,
                outputs=[path],
                run=body(i, count),
                inputs=inputs | {"shard": [i, count]},
                needs_world=False,
                parallel=True,
                resources=resources,
                reads=reads,
            )
        )
    if count == 1:
        return units, None
    joined = Unit(
        key=f"{key}/merge",
        outputs=[final],
        run=functools.partial(merge, str(final)),
        inputs=inputs | {"shards": count},
        needs_world=False,
        parallel=True,
        resources=DRIVER,
        reads=pipe.reads(*(u.outputs[0] for u in units)),
    )
    return units, joined


def model_reads(pipe: Pipeline, model: str) -> dict[str, str | None]:
    """``Unit.reads`` of a model: a local checkpoint by content, a hub id by its revision."""
    if model and Path(model).expanduser().exists():
        return pipe.reads(Path(model).expanduser())
    return {f"hub:{model}": model_digest(model)}
