"""The GPU acceptance suite (``tests/gpu/gpu_check.py``) as one test.

Collected only with ``-m gpu`` (the default marker expression deselects it) and skipped where
torch sees no CUDA device. It runs every section at full scale on the device and fails if any
section did not pass; the JSON report is written beside the test's temporary directory. The
script stays runnable on its own: ``PYTHONPATH=src:tests python3 tests/gpu/gpu_check.py``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


def _gpu_check():
    path = Path(__file__).with_name("gpu_check.py")
    spec = importlib.util.spec_from_file_location("dprm_gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_acceptance_suite(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the GPU acceptance suite needs one")
    out = tmp_path / "gpu_check.json"
    code = _gpu_check().main(["--scale", "full", "--out", str(out), "--workdir", str(tmp_path)])
    report = json.loads(out.read_text())
    failed = {name: rec["status"] for name, rec in report["sections"].items()
              if rec["status"] != "passed"}  # fmt: skip
    assert code == 0 and not failed, f"sections not passed: {failed}"
