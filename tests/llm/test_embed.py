"""Labels -> calibration set and BoN pools -> BoN set, with one pass per chain."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dprm.data.contract import read_bon_set, read_calibration_set
from dprm.io import DataError
from dprm.llm.answers import canonical_answer
from dprm.llm.embed import EmbedConfig, build_chains, embed_label_part, run_embed
from dprm.llm.prm import load_prm
from dprm.llm.prompts import split_steps

from .tiny_models import label_rows as _labels


def test_build_chains():
    lists = [("a", "b"), (), ("a",), ("c",), ("a", "b"), ("a", "b", "d")]
    chains, owner = build_chains(lists)
    assert chains == [("a", "b", "d"), ("c",), ()]
    assert owner == [0, 2, 0, 1, 0, 0]


def test_rows_get_the_state_of_their_step(toy_trajectories, qwen_prm):
    labels = _labels(toy_trajectories)
    records, hidden, stats, _ = embed_label_part(labels, qwen_prm)
    assert len(records) == len(labels) == len(hidden) and stats["rows_truncated"] == 0
    pd.testing.assert_frame_equal(records.drop(columns="prm_score"), labels)
    # one forward per trajectory + one per question for the empty prefix
    assert stats["sequences"] == len(toy_trajectories) + toy_trajectories["question_id"].nunique()
    for t in toy_trajectories.itertuples():
        full = qwen_prm.score_steps(t.question, [split_steps(t.response)])[0]
        mine = (records["question_id"] == t.question_id) & (records["response_id"] == t.response_id)
        for row in np.flatnonzero(mine.to_numpy()):
            step = records["step"].iloc[row]
            if step == 0:
                expected = qwen_prm.question_state([t.question])[1][0]
            else:
                expected = full.hidden[step - 1]
                assert records["prm_score"].iloc[row] == pytest.approx(
                    full.scores[step - 1], abs=1e-6
                )
            np.testing.assert_allclose(hidden[row], expected, atol=1e-4)


def test_truncated_rows_are_counted_not_silent(toy_trajectories, qwen_prm_dir):
    labels = _labels(toy_trajectories)
    short = load_prm(str(qwen_prm_dir), device="cpu", dtype="float32", max_tokens=60)
    records, hidden, stats, _ = embed_label_part(labels, short)
    assert stats["rows_truncated"] > 0 and stats["sequences_truncated"] > 0
    assert (
        len(records) + stats["rows_truncated"]
        == len(labels)
        == len(records) + (len(labels) - len(hidden))
    )


def test_step_mismatch_is_a_data_error(toy_trajectories, qwen_prm):
    labels = _labels(toy_trajectories)
    labels.loc[2, "step"] = 5
    with pytest.raises(DataError, match="row 2.*splits into 2 steps.*'step' says 5"):
        embed_label_part(labels, qwen_prm)


def test_calibration_and_bon_sets_validate(toy_trajectories, qwen_prm, tmp_path):
    labels = _labels(toy_trajectories)
    path, skipped = run_embed(labels, qwen_prm, tmp_path / "cal", kind="calibration", progress=False,
                              config=EmbedConfig(questions_per_part=2, hidden_dtype="float32"))  # fmt: skip
    assert not skipped
    cal = read_calibration_set(path)
    assert len(cal) == len(labels) and cal.hidden_dim == qwen_prm.hidden_dim
    assert (
        cal.meta["prm_kind"] == "qwen-prm"
        and "layer" in cal.meta
        and cal.meta["stats"]["rows"] == len(labels)
    )
    assert (cal.n_correct == labels["n_correct"].to_numpy()).all()
    pool = toy_trajectories.assign(correct=[True, False, False, False, False, True])
    bon_path, _ = run_embed(pool, qwen_prm, tmp_path / "bon", kind="bon", progress=False)
    bon = read_bon_set(bon_path)
    assert len(bon) == 3 and len(bon.responses) == 6
    assert bon.responses["correct"].tolist() == pool["correct"].tolist()
    # each candidate's own final answer, not the gold answer its pool row carries: toy/0's two
    # candidates state 7 and 8 (gold 7), so majority and the vote peers see them disagree
    assert bon.responses["answer"].tolist() == [canonical_answer(r) for r in pool["response"]]
    assert bon.responses["answer"].tolist()[:2] == ["7", "8"]
    last = qwen_prm.score_steps(pool["question"][0], [split_steps(pool["response"][0])])[0].scores[
        -1
    ]
    assert bon.responses["prm_score"].iloc[0] == pytest.approx(last, abs=1e-6)
    q_scores, q_hidden = qwen_prm.question_state(
        bon.questions["question_id"]
        .map(dict(zip(pool.question_id, pool.question, strict=False)))
        .tolist()
    )
    np.testing.assert_allclose(
        np.asarray(bon.hidden, dtype=np.float32), q_hidden, atol=2e-3
    )  # stored as float16
    # a finished output is skipped; other settings are refused without --overwrite
    assert run_embed(labels, qwen_prm, path, kind="calibration", progress=False,
                     config=EmbedConfig(questions_per_part=2, hidden_dtype="float32"))[1]  # fmt: skip
    with pytest.raises(DataError, match="different settings"):
        run_embed(labels, qwen_prm, path, kind="calibration", progress=False)


def test_park_json_chains_are_scored_in_one_pass_each(qwen_prm, tmp_path):
    """Park's public rows (no ids) -> dprm.data.park labels -> one forward per recovered chain."""
    import json

    from dprm.data.park import park_to_labels, read_park_json

    records = [
        {"question": "What is 3 + 4?", "reasoning_prefix": "", "success_prob": 0.5},
        {
            "question": "What is 3 + 4?",
            "reasoning_prefix": "## Step 1: 7.\n\n",
            "success_prob": 0.75,
        },
        {
            "question": "What is 3 + 4?",
            "reasoning_prefix": "## Step 1: 7.\n\n## Step 2: $\\boxed{7}$",
            "success_prob": 1.0,
        },
        {"question": "What is 3 + 4?", "reasoning_prefix": "", "success_prob": 0.25},
        {"question": "What is 3 + 4?", "reasoning_prefix": "## Step 1: 8.", "success_prob": 0.0},
    ]
    path = tmp_path / "data.json"
    path.write_text(json.dumps(records))
    labels = park_to_labels(read_park_json(path), 8, source=path)
    records_out, hidden, stats, _ = embed_label_part(labels, qwen_prm)
    assert len(records_out) == 5 and stats["rows_truncated"] == 0
    assert stats["sequences"] == 1 + 2  # the question alone + two chains
    deep = records_out["step"] == 2
    full = qwen_prm.score_steps("What is 3 + 4?", [["## Step 1: 7.", "## Step 2: $\\boxed{7}$"]])[0]
    np.testing.assert_allclose(
        hidden[np.flatnonzero(deep.to_numpy())[0]], full.hidden[1], atol=1e-4
    )
