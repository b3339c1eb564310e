"""Row-for-row comparison of two recipe runs' outputs (data stages, Base and isotonic results)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

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
        assert read_json(a / path)["splits"] == read_json(b / path)["splits"], method
