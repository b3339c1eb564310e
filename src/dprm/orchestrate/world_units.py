"""The world-data units of a run: a synthetic world on disk, and the fingerprint of a world's data.

A synthetic world is written deterministically from its name and size (``synth`` units); a world
of real data (a recipe's) is fingerprinted by the settings that produced it. Every later unit
names :func:`world_inputs` among its inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dprm.runner.layout import WORLD_SETS
from dprm.runner.units import Unit

if TYPE_CHECKING:
    from dprm.runner.pipeline import Pipeline


def ensure_world(pipe: Pipeline, world: str) -> Path:
    """Write the synthetic world unless every set it promises (:data:`WORLD_SETS`) is on disk.

    Each set is published whole (atomically, ``meta.json`` inside), so a present ``meta.json``
    is a complete set; a world killed part-way (its last set missing) is written again
    (deterministic from the world name and size).
    """
    from dprm.data.synth import write_world

    path = pipe.world_dir(world)
    if not all((path / s / k / "meta.json").exists() for s, k in WORLD_SETS):
        write_world(path, world, size=pipe.config.size, progress=False, overwrite=True)
    return path


def world_inputs(pipe: Pipeline, world: str, kind: str | None = None) -> dict[str, Any]:
    """The fingerprint of a world's data (``kind``: of its ``calib`` or ``bon`` sets only).

    A synthetic world is generated deterministically from its name and size; a world of real
    data (a recipe's) is fingerprinted by the settings that produced each of its sets
    (``pipe.world_data``: ``"split/kind"`` -> settings). A unit that reads only the calibration
    sets (training, evaluation) passes ``kind="calib"``: the pools' settings (``[bon]``) do not
    change its result, so they are not part of its fingerprint.
    """
    if world in pipe.world_data:
        data = pipe.world_data[world]
        if kind is not None:
            data = {k: v for k, v in data.items() if k.endswith(f"/{kind}")}
        return {"world": world, "data": data}
    return {"world": world, "size": pipe.config.size}


def promised_sets(pipe: Pipeline, world: str) -> set[str]:
    """The sets (``"split/kind"``) a world holds once its data stages ran: every set of a
    synthetic world; those a recipe asks for (``pipe.world_data``) of a real-data world. A set
    on disk that the world does not promise (left by an earlier recipe) is never read."""
    if world in pipe.world_data:
        return set(pipe.world_data[world])
    return {f"{s}/{k}" for s, k in WORLD_SETS}


def synth_units(pipe: Pipeline, world: str) -> list[Unit]:
    path = pipe.world_dir(world)
    outputs = [path / s / k / "meta.json" for s, k in WORLD_SETS]
    # a world deleted after use is only regenerated when a later unit needs it
    key = f"synth/{world}"
    if key in pipe.state.data["done"]:
        outputs = []

    def run() -> dict:
        ensure_world(pipe, world)
        return {"size": pipe.config.size}

    return [Unit(key=key, outputs=outputs, run=run, inputs=world_inputs(pipe, world), world=world)]
