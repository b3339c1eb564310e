"""Row-for-row comparison of two recipe runs' outputs (data stages, Base and isotonic results)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprm.io import read_json

WORLD = "tiny-lm__tiny-prm"


def assert_same_outputs(a: Path, b: Path) -> None:
    """Every data-stage output and the Base / isotonic evaluations are identical, row for row."""
    from dprm.data.contract import read_bon_set, read_calibration_set

    for split in ("train", "id", "ood"):
        names = ["trajectories.parquet", "labels.parquet"] + (
            ["pool.parquet"] if split != "train" else []
        )
        for name in names:
            left = pd.read_parquet(a / "data" / "tiny-lm" / split / name)
            right = pd.read_parquet(b / "data" / "tiny-lm" / split / name)
            pd.testing.assert_frame_equal(left, right)
        left = read_calibration_set(a / "worlds" / WORLD / split / "calib")
        right = read_calibration_set(b / "worlds" / WORLD / split / "calib")
        pd.testing.assert_frame_equal(left.records, right.records)
        np.testing.assert_array_equal(np.asarray(left.hidden), np.asarray(right.hidden))
        if split != "train":
            left = read_bon_set(a / "worlds" / WORLD / split / "bon")
            right = read_bon_set(b / "worlds" / WORLD / split / "bon")
            pd.testing.assert_frame_equal(left.responses, right.responses)
            np.testing.assert_array_equal(np.asarray(left.hidden), np.asarray(right.hidden))
    for method in ("base", "isotonic"):
        path = Path("eval") / WORLD / method / "seed0.json"
        # the data above match to assert_frame_equal's rtol (1e-5), not bit for bit: the PRM's
        # float32 scores can differ in the last bits when a worker runs another thread count
        # (measured: 1e-9 relative in Brier), so the metrics are held to a relative 1e-6
        left, right = read_json(a / path)["splits"], read_json(b / path)["splits"]
        _assert_close(left, right, method)


def _assert_close(left, right, where: str) -> None:
    """Nested JSON values equal: the same keys, lengths and strings, numbers to a relative 1e-6."""
    if isinstance(left, dict):
        assert isinstance(right, dict) and left.keys() == right.keys(), where
        for key in left:
            _assert_close(left[key], right[key], f"{where}/{key}")
    elif isinstance(left, list):
        assert isinstance(right, list) and len(left) == len(right), where
        for i, (a, b) in enumerate(zip(left, right, strict=True)):
            _assert_close(a, b, f"{where}[{i}]")
    elif isinstance(left, float) or isinstance(right, float):
        assert right == pytest.approx(left, rel=1e-6, nan_ok=True), where
    else:
        assert left == right, where


def made_units(out: Path) -> dict[str, int]:
    """Units per stage a finished run made (run.json's stage timing: run + reused), without
    the report and its parts (tables, figures)."""
    timing = read_json(out / "run.json")["stage_timing"]
    made = {stage: t["units"] + t["skipped"] for stage, t in timing.items()}
    return {s: n for s, n in made.items() if n and s not in ("report", "tables", "figures")}


def planned_units(recipe, shards: int) -> dict[str, int]:
    """Units per stage ``dprm run --dry-run`` plans for ``recipe``, without the report."""
    from dprm.recipe.plan import planned_stages

    return {s.name: s.units for s in planned_stages(recipe, shards) if s.name != "report"}
