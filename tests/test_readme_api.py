"""The README's Python API snippet, run exactly as written (in a fresh folder)."""

from __future__ import annotations

import pytest

#: the snippet the README shows (keep the two identical)
README_SNIPPET = """\
import dprm
from dprm.data import read_calibration_set
from dprm.data.synth import write_world

paths = write_world("runs/w", "r1-qwen-7b__qwen-prm", size="tiny", overwrite=True)
data = read_calibration_set(paths["train/calib"])
model = dprm.fit("binomial", data, seed=0)     # IAS: binomial; calibration tables: see below
model.save("runs/cal/binomial", overwrite=True)
model = dprm.load("runs/cal/binomial")
q = model.quantiles(data.hidden, [0.1, 0.5, 0.9])  # [N, 3], hidden states read in chunks
"""


@pytest.mark.slow
def test_the_readme_snippet_runs_as_written(tmp_path, monkeypatch, capfd) -> None:
    import torch

    monkeypatch.chdir(tmp_path)
    before = torch.get_num_threads()
    namespace: dict = {}
    exec(compile(README_SNIPPET, "README.md", "exec"), namespace)  # noqa: S102 - our own text
    q, data = namespace["q"], namespace["data"]
    assert q.shape == (len(data), 3)
    assert (q[:, 0] <= q[:, 1]).all() and (q[:, 1] <= q[:, 2]).all()  # monotone in tau
    assert "step" in capfd.readouterr().err  # the fit shows its progress bar
    assert torch.get_num_threads() == before  # the thread setting is restored
    exec(compile(README_SNIPPET, "README.md", "exec"), {})  # rerunnable: overwrite=True
