"""The one tiny-world reproduction shared by the report tests (run once per session)."""

from __future__ import annotations

import shutil

import pytest

#: tiny training budgets: enough for a non-collapsed map, seconds per model
STEPS = {"max_steps": 20, "eval_every": 10}
TINY_METHODS = ["ot", "qr", "isotonic"]


def _tiny_config(**overrides):
    """The tiny grid (one r1-qwen-7b x qwen-prm world) with tiny step budgets."""
    from dprm.orchestrate.grid import resolve

    steps = {"ot": dict(STEPS), "qr": dict(STEPS)}
    for method, values in overrides.items():
        steps.setdefault(method, {}).update(values)
    cfg = resolve("tiny", methods=TINY_METHODS, overrides=steps, keep_worlds=False, jobs=2)
    cfg.mc_trials = 10
    return cfg


@pytest.fixture(scope="session")
def tiny_config():
    """``tiny_config(**{method: overrides})``: the tiny grid's run config, steps overridable."""
    return _tiny_config


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, tiny_config):
    """(out, config, outcome, logs) of one complete tiny reproduction (do not modify ``out``)."""
    pytest.importorskip("matplotlib")
    from dprm.orchestrate.reproduce import reproduce

    cfg = tiny_config()
    out = tmp_path_factory.mktemp("tiny") / "run"
    logs: list[str] = []
    outcome = reproduce(out, cfg, progress=False, log=logs.append)
    return out, cfg, outcome, logs


@pytest.fixture
def tiny_copy(tiny_run, tmp_path):
    """A private copy of the tiny reproduction's directory, for tests that resume or alter it."""
    out = tmp_path / "run"
    shutil.copytree(tiny_run[0], out)
    return out
