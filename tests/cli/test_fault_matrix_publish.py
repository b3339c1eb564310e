"""Fault matrix, publish order: the data first, then what vouches for it.

A sidecar, a marker or a state entry is published only after the data it describes, so a job
killed (or a disk filled) between the two never leaves a record vouching for data it does not
describe: the next run redoes the work. A full disk is a file-size limit (``RLIMIT_FSIZE``) in
a subprocess, so only the big write fails.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("transformers")
pytest.importorskip("math_verify")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from llm import tiny_models  # noqa: E402

SAMPLING = ["--n", "2", "--grader-workers", "1", "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def lm(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("publish-models")
    tokenizers = tiny_models.build_tokenizers(root / "tok")
    return tiny_models.build_bigram_lm(tokenizers["qwen"], root / "tiny-qwen-lm")


def dprm(*argv: str, file_size: int | None = None) -> subprocess.CompletedProcess:
    """``python -m dprm.cli ARGV`` in a subprocess, with at most ``file_size`` bytes per file."""

    def limit() -> None:
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "dprm.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        preexec_fn=limit,
    )


def questions_file(path: Path, words: str) -> Path:
    rows = [
        {"question_id": f"q/{i}", "question": f"What is {i} + {words}?", "answer": str(i)}
        for i in range(6)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def generate(questions: Path, lm: Path, out: Path) -> list[str]:
    return ["generate", "--questions", str(questions), "--model", str(lm),
            "--max-new-tokens", "16", "--questions-per-part", "1", "--out", str(out),
            *SAMPLING]  # fmt: skip


def test_generate_full_disk_on_a_rerun_never_keeps_the_old_trajectories(lm, tmp_path):
    """The sidecar was written before the table: a rerun on changed questions that hit a full
    disk left the new sidecar over the old table, and the next rerun skipped, exit 0, with the
    trajectories of the old questions."""
    out = tmp_path / "traj.parquet"
    questions = questions_file(tmp_path / "questions.jsonl", "one")
    assert dprm(*generate(questions, lm, out)).returncode == 0
    size = out.stat().st_size
    questions_file(questions, "two")  # changed: the rerun must make the table again
    # parts (one question each) fit under the limit; the whole table does not
    full = dprm(*generate(questions, lm, out), file_size=size - 64)
    assert full.returncode != 0, full.stderr[-2000:]
    assert "What is 0 + one?" in set(pd.read_parquet(out)["question"])  # the old table stays
    again = dprm(*generate(questions, lm, out))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "already finished" not in again.stdout
    assert dprm(*generate(questions, lm, tmp_path / "fresh.parquet")).returncode == 0
    resumed, fresh = pd.read_parquet(out), pd.read_parquet(tmp_path / "fresh.parquet")
    assert "What is 0 + two?" in set(resumed["question"])
    pd.testing.assert_frame_equal(resumed, fresh)


def test_generate_with_a_longer_grader_timeout_is_not_finished(lm, tmp_path):
    """A rerun with a larger --grader-timeout was skipped as finished: answers that had timed
    out (graded wrong) stayed wrong. It is a setting of the output now (--overwrite redoes it)."""
    out = tmp_path / "traj.parquet"
    questions = questions_file(tmp_path / "questions.jsonl", "one")
    assert dprm(*generate(questions, lm, out)).returncode == 0
    longer = dprm(*generate(questions, lm, out), "--grader-timeout", "30")
    assert "already finished" not in longer.stdout
    assert longer.returncode == 2 and "different settings" in longer.stderr, longer.stderr
    again = dprm(*generate(questions, lm, out), "--grader-timeout", "30", "--overwrite")
    assert again.returncode == 0, again.stderr[-2000:]
    assert (
        "already finished" in dprm(*generate(questions, lm, out), "--grader-timeout", "30").stdout
    )
