"""``dprm doctor`` says plainly what it cannot check, and runs the real path on a local copy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from dprm.cli import main  # noqa: E402
from fixtures import real_prms  # noqa: E402

pytest.importorskip("sentencepiece", reason="the llm extra installs sentencepiece")
pytest.importorskip("google.protobuf", reason="the llm extra installs protobuf")


def test_no_gpu_is_a_clear_message(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["doctor"]) == 2
    out = capsys.readouterr().out
    assert "no GPU visible" in out and "Traceback" not in out


def test_no_hub_is_a_clear_message(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["doctor", "--device", "cpu"]) == 2
    out = capsys.readouterr().out
    assert "no hub access" in out and "nothing could be checked" in out


def test_local_copy_is_checked_against_the_card(tmp_path, monkeypatch, capsys):
    """A random-weight Math-Shepherd layout loads and scores the card example; it must fail
    the comparison (random weights), with the largest difference printed."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = real_prms.build_shepherd(tmp_path / "math-shepherd-tiny")
    assert main(["doctor", "--device", "cpu", "--only", "math-shepherd",
                 "--prm", f"math-shepherd={path}"]) == 1  # fmt: skip
    out = capsys.readouterr().out
    assert "FAIL" in out and "max |diff|" in out
