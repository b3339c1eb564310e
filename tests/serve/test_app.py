"""``dprm serve``'s endpoints against the in-process PRM and calibrator (arith world).

Scores equal the PRM wrapper's own ``score_steps`` to 1e-5 and quantiles the calibrator's; bad
requests get a 4xx with one line; a path in a request is text, never opened.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dprm.llm.prompts import split_steps


@pytest.fixture(scope="module")
def client(build_service):
    from fastapi.testclient import TestClient

    from dprm.serve.app import create_app, wrap

    service, info = build_service(max_solutions=4, max_steps=8, max_chars=400,
                                  max_body_bytes=20000)  # fmt: skip
    with TestClient(wrap(create_app(service, info), service.settings.max_body_bytes)) as c:
        c.service, c.info = service, info
        yield c
    service.close()


def _solutions(rows, k=3):
    return [split_steps(r["solution"]) for r in rows[:k]]


def _in_process(prm, calibrator_dir, question, solutions, levels):
    from dprm.models import load

    model = load(calibrator_dir)
    outs = prm.score_steps(question, solutions)
    rows = []
    for out in outs:
        scores = np.asarray(out.scores, np.float32)
        hidden = np.asarray(out.hidden, np.float32)
        q = model.quantiles(hidden, np.asarray(levels), scores).astype(np.float64)
        mean = model.point_estimate(hidden, scores).astype(np.float64)
        rows.append((scores, q, mean))
    return rows


def test_score_equals_the_in_process_prm_and_calibrator(client, prm, calibrator_dir, arith_rows):
    question = arith_rows[0]["question"]
    solutions = _solutions(arith_rows)
    levels = [0.05, 0.25, 0.5, 0.9]
    answer = client.post(
        "/v1/score", json={"question": question, "solutions": solutions, "levels": levels}
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["levels"] == levels and body["request_id"]
    want = _in_process(prm, calibrator_dir, question, solutions, levels)
    lower_want = _in_process(prm, calibrator_dir, question, solutions, [0.1])
    for got, (scores, q, mean), (_, lower, _) in zip(
        body["solutions"], want, lower_want, strict=True
    ):
        assert got["n_steps"] == len(scores) and not got["truncated"]
        steps = got["steps"]
        np.testing.assert_allclose([s["prm_score"] for s in steps], scores, atol=1e-5, rtol=0)
        np.testing.assert_allclose([s["quantiles"] for s in steps], q, atol=1e-5, rtol=0)
        np.testing.assert_allclose([s["mean"] for s in steps], mean, atol=1e-5, rtol=0)
        np.testing.assert_allclose([s["lower"] for s in steps], lower[:, 0], atol=1e-5, rtol=0)
        assert [s["step"] for s in steps] == list(range(1, len(scores) + 1))
    # the scores vary by step (a PRM whose outputs were constant would pass vacuously)
    assert np.ptp([s["prm_score"] for s in body["solutions"][0]["steps"]]) > 1e-4


def test_default_levels_are_the_calibrators(client, arith_rows):
    body = client.post(
        "/v1/score",
        json={"question": arith_rows[1]["question"], "solutions": _solutions(arith_rows, 1)},
    ).json()
    assert body["levels"] == pytest.approx([i / 10 for i in range(11)])
    assert body["lower_level"] == 0.1


def test_a_path_in_a_request_is_text(client, prm):
    """The service never opens what a request names: the 'path' is scored as the text it is."""
    question, steps = "/etc/passwd", ["../../../../etc/shadow", "~/.ssh/id_rsa"]
    body = client.post("/v1/score", json={"question": question, "solutions": [steps]}).json()
    want = prm.score_steps(question, [steps])[0].scores
    got = [s["prm_score"] for s in body["solutions"][0]["steps"]]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


BAD_SCORE_REQUESTS = {
    "empty solutions": ({"question": "q", "solutions": []}, 422, "solutions"),
    "a solution without steps": ({"question": "q", "solutions": [["a"], []]}, 422, "solutions[1]"),
    "too many solutions": ({"question": "q", "solutions": [["a"]] * 5}, 422, "limit is 4"),
    "too many steps": ({"question": "q", "solutions": [["a"] * 9]}, 422, "limit is 8"),
    "oversized text": ({"question": "x" * 401, "solutions": [["a"]]}, 422, "question"),
    "wrong type": ({"question": 3, "solutions": [["a"]]}, 422, "question"),
    "a number as a step": ({"question": "q", "solutions": [["a", 1]]}, 422, "solutions[0][1]"),
    "unknown field": ({"question": "q", "solutions": [["a"]], "path": "/x"}, 422, "path"),
    "level out of range": (
        {"question": "q", "solutions": [["a"]], "levels": [1.5]},
        422,
        "levels[0]",
    ),
    "missing field": ({"solutions": [["a"]]}, 422, "question"),
    "body too large": ({"question": "q", "solutions": [["y" * 30000]]}, 413, "bytes"),
}


@pytest.mark.parametrize("case", sorted(BAD_SCORE_REQUESTS))
def test_bad_requests_are_refused_in_one_line(client, case):
    body, status, where = BAD_SCORE_REQUESTS[case]
    answer = client.post("/v1/score", json=body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert "\n" not in error and where in error, error
    assert answer.headers["x-request-id"] == answer.json()["request_id"]


def test_malformed_json_and_wrong_methods_are_refused(client):
    answer = client.post(
        "/v1/score", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert answer.status_code == 422 and "JSON" in answer.json()["error"]
    assert client.get("/v1/score").status_code == 405
    assert client.get("/nowhere").status_code == 404
    assert client.post("/v1/score", content=json.dumps([1, 2])).status_code == 422
    # the service still answers after every refusal
    assert client.get("/healthz").json() == {"status": "ok"}


def test_request_id_is_echoed_when_plain(client):
    ok = client.get("/healthz", headers={"x-request-id": "abc-123"})
    assert ok.headers["x-request-id"] == "abc-123"
    odd = client.get("/healthz", headers={"x-request-id": "a b\tc"})
    assert odd.headers["x-request-id"] != "a b\tc"


def test_info_names_models_digests_and_training_data(client, arith_prm_dir, calibrator_dir, prm):
    from dprm.digests import digest, model_digest
    from dprm.version import __version__

    info = client.get("/v1/info").json()
    assert info["dprm_version"] == __version__
    assert info["prm"]["digest"] == model_digest(str(arith_prm_dir))
    assert info["prm"]["hidden_dim"] == prm.hidden_dim
    assert info["calibrator"]["digest"] == digest(calibrator_dir)
    assert info["calibrator"]["method"] == "mono"
    assert info["calibrator"]["training_data"]["n_train"] > 0
    assert "batching" in info and info["limits"]["max_solutions"] == 4


def test_openapi_schema_lists_the_endpoints(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/score", "/v1/allocate", "/healthz", "/v1/info"} <= set(paths)


def test_an_internal_failure_is_one_line_and_the_server_keeps_serving(client, monkeypatch):
    from fastapi.testclient import TestClient

    from dprm.serve.app import create_app, wrap

    service = client.service
    app = wrap(create_app(service, client.info), service.settings.max_body_bytes)
    body = {"question": "q", "solutions": [["a"]]}
    with TestClient(app, raise_server_exceptions=False) as raw:
        with monkeypatch.context() as patch:
            patch.setattr(service.cprm, "mean", lambda states: 1 / 0)
            failed = raw.post("/v1/score", json=body)
        assert failed.status_code == 500
        error = failed.json()["error"]
        assert "ZeroDivisionError" in error and "\n" not in error
        assert raw.post("/v1/score", json=body).status_code == 200
