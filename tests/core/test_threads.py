"""One thread policy for the CLI and the API (dprm.threads)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from dprm import threads as threads_module
from dprm.threads import default_threads, set_process_threads, torch_threads


@pytest.fixture(autouse=True)
def no_enclosing_choice():
    """An earlier in-process ``dprm`` command (``set_process_threads``) leaves its choice for the
    rest of the process; each test here starts as a fresh process would."""
    token = threads_module._ACTIVE.set(None)
    yield
    threads_module._ACTIVE.reset(token)


def test_importing_dprm_changes_no_thread_setting() -> None:
    code = (
        "import torch; before = torch.get_num_threads(); import dprm, dprm.models, dprm.ias, "
        "dprm.threads; dprm.fit; print(before, torch.get_num_threads())"
    )
    env = {"PATH": "", "PYTHONPATH": ":".join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    before, after = out.stdout.split()
    assert before == after


def test_a_call_sets_its_threads_and_restores_them(monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "")
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(2)), raising=False)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch_threads() as count:  # the CLI's default: 1 on a 2-core machine
            assert count == default_threads() == 1
            assert torch.get_num_threads() == 1
            with torch_threads() as inner:  # a nested call keeps the outer choice
                assert inner == 1
            with torch_threads(3):  # unless it asks for its own
                assert torch.get_num_threads() == 3
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


def test_threads_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="threads=0"), torch_threads(0):
        pass


def test_fit_and_quantiles_take_threads_and_restore_them(tiny_world) -> None:
    from dprm.data import read_calibration_set
    from dprm.models.fit import fit

    data = read_calibration_set(tiny_world()["train/calib"])
    previous = torch.get_num_threads()
    seen: list[int] = []
    torch.set_num_threads(2)
    try:
        import dprm.models.training as training

        hook = training.EVALUATION_HOOK.set(
            lambda step, metrics: seen.append(torch.get_num_threads())
        )
        try:
            model = fit("qr", data, overrides={"max_steps": 2, "eval_every": 1}, threads=1,
                        progress=False)  # fmt: skip
        finally:
            training.EVALUATION_HOOK.reset(hook)
        assert seen and set(seen) == {1}  # trained with one thread
        assert torch.get_num_threads() == 2  # and the caller's setting is back
        q = model.quantiles(data.hidden[:5], [0.1, 0.9], threads=1)
        assert q.shape == (5, 2) and np.isfinite(q).all()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


def test_a_commands_threads_win_over_the_default_inside_api_calls() -> None:
    import contextvars

    def command() -> tuple[int, int]:
        set_process_threads(3)  # the CLI's --threads 3
        with torch_threads() as count:  # an API call inside the command, threads=None
            return count, torch.get_num_threads()

    previous = torch.get_num_threads()
    try:
        assert contextvars.copy_context().run(command) == (3, 3)
    finally:
        torch.set_num_threads(previous)
