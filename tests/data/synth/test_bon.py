"""BoN contract v2 (reader / writer) and the twin's answers and candidate states (dprm.data.synth.bon)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dprm.data import read_bon_set
from dprm.data.contract import RESPONSE_HIDDEN_FILE, write_bon_set
from dprm.data.synth import (
    GENERATORS,
    LINEAR_COLS,
    N_NUISANCE,
    N_SIGNAL,
    PRMS,
    RAW_COLS,
    SIZES,
    assemble_latent,
    resolve_preset,
)
from dprm.data.synth.bon import (
    GOLD,
    candidate_latents,
    draw_answers,
    wrong_answer_concentration,
)
from dprm.io import DataError, read_json, write_json


def small_set(tmp_path, answers=True, response_hidden=True, steps=True):
    questions = pd.DataFrame({"question_id": ["a", "b"], "prm_score": [0.5, 0.4]})
    responses = pd.DataFrame(
        {
            "question_id": ["a", "a", "b"],
            "response_id": [0, 1, 0],
            "prm_score": [0.9, 0.2, 0.4],
            "correct": [True, False, False],
        }
    )
    if answers:
        responses["answer"] = ["12", "7", ""]
    if steps:
        responses["step_scores"] = [np.array([0.5, 0.9]), np.array([0.2]), np.array([0.4])]
    rh = np.arange(9, dtype=np.float32).reshape(3, 3) if response_hidden else None
    path = write_bon_set(
        tmp_path / "bon", questions, np.zeros((2, 3), np.float32), responses, response_hidden=rh
    )
    return path


def test_v2_round_trip(tmp_path):
    bon = read_bon_set(small_set(tmp_path))
    assert bon.version == 2 and bon.meta["bon_version"] == 2
    assert list(bon.responses["answer"]) == ["12", "7", ""]
    np.testing.assert_allclose(bon.response_hidden, np.arange(9).reshape(3, 3))
    np.testing.assert_allclose(bon.responses["step_scores"][0], [0.5, 0.9])


def test_v1_sets_still_load(tmp_path):
    bon = read_bon_set(small_set(tmp_path, answers=False, response_hidden=False, steps=False))
    assert bon.version == 1 and bon.response_hidden is None and not bon.has_answers
    assert "bon_version" not in bon.meta


def test_v2_violations_fail_with_one_line(tmp_path):
    path = small_set(tmp_path)
    np.save(path / RESPONSE_HIDDEN_FILE, np.zeros((2, 3), np.float32))
    with pytest.raises(DataError, match="row-aligned") as err:
        read_bon_set(path)
    assert "\n" not in str(err.value)
    path = small_set(tmp_path / "x", answers=False)
    meta = read_json(path / "meta.json")
    write_json(path / "meta.json", {**meta, "bon_version": 2})
    with pytest.raises(DataError, match="missing column 'answer'"):
        read_bon_set(path)
    with pytest.raises(DataError, match="step_scores"):
        questions = pd.DataFrame({"question_id": ["a"], "prm_score": [0.5]})
        responses = pd.DataFrame(
            {
                "question_id": ["a"],
                "response_id": [0],
                "prm_score": [0.5],
                "correct": [True],
                "answer": ["1"],
                "step_scores": [np.array([1.5])],
            }
        )
        write_bon_set(tmp_path / "bad", questions, np.zeros((1, 2), np.float32), responses)


def test_answers_collide_more_on_hard_questions():
    rng = np.random.default_rng(0)
    q, k = 400, 64
    logit = np.linspace(-7, 5, q)
    correct = rng.random((q, k)) < 1 / (1 + np.exp(-logit[:, None]))
    answers = draw_answers(rng, correct, logit)
    assert (answers[correct] == GOLD).all() and (answers[~correct] != GOLD).all()
    top_share = []
    for i in range(q):
        wrong = answers[i][~correct[i]]
        if len(wrong) >= 8:
            top_share.append((logit[i], pd.Series(wrong).value_counts().iloc[0] / len(wrong)))
    top = np.array(top_share)
    hard, easy = top[top[:, 0] < -3, 1].mean(), top[top[:, 0] > 0, 1].mean()
    assert hard > easy + 0.15  # hard questions: wrong answers pile onto one popular value
    assert np.all(np.diff(wrong_answer_concentration(logit)) >= 0)


def test_candidate_states_carry_correctness():
    gen, prm = resolve_preset("llama-3.1-8b__qwen-prm")
    rng = np.random.default_rng(1)
    q, k = 200, 64
    logit = rng.normal(0, 2, q)
    correct = rng.random((q, k)) < 1 / (1 + np.exp(-logit[:, None]))
    lam = 0.4
    z_question = np.column_stack([rng.normal(0, 1, q), np.zeros(q), np.zeros(q)])
    qlat = assemble_latent(
        z_question,
        rng.normal(0, 1, (q, N_SIGNAL)),
        2.0 * (rng.random(q) < 0.5) - 1,
        np.full(q, -1.0),
        rng.normal(0, 1, q),
        rng.normal(0, 1, (q, N_NUISANCE)),
        lam,
    )
    latent, length = candidate_latents(
        rng, gen, prm, logit, qlat, correct, lam, 20, 3, 5, 0.5, 0.35, SIZES["paper"].max_steps
    )
    raw = latent[:, RAW_COLS]
    o2 = raw[:, 1].reshape(q, k)
    assert o2[correct].mean() > o2[~correct].mean() + 0.1  # the PRM's reading tracks success
    # the question's own reading o_1 is every candidate's
    np.testing.assert_array_equal(
        raw[:, 0].reshape(q, k), np.repeat(qlat[:, RAW_COLS][:, :1], k, 1)
    )
    # the linear channel keeps the question's share of masking noise: m - sqrt(lam) z
    # averages (over candidates) to the question's own sqrt(1 - lam) xi_q
    noise = (latent[:, LINEAR_COLS] - np.sqrt(lam) * raw).reshape(q, k, N_SIGNAL).mean(axis=1)
    question_noise = qlat[:, LINEAR_COLS] - np.sqrt(lam) * qlat[:, RAW_COLS]
    assert np.corrcoef(noise[:, 0], question_noise[:, 0])[0, 1] > 0.95
    assert length.min() >= 3 and length.max() <= 20


def test_twin_world_writes_v2_and_prms_share_answers(tiny_world):
    a = tiny_world("llama-3.2-1b__qwen-prm")
    b = tiny_world("llama-3.2-1b__shepherd")
    bon_a, bon_b = read_bon_set(a["id/bon"]), read_bon_set(b["id/bon"])
    assert bon_a.version == 2 and bon_a.response_hidden.shape[0] == len(bon_a.responses)
    # the generator's answers and correctness are shared by its PRMs (as in the paper)
    assert (bon_a.responses["answer"] == bon_b.responses["answer"]).all()
    assert (bon_a.responses["correct"] == bon_b.responses["correct"]).all()
    assert (bon_a.responses.loc[bon_a.responses["correct"], "answer"] == GOLD).all()
    train = read_bon_set(a["train/bon"])
    ids = set(train.questions["question_id"])
    assert not ids & set(bon_a.questions["question_id"]) and len(ids) == 40
    assert GENERATORS and PRMS  # registries import cleanly with the hook in place
