"""One bad response never kills a part: unscorable responses are left out, counted and listed;
``--strict`` stops at the first one and names it. Real vocabularies, tiny random weights."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from dprm.cli import main  # noqa: E402
from dprm.data.contract import read_bon_set, read_calibration_set  # noqa: E402
from dprm.io import read_json  # noqa: E402
from fixtures import real_prms  # noqa: E402

from .tiny_models import label_rows  # noqa: E402

pytest.importorskip("sentencepiece", reason="the llm extra installs sentencepiece")
pytest.importorskip("google.protobuf", reason="the llm extra installs protobuf")

GOOD = "## Step 1: 3 + 4 = 7.\n\nThe answer is $\\boxed{7}$."
LONG_QUESTION = "What is " + " plus ".join(str(i) for i in range(200)) + "?"
#: per kind: a response whose steps cannot be found, and a response over max_tokens (64)
BAD = {
    "qwen-prm": {"no_step_tag": "Step 1 <extra_0> hidden tag.\n\nDone."},
    "math-shepherd": {},  # every step gets its tag: no "no_step_tag" case left
}
LONG_RESPONSE = " ".join(["word"] * 200) + "\n\nend"


@pytest.fixture(scope="module")
def prm_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("real-bad")
    return {
        "qwen-prm": real_prms.build_qwen_prm(root / "qwen2.5-math-prm-tiny"),
        "math-shepherd": real_prms.build_shepherd(root / "math-shepherd-tiny"),
    }


def _pool(kind: str) -> pd.DataFrame:
    rows = [("q/0", 0, "What is 3 + 4?", GOOD), ("q/0", 1, "What is 3 + 4?", ""),
            ("q/0", 2, "What is 3 + 4?", GOOD + "\n\n"),  # empty last step: scorable
            ("q/0", 3, "What is 3 + 4?", LONG_RESPONSE),
            ("q/1", 0, LONG_QUESTION, GOOD), ("q/1", 1, LONG_QUESTION, GOOD),
            ("q/2", 0, "What is 2 + 5?", GOOD)]  # fmt: skip
    rows += [("q/2", 1 + i, "What is 2 + 5?", text) for i, text in enumerate(BAD[kind].values())]
    frame = pd.DataFrame(rows, columns=["question_id", "response_id", "question", "response"])
    return frame.assign(answer="7", correct=True)


def _embed(args: list[str]) -> int:
    return main(["embed", *args, "--max-tokens", "64", "--device", "cpu", "--dtype", "float32",
                 "--no-progress", "--questions-per-part", "2"])  # fmt: skip


@pytest.mark.parametrize("kind", ["qwen-prm", "math-shepherd"])
def test_bon_part_writes_every_good_response(prm_dirs, kind, tmp_path, capsys):
    pool = _pool(kind)
    pool.to_parquet(tmp_path / "pool.parquet")
    assert _embed(["--bon", str(tmp_path / "pool.parquet"), "--prm", str(prm_dirs[kind]),
                   "--out", str(tmp_path / "bon")]) == 0  # fmt: skip
    bon = read_bon_set(tmp_path / "bon")
    kept = set(zip(bon.responses["question_id"], bon.responses["response_id"], strict=True))
    assert kept == {("q/0", 0), ("q/0", 2), ("q/2", 0)}
    assert list(bon.questions["question_id"]) == ["q/0", "q/2"]
    meta = read_json(tmp_path / "bon" / "meta.json")
    reasons = sorted((e["question_id"], e["response_id"], e["reason"]) for e in meta["unscorable"])
    expected = [("q/0", 1, "empty"), ("q/0", 3, "over_long"), ("q/1", None, "over_long")]
    expected += [("q/2", 1, reason) for reason in BAD[kind]]
    assert sorted(reasons, key=str) == sorted(expected, key=str)
    stats = meta["stats"]
    assert stats["responses"] == 3 and stats["responses_unscorable"] == len(pool) - 3
    assert "cannot score" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["qwen-prm", "math-shepherd"])
def test_calibration_part_writes_every_good_row(prm_dirs, kind, tmp_path):
    pool = _pool(kind)
    pool = pool[pool["response"] != ""]  # an empty prefix is the question-only row, scorable
    labels = label_rows(pool)
    labels.to_parquet(tmp_path / "labels.parquet")
    assert _embed(["--labels", str(tmp_path / "labels.parquet"), "--prm", str(prm_dirs[kind]),
                   "--out", str(tmp_path / "cal")]) == 0  # fmt: skip
    cal = read_calibration_set(tmp_path / "cal")
    meta = read_json(tmp_path / "cal" / "meta.json")
    stats = meta["stats"]
    assert not (cal.records["question_id"] == "q/1").any()  # its question alone is over-long
    assert ((cal.records["question_id"] == "q/2") & (cal.records["response_id"] == 0)).any()
    assert len(cal) + stats["rows_unscorable"] + stats["rows_truncated"] == len(labels)
    # rows past max_tokens (all of q/1's, the long response's last ones) are counted as truncated
    assert stats["rows_truncated"] >= (labels["question_id"] == "q/1").sum()
    assert {e["reason"] for e in meta["unscorable"]} == set(BAD[kind])


def test_strict_fails_on_the_first_and_names_it(prm_dirs, tmp_path, capsys):
    pool = _pool("qwen-prm")
    pool = pool[pool["question_id"] != "q/1"]
    pool.to_parquet(tmp_path / "pool.parquet")
    assert _embed(["--bon", str(tmp_path / "pool.parquet"), "--prm", str(prm_dirs["qwen-prm"]),
                   "--out", str(tmp_path / "bon"), "--strict"]) != 0  # fmt: skip
    err = capsys.readouterr().err
    assert "cannot score question_id='q/0', response_id=1, reason='empty'" in err
    assert not (tmp_path / "bon").exists()
