"""The optional extras table (dprm.llm.extras) and ``dprm doctor``'s report of it."""

from __future__ import annotations

import importlib.util

from dprm.cli import main
from dprm.llm import extras


def test_a_missing_extra_is_none_and_an_installed_one_has_its_version(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        extras.importlib.util, "find_spec", lambda name: None if name == "vllm" else real(name)
    )
    status = extras.extras_status()
    assert status["vllm"] is None
    assert set(status) >= {"vllm", "datasets", "optuna", "ray", "submitit"}
    assert status["transformers"]  # a dev install has it
    assert extras.EXTRAS["vllm"].install == "pip install 'dprm[vllm]'"


def test_doctor_reports_every_extra(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        extras.importlib.util, "find_spec", lambda name: None if name == "vllm" else real(name)
    )
    main(["doctor"])  # no GPU here: it stops after the report (exit 2)
    out = capsys.readouterr().out
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("doctor:   ")}
    for name in ("vllm", "datasets", "optuna", "ray", "submitit"):
        assert name in lines
        version = extras.installed_version(name)
        assert (version or "missing") in lines[name]
    assert "missing (pip install 'dprm[vllm]')" in lines["vllm"]
