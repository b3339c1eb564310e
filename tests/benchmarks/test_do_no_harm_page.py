"""do_no_harm.py's stored rows: the trained world's rows follow its data, older files carry over."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "experiments"))
import do_no_harm as dnh  # noqa: E402


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    for split in ("train", "id", "ood"):
        calib = run / "worlds" / "gen__prm" / split / "calib"
        calib.mkdir(parents=True)
        (calib / "records.parquet").write_bytes(split.encode())
    return run


def test_the_trained_worlds_data_digest_follows_its_sets(tmp_path):
    run = _run(tmp_path)
    before = dnh.trained_worlds(run)["trained gen__prm"]["data"]
    assert dnh.trained_worlds(run)["trained gen__prm"]["data"] == before
    (run / "worlds" / "gen__prm" / "id" / "calib" / "records.parquet").write_bytes(b"other")
    assert dnh.trained_worlds(run)["trained gen__prm"]["data"] != before


def _row(world: str, arm: str, data: str = "") -> dict:
    return {"part": "trained", "world": world, "draw": 201, "method": "binomial", "arm": arm,
            "split": "id", "brier": 0.1, "data": data}  # fmt: skip


def test_rows_of_an_older_header_carry_over_and_drop_removes_one_arm(tmp_path):
    path = tmp_path / "rows.csv"
    old_fields = [f for f in dnh.FIELDS if f != "data"]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(
            f, fieldnames=old_fields, lineterminator="\n", extrasaction="ignore"
        )
        writer.writeheader()
        writer.writerows([_row("w", "recommended"), _row("w", "platt")])
    dnh.append(path, [_row("v", "platt", data="abc")])
    rows = dnh.read(path)
    assert path.read_text().splitlines()[0] == ",".join(dnh.FIELDS)
    assert [(r["world"], r["arm"], r["data"]) for r in rows] == [
        ("w", "recommended", ""), ("w", "platt", ""), ("v", "platt", "abc")
    ]  # fmt: skip
    dnh.drop(path, ("trained", "w", 201, "binomial", "recommended"))
    assert [(r["world"], r["arm"]) for r in dnh.read(path)] == [("w", "platt"), ("v", "platt")]
    assert not path.with_name("rows.csv.part").exists()
