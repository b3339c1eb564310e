"""tools/world_dev.py: the development questions are disjoint from every test split and from
each other, of the documented sizes and distributions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world_dev():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        spec = importlib.util.spec_from_file_location("world_dev", ROOT / "tools" / "world_dev.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(ROOT / "tools"))


def test_development_blocks_share_no_question_with_the_test_splits_or_each_other(world_dev):
    from dprm.llm.tasks.arith_sets import set_rows

    blocks = [world_dev.dev_rows(1), world_dev.dev_rows(2)]
    tests = {r["question"] for split in ("id", "ood", "id2", "ood2") for r in set_rows(split)}
    seen: set[str] = set()
    for rows in blocks:
        assert [len(rows["id"]), len(rows["ood"])] == [200, 100]
        questions = {r["question"] for split in rows.values() for r in split}
        assert len(questions) == 300 and not questions & tests and not questions & seen
        seen |= questions
        # OOD-like: the OOD distribution's 5-6 operations; ID-like: arith-train's 2-4
        assert {r["level"] for r in rows["ood"]} == {"5", "6"}
        assert {r["level"] for r in rows["id"]} <= {"2", "3", "4"}


def test_an_unknown_block_fails_in_one_line(world_dev):
    with pytest.raises(SystemExit, match="--block must be 1 or 2"):
        world_dev.dev_rows(3)


def test_an_out_inside_the_models_is_refused_before_any_work(world_dev, tmp_path):
    for name in ("generator", "prm"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    with pytest.raises(SystemExit, match="inside --models"):
        world_dev.main(["--models", str(tmp_path), "--out", str(tmp_path / "prm" / "dev.json")])
    assert not (tmp_path / "prm" / "dev.json").exists()
