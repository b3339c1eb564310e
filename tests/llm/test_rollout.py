"""Prefix planning and Monte Carlo labels (tiny bigram LM + math-verify)."""

from __future__ import annotations

import pandas as pd
import pytest

from dprm.data.contract import read_labels, write_labels
from dprm.llm.generate import Completion, boxed_first, derive_seed
from dprm.llm.rollout import (
    RolloutConfig,
    SamplingConfig,
    generate_trajectories,
    plan_prefixes,
    rollout_labels,
)

SAMPLING = SamplingConfig(n=2, max_new_tokens=24, seed=7)


def _kinds(tasks):
    return {(t.row["question_id"], t.row["response_id"], t.row["step"]): t.kind for t in tasks}


def test_plan_follows_the_reference_rules(toy_trajectories):
    tasks = plan_prefixes(toy_trajectories, "tiny-qwen", RolloutConfig(max_steps=20), SAMPLING)
    kinds = _kinds(tasks)
    # solution(3, 4, 7): 3 steps; the boxed answer sits in step 2
    assert [kinds[("toy/0", 0, k)] for k in range(4)] == [
        "rollouts",
        "rollouts",
        "boxed",
        "complete",
    ]
    assert ("toy/0", 0, 4) not in kinds
    # 2 steps, boxed only in the last one: k = 2 is the complete trajectory
    assert [kinds[("toy/0", 1, k)] for k in range(3)] == ["rollouts", "rollouts", "complete"]
    # a one-step answer: k = 0 rollouts, k = 1 complete
    assert [kinds[("toy/2", 0, k)] for k in range(2)] == ["rollouts", "complete"]
    first = next(t for t in tasks if t.kind == "rollouts")
    assert first.prompt.endswith("<|im_start|>assistant\n\n\n")  # k = 0 appends "\n\n"
    second = next(t for t in tasks if t.row["step"] == 1 and t.kind == "rollouts")
    assert second.prompt.endswith("## Step 1: 3 + 4 = 7.\n\n")
    assert second.row["reasoning_prefix"] == "## Step 1: 3 + 4 = 7."
    assert second.seed == derive_seed(7, "rollout", "toy/0", 0, 1)


def test_max_steps_and_drop_boxed(toy_trajectories):
    tasks = plan_prefixes(
        toy_trajectories, "m", RolloutConfig(max_steps=1, boxed_prefix="drop"), SAMPLING
    )
    assert max(t.row["step"] for t in tasks) == 1
    tasks = plan_prefixes(toy_trajectories, "m", RolloutConfig(boxed_prefix="drop"), SAMPLING)
    assert "boxed" not in {t.kind for t in tasks}
    with pytest.raises(ValueError):
        RolloutConfig(boxed_prefix="zero")


def test_labels_have_counts_and_validate(toy_trajectories, generator, grading_pool, tmp_path):
    labels = rollout_labels(
        toy_trajectories, generator, grading_pool, RolloutConfig(max_steps=20), SAMPLING
    )
    assert (labels["success_prob"] == labels["n_correct"] / labels["n_rollouts"]).all()
    rolled = labels[labels["label_source"] == "rollouts"]
    assert (rolled["n_rollouts"] == SAMPLING.n).all()
    exact = labels[labels["label_source"] != "rollouts"].set_index(
        ["question_id", "response_id", "step"]
    )
    assert (exact["n_rollouts"] == 1).all()
    # complete trajectories: their own correctness (gold 7 / 7 / 18)
    assert exact.loc[("toy/0", 0, 3), "n_correct"] == 1  # boxed 7, correct
    assert exact.loc[("toy/0", 1, 2), "n_correct"] == 0  # boxed 8, wrong
    assert exact.loc[("toy/1", 0, 3), "n_correct"] == 0  # boxed 6, wrong
    assert exact.loc[("toy/2", 0, 1), "n_correct"] == 0  # no answer
    assert exact.loc[("toy/2", 1, 3), "n_correct"] == 1
    # a prefix with a committed boxed answer is graded on that text
    assert exact.loc[("toy/0", 0, 2), "label_source"] == "boxed"
    assert exact.loc[("toy/0", 0, 2), "n_correct"] == 1
    # the tiny LM answers 7 often for question toy/0: some rollouts are right
    assert rolled["n_correct"].sum() > 0
    assert rolled["n_correct"].sum() < rolled["n_rollouts"].sum()
    path = write_labels(tmp_path / "labels.parquet", labels)
    assert len(read_labels(path)) == len(labels)


def test_labels_do_not_depend_on_batch_composition(toy_trajectories, generator, grading_pool):
    config = RolloutConfig(max_steps=1)
    whole = rollout_labels(toy_trajectories, generator, grading_pool, config, SAMPLING)
    part = rollout_labels(
        toy_trajectories[toy_trajectories["question_id"] == "toy/1"],
        generator,
        grading_pool,
        config,
        SAMPLING,
    )
    pd.testing.assert_frame_equal(
        whole[whole["question_id"] == "toy/1"].reset_index(drop=True), part
    )


def test_first_pass_trajectories(toy_questions, generator, grading_pool):
    frame = generate_trajectories(toy_questions.iloc[:2], generator, grading_pool, SAMPLING)
    assert len(frame) == 4 and frame["response_id"].tolist() == [0, 1, 0, 1]
    assert set(frame["finish_reason"]) <= {"stop", "length"}
    assert (frame["n_tokens"] <= SAMPLING.max_new_tokens).all()
    again = generate_trajectories(toy_questions.iloc[:2], generator, grading_pool, SAMPLING)
    pd.testing.assert_frame_equal(frame, again)  # seeded per question


def test_park_boxed_first():
    outs = [
        Completion("a", 1, "stop"),
        Completion("$\\boxed{1}$", 1, "stop"),
        Completion("b", 1, "stop"),
    ]
    assert [c.text for c in boxed_first(outs, 2)] == ["$\\boxed{1}$", "a"]
