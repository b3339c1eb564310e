"""Fixtures of the service tests: the shipped arithmetic-world PRM and a small calibrator
fitted here on that PRM's own question states (labels that depend on the state), so its
hidden size is whatever the shipped PRM's is."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

N_CALIBRATION_QUESTIONS = 48


@pytest.fixture(autouse=True)
def _one_torch_thread(one_thread):
    """Every test here runs with one intra-op thread (see tests/conftest.py)."""


@pytest.fixture(scope="session")
def arith_prm_dir() -> Path:
    from importlib import resources

    return Path(str(resources.files("dprm.llm") / "worlds" / "arith" / "prm"))


@pytest.fixture(scope="session")
def arith_rows():
    from dprm.llm.tasks.arith_sets import set_rows

    return set_rows("id")


@pytest.fixture(scope="session")
def prm(arith_prm_dir):
    from dprm.llm.prm import load_prm

    return load_prm(str(arith_prm_dir), device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def calibrator_dir(tmp_path_factory, prm, arith_rows) -> Path:
    """A ``mono`` calibrator (distribution kind) on the arith PRM's question states."""
    from dprm.models.fit import fit
    from fixtures.calibration import labelled_states

    questions = [r["question"] for r in arith_rows[:N_CALIBRATION_QUESTIONS]]
    scores, hidden = prm.question_state(questions)
    rng = np.random.default_rng(0)
    z = (hidden - hidden.mean(0)) / (hidden.std(0) + 1e-6) @ rng.normal(size=hidden.shape[1])
    data = labelled_states(scores, hidden, 2.0 * z / np.sqrt(hidden.shape[1]), 6, rng)
    model = fit(
        "mono",
        data,
        overrides={"batch_size": 64, "max_steps": 40, "eval_every": 20},
        seed=0,
        progress=False,
    )
    return model.save(tmp_path_factory.mktemp("calibrator") / "mono")


class LiveServer:
    """``dprm serve``'s app run by uvicorn in a thread on a free loopback port."""

    def __init__(self, service, info):
        from dprm.serve.server import bind, make_server

        self.service = service
        self.sock = bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = make_server(service, info, log_level="warning")
        self.server.config.install_signal_handlers = False  # not the main thread
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self):
        from dprm.client import Client

        self.thread.start()
        Client(self.url).wait_ready(60)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(30)
        self.service.close()
        self.sock.close()


@pytest.fixture(scope="session")
def build_service(arith_prm_dir, calibrator_dir):
    """``build_service(**settings)`` -> (service, info) on the arith PRM and the calibrator."""
    from dprm.serve.server import build
    from dprm.serve.service import Policy
    from dprm.serve.settings import ServeSettings

    def make(policy: Policy | None = None, n_max: int = 64, **settings):
        return build(
            str(arith_prm_dir),
            str(calibrator_dir),
            settings=ServeSettings(**settings),
            policy=policy or Policy(),
            device="cpu",
            dtype="float32",
            n_max=n_max,
        )

    return make


@pytest.fixture(scope="session")
def live_server(build_service):
    """A running server (batch window 20 ms, up to 8 requests per forward)."""
    service, info = build_service(max_batch=8, batch_wait_ms=20.0)
    with LiveServer(service, info) as server:
        yield server
