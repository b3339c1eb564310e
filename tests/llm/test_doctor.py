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


def test_help_lists_every_golden_check(capsys):
    from dprm.llm.doctor import GOLDEN

    with pytest.raises(SystemExit):
        main(["doctor", "--help"])
    out = capsys.readouterr().out
    for name, golden in GOLDEN.items():
        assert f"  {name}: {golden.hub_id}" in out
    assert "0.375" in out and "7.486343383789062e-05" in out and "0.064453125" in out


def test_park_demo_is_bundled_with_its_provenance():
    from dprm.llm.doctor import park_demo

    demo = park_demo()
    assert demo["reasoning_prefix"].count("\n\n") == 7  # the 8-step prefix
    assert demo["reasoning_prefix"].startswith("## Step 1: Find the midpoint")
    assert demo["raw_last_step_reward"] == 0.375 and "HuggingFace Demo.ipynb" in demo["provenance"]


def test_park_checks_and_the_new_kinds_run_on_local_copies(tmp_path, monkeypatch, capsys):
    """Random weights with the real layouts: Park's raw and adapter checks load and FAIL with a
    difference (random numbers), Skywork loads and is reported RAN; the checks that cannot run
    (no hub, nothing local) are listed with the reason."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    qwen = real_prms.build_qwen_prm(tmp_path / "qwen2.5-math-prm-tiny")
    adapter = real_prms.make_park_adapter(qwen, tmp_path / "adapter")
    sky = real_prms.build_skywork(tmp_path / "skywork-tiny")
    code = main(["doctor", "--device", "cpu", "--prm", f"qwen-prm={qwen}", "--adapter",
                 str(adapter), "--prm", f"skywork-prm={sky}", "--only", "park-qwen-prm", "--only",
                 "park-adapter", "--only", "skywork-prm", "--only", "rlhflow-prm"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL park-qwen-prm" in out and "FAIL park-adapter" in out and "in logit" in out
    assert "RAN  skywork-prm" in out
    assert "1 check(s) not run" in out and "rlhflow-prm: no hub access" in out
