"""questions -> generate -> rollout -> embed (sharded + merged) and --bon, through the CLI."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from dprm.cli import main
from dprm.data.contract import read_bon_set, read_calibration_set, read_labels
from dprm.llm.shard import read_output_meta

FAST = ["--n", "2", "--grader-workers", "1", "--no-progress", "--device", "cpu"]


def _run(root, question_sets, lm, prm) -> None:
    raw = [
        {"problem": "What is 3 + 4?", "solution": "We add: $3 + 4 = \\boxed{7}$.", "idx": 0},
        {"problem": "What is 2 + 5?", "solution": "Clearly $\\boxed{7}$.", "idx": 1},
    ]
    with gzip.open(question_sets / "math500.jsonl.gz", "rt", encoding="utf-8") as handle:
        real = json.loads(handle.readline())
    raw.append({"problem": real["problem"], "answer": real["answer"], "idx": 2})
    (root / "raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in raw))
    assert main(["questions", str(root / "raw.jsonl"), "--out", str(root / "questions.jsonl")]) == 0
    assert main(["generate", "--questions", str(root / "questions.jsonl"), "--model", lm, "--max-new-tokens", "24",
                 "--out", str(root / "traj.parquet"), *FAST]) == 0  # fmt: skip
    assert main(ROLLOUT(root, lm)) == 0
    for shard in ("0/2", "1/2"):
        assert main(["embed", "--labels", str(root / "labels.parquet"), "--prm", prm, "--shard", shard,
                     "--questions-per-part", "1", "--out", str(root / "cal"), "--no-progress"]) == 0  # fmt: skip
    assert main(["merge", str(root / "cal")]) == 0
    assert main(BON(root, prm)) == 0


def ROLLOUT(root, lm):  # noqa: N802 - a command line
    return ["rollout", "--trajectories", str(root / "traj.parquet"), "--model", lm, "--max-new-tokens", "16",
            "--max-steps", "3", "--questions-per-part", "1", "--out", str(root / "labels.parquet"), *FAST]  # fmt: skip


def BON(root, prm):  # noqa: N802 - a command line
    return [
        "embed",
        "--bon",
        str(root / "traj.parquet"),
        "--prm",
        prm,
        "--out",
        str(root / "bon"),
        "--no-progress",
    ]


def test_end_to_end(tmp_path, question_sets, lm_dir, qwen_prm_dir, capsys):
    """One test (not a module fixture) so that xdist never runs the pipeline twice."""
    import pandas as pd

    root = tmp_path
    _run(root, question_sets, str(lm_dir), str(qwen_prm_dir))

    # questions: ids from the file stem, gold from \boxed{} in the solution
    rows = [json.loads(line) for line in (root / "questions.jsonl").read_text().splitlines()]
    assert [r["question_id"] for r in rows] == ["raw/0", "raw/1", "raw/2"]
    assert [r["answer"] for r in rows[:2]] == ["7", "7"]

    traj = pd.read_parquet(root / "traj.parquet")
    assert len(traj) == 6 and set(traj["response_id"]) == {0, 1}
    assert traj["response"].str.len().gt(0).all()
    meta = read_output_meta(root / "traj.parquet")
    assert meta["template"] == "qwen" and meta["seed"] == 42 and meta["grader"] == "math-verify"
    assert meta["stats"]["responses"] == 6

    labels = read_labels(root / "labels.parquet")
    assert set(labels["step"]) <= {0, 1, 2, 3} and (labels["step"] == 0).sum() == 6
    assert (labels["success_prob"] == labels["n_correct"] / labels["n_rollouts"]).all()
    assert not labels.duplicated(["question_id", "response_id", "step"]).any()
    meta = read_output_meta(root / "labels.parquet")
    assert meta["stats"]["rows"] == len(labels) and meta["max_steps"] == 3
    assert meta["trajectories_meta"]["generator"] == meta["generator"]

    cal = read_calibration_set(root / "cal")
    assert len(cal) == len(labels) and cal.meta["kind"] == "calibration"
    key = ["question_id", "response_id", "step"]
    merged = cal.records.merge(labels, on=key, suffixes=("", "_label"))
    assert len(merged) == len(labels)
    assert (merged["success_prob"] == merged["success_prob_label"]).all()
    assert np.isfinite(np.asarray(cal.hidden, dtype=np.float32)).all()
    for name in (
        "prm",
        "prm_kind",
        "layer",
        "grader",
        "grader_version",
        "seed",
        "generator",
        "dprm_version",
    ):
        assert name in cal.meta, name
    assert cal.meta["stats"]["rows_truncated"] == 0

    bon = read_bon_set(root / "bon")
    assert len(bon) == 3 and len(bon.responses) == 6 and bon.hidden.shape[0] == 3
    assert bon.responses["prm_score"].between(0, 1).all()
    assert bon.responses["correct"].tolist() == traj["correct"].tolist()
    # BoN contract v2: canonical answers, step scores and the candidates' own states
    assert bon.version == 2 and bon.response_hidden.shape == (6, bon.hidden_dim)
    assert bon.responses["answer"].map(lambda a: isinstance(a, str)).all()
    assert bon.responses["step_scores"].map(len).ge(1).all()
    last = bon.responses["step_scores"].map(lambda s: float(s[-1]))
    np.testing.assert_allclose(last, bon.responses["prm_score"], atol=1e-6)
    from dprm.ias import run_ias

    summary, _ = run_ias(bon, mc_trials=0, rules=["majority", "weighted-last"], vote_trials=8)
    assert {"majority", "weighted-last"} <= set(summary["rule"])

    # rerunning finished stages skips them (without loading a model)
    capsys.readouterr()
    assert main(ROLLOUT(root, str(lm_dir))) == 0
    assert main(BON(root, str(qwen_prm_dir))) == 0
    assert capsys.readouterr().out.count("skipped") == 2


def test_cli_help_and_errors(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["embed", "--help"])
    assert "one forward pass per trajectory" in capsys.readouterr().out.lower()
    with pytest.raises(SystemExit):
        main(["rollout", "--trajectories", "x", "--model", "m", "--out", "o", "--shard", "2/2"])
    assert (
        main(["questions", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "q.jsonl")]) == 2
    )
