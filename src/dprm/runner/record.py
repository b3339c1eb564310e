"""``OUT/run.json``: a run's configuration, library versions, timing and reused units."""

from __future__ import annotations

import platform
import time
from typing import TYPE_CHECKING, Any

from dprm.io import read_json, write_json
from dprm.runner.config import RunConfig, config_dict
from dprm.runner.layout import Layout

if TYPE_CHECKING:
    from dprm.runner.pipeline import Pipeline


def versions() -> dict[str, str]:
    import numpy
    import pandas
    import torch

    from dprm.version import __version__

    out = {
        "dprm": __version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pandas": pandas.__version__,
        "python": platform.python_version(),
    }
    try:
        import matplotlib

        out["matplotlib"] = matplotlib.__version__
    except ImportError:  # pragma: no cover
        pass
    return out


def resolved_train_configs(layout: Layout, config: RunConfig) -> dict[str, Any]:
    """The resolved hyper-parameters of each method, read back from its first saved model."""
    configs = {}
    for method in config.methods:
        for world in config.worlds:
            path = layout.model_dir(world, method, config.seeds[0]) / "config.json"
            if path.exists():
                configs[method] = read_json(path).get("config", {})
                break
    return configs


def _by_stage(unit_seconds: dict[str, float]) -> dict[str, float]:
    """Seconds of all recorded units per stage (the key's first component), all invocations."""
    out: dict[str, float] = {}
    for key, seconds in unit_seconds.items():
        stage = key.split("/", 1)[0]
        out[stage] = round(out.get(stage, 0.0) + float(seconds), 2)
    return out


def run_record(pipe: Pipeline, *, started_at: float, resumed: bool) -> dict[str, Any]:
    """The content of ``run.json``: configuration, versions, timing, reused units."""
    unit_seconds = {k: v["seconds"] for k, v in pipe.state.data["done"].items()}
    return {
        "config": config_dict(pipe.config),
        "versions": versions(),
        "train_configs": resolved_train_configs(pipe.layout, pipe.config),
        "wall_time_s": round(time.perf_counter() - started_at, 2),
        "stage_timing": pipe.timing,
        "unit_seconds_total": round(sum(unit_seconds.values()), 2),
        "unit_seconds_by_stage": _by_stage(unit_seconds),
        "reused_units": sorted(pipe.reused),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "resumed": resumed,
    }


def write_run_record(layout: Layout, run: dict[str, Any]) -> None:
    """Write ``run.json`` (the only writer of that file; strict JSON)."""
    write_json(layout.run_record, run, allow_nan=False)
