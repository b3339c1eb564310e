"""``/v1/allocate``: budgets of the C rule as ``dprm ias`` gives them, and ``auto-seq``'s next
decision equal to the one ``dprm solve --auto-seq`` made after the same draws (a live run of
the shipped arith generator and PRM replayed through the service, round by round)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dprm.llm.prompts import split_steps

N_MAX, COST, ROUND = 16, 0.25, 2
N_TRAIN, K_TRAIN = 40, 16
LIVE = 3  # questions of the live run: fewer than 4, so the shift check does not apply


@pytest.fixture(scope="module")
def client(build_service):
    from fastapi.testclient import TestClient

    from dprm.serve.app import create_app, wrap

    service, info = build_service()
    with TestClient(wrap(create_app(service, info), service.settings.max_body_bytes)) as c:
        yield c, service
    service.close()


def test_ias_budgets_equal_the_calibrated_prm(client, arith_rows, prm, calibrator_dir):
    from dprm.live.calibrated_prm import CalibratedPRM
    from dprm.models import load

    http, _ = client
    questions = [r["question"] for r in arith_rows[:6]]
    cprm = CalibratedPRM(prm, load(calibrator_dir))
    for C in (0.5, 0.9):
        body = http.post(
            "/v1/allocate",
            json={"questions": [{"question": q} for q in questions], "allocation": "ias", "C": C},
        ).json()
        want = cprm.question_budget(questions, C)
        assert [a["budget"] for a in body["questions"]] == want.tolist()
        assert body["C"] == C and not body["done"]
        assert all(a["decision"] == "draw" and a["pick"] is None for a in body["questions"])


def test_ias_with_draws_says_stop_once_the_budget_is_drawn(client, arith_rows):
    http, _ = client
    row = arith_rows[0]
    steps = split_steps(row["solution"])
    first = http.post("/v1/allocate", json={"questions": [{"question": row["question"]}]}).json()
    budget = first["questions"][0]["budget"]
    draws = [{"steps": steps}] * budget
    answer = http.post(
        "/v1/allocate", json={"questions": [{"question": row["question"], "draws": draws}]}
    ).json()["questions"][0]
    assert answer["decision"] == "stop" and answer["draw_more"] == 0
    # the pick reads the answer from the last \boxed{} of the steps, as dprm solve does
    assert answer["pick"]["answer"] == row["answer"]


def test_allocations_the_server_cannot_run_are_refused(client):
    http, _ = client
    answer = http.post(
        "/v1/allocate", json={"questions": [{"question": "q"}], "allocation": "auto-seq"}
    )
    assert answer.status_code == 409 and "--train-bon" in answer.json()["error"]
    for body, where in [
        ({"questions": []}, "questions"),
        ({"questions": [{"question": "q", "draws": [{"steps": []}]}]}, "draws[0].steps"),
        ({"questions": [{"question": "q"}], "allocation": "best"}, "allocation"),
        ({"questions": [{"question": "q"}], "C": 1.0}, "C"),
        ({"questions": [{"question": "q", "extra": 1}]}, "extra"),
    ]:
        answer = http.post("/v1/allocate", json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert where in answer.json()["error"] and "\n" not in answer.json()["error"]


# ----------------------------------------------------------------------------- auto-seq vs solve
@pytest.fixture(scope="module")
def train_bon(tmp_path_factory, prm, arith_rows, calibrator_dir):
    """A BoN v2 training set on the arith PRM's states (as tests/live's auto-seq set): each
    question's candidates are correct with probability p_q (the calibrator's estimate, made
    sharper), their states moved up or down one direction with correctness, their scores higher
    when correct."""
    from dprm.data.contract import write_bon_set
    from dprm.models import load

    rows = arith_rows[:N_TRAIN]
    questions = pd.DataFrame({"question_id": [r["question_id"] for r in rows],
                              "question": [r["question"] for r in rows]})  # fmt: skip
    q_count = len(questions)
    scores, hidden = prm.question_state(questions["question"].tolist())
    mono = load(calibrator_dir)
    mean = np.clip(mono.point_estimate(hidden, scores).astype(np.float64), 0.02, 0.98)
    p = 1 / (1 + np.exp(-4 * np.log(mean / (1 - mean))))
    rng = np.random.default_rng(0)
    correct = rng.random((q_count, K_TRAIN)) < p[:, None]
    direction = hidden[np.argmax(mean)] - hidden[np.argmin(mean)]
    noise = rng.normal(0, 0.3, (q_count, K_TRAIN, hidden.shape[1])) * hidden.std(0)
    cand_hidden = hidden[:, None, :] + noise + 0.3 * (2 * correct[..., None] - 1) * direction
    cand_hidden = cand_hidden.reshape(q_count * K_TRAIN, -1).astype(np.float32)
    cand_score = np.clip(0.5 + 0.2 * (2 * correct - 1) + rng.normal(0, 0.2, correct.shape), 0, 1)
    responses = pd.DataFrame(
        {
            "question_id": np.repeat(questions["question_id"].to_numpy(), K_TRAIN),
            "response_id": np.tile(np.arange(K_TRAIN), q_count).astype(np.int32),
            "prm_score": cand_score.ravel().astype(np.float32),
            "correct": correct.ravel(),
            "answer": np.where(correct.ravel(), "7", "6"),
        }
    )
    path = tmp_path_factory.mktemp("train") / "bon"
    write_bon_set(
        path,
        pd.DataFrame({"question_id": questions["question_id"], "prm_score": scores.astype(np.float32)}),
        hidden.astype(np.float32),
        responses,
        {"source": "test"},
        dtype="float32",
        response_hidden=cand_hidden,
    )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def solve_run(tmp_path_factory, arith_rows, prm, calibrator_dir, train_bon):
    """``dprm solve --mode bon --auto-seq`` on LIVE arith questions with the shipped
    generator: (its bon.jsonl records, its seq_draws.jsonl records)."""
    from importlib import resources

    from dprm.live import CalibratedPRM, SolveConfig, run_bon
    from dprm.llm.generate import load_generator
    from dprm.llm.grading import GradingPool
    from dprm.models import load

    root = tmp_path_factory.mktemp("solve")
    live = arith_rows[N_TRAIN : N_TRAIN + LIVE]
    questions = root / "questions.jsonl"
    questions.write_text(
        "".join(json.dumps({k: r[k] for k in ("question_id", "question", "answer")}) + "\n"
                for r in live), encoding="utf-8",
    )  # fmt: skip
    generator_dir = str(resources.files("dprm.llm") / "worlds" / "arith" / "generator")
    config = SolveConfig(
        mode="bon", questions=str(questions), generator=generator_dir, prm="arith",
        calibrator=str(calibrator_dir), n_max=N_MAX, baseline_n=0, max_new_tokens=96,
        auto_cost=COST, train_bon=str(train_bon), auto_seq=True, round_size=ROUND,
        temperature=1.0,
    )  # fmt: skip
    cprm = CalibratedPRM(prm, load(calibrator_dir), n_max=N_MAX)
    generator = load_generator("transformers", generator_dir, device="cpu")
    out = root / "run"
    with GradingPool(workers=1, timeout=20.0) as pool:
        run_bon(config, cprm, generator, out, progress=False, pool=pool)
    read = lambda p: [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines()]  # noqa: E731
    return live, read(out / "bon.jsonl"), read(out / "seq_draws.jsonl")


@pytest.fixture(scope="module")
def seq_client(build_service, train_bon):
    from fastapi.testclient import TestClient

    from dprm.serve.app import create_app, wrap
    from dprm.serve.service import Policy

    policy = Policy(train_bon=str(train_bon), auto_cost=COST, round_size=ROUND)
    service, info = build_service(policy, n_max=N_MAX)
    with TestClient(wrap(create_app(service, info), service.settings.max_body_bytes)) as c:
        yield c
    service.close()


def _ask(http, live, draws, upto_round):
    """The service's answer given every question's draws of rounds < upto_round."""
    body = {
        "allocation": "auto-seq",
        "questions": [
            {
                "question": r["question"],
                "draws": [
                    {"steps": split_steps(d["text"]), "answer": d["answer"]}
                    for d in sorted(draws, key=lambda d: d["draw"])
                    if d["question_id"] == r["question_id"] and d["round"] < upto_round
                ],
            }
            for r in live
        ],
    }
    answer = http.post("/v1/allocate", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.mark.slow  # a live dprm solve run of the arith generator (~90 s on one core)
def test_auto_seq_decides_as_dprm_solve(solve_run, seq_client):
    live, records, draws = solve_run
    ids = [r["question_id"] for r in live]
    rounds = sorted({d["round"] for d in draws})
    assert rounds == list(range(len(rounds))) and len(rounds) >= 3, rounds
    for r in rounds:  # after rounds < r, the service asks for exactly round r's draws
        body = _ask(seq_client, live, draws, r)
        want = [sum(d["round"] == r and d["question_id"] == q for d in draws) for q in ids]
        assert [a["draw_more"] for a in body["questions"]] == want, r
        assert not body["done"]
        assert [a["decision"] for a in body["questions"]] == ["draw" if k else "wait" for k in want]
    final = _ask(seq_client, live, draws, len(rounds))
    assert final["done"] and final["floor_share"] == records[0]["floor_share"]
    by_id = {r["question_id"]: r for r in records}
    got = [a["budget"] for a in final["questions"]]
    assert got == [by_id[q]["budget"] for q in ids]
    assert sum(got) == round(COST * N_MAX * LIVE)
    assert len(set(got)) > 1, "equal budgets would make this comparison weak"
    assert [a["pick"]["index"] for a in final["questions"]] == [
        by_id[q]["chosen"]["index"] for q in ids
    ]
    assert all(a["decision"] == "stop" for a in final["questions"])
