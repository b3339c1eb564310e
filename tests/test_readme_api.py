"""The README's Python API snippet, run exactly as written (in a fresh folder)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_block(page: str) -> str:
    """The first ```python block of a Markdown page under the repository root."""
    text = (ROOT / page).read_text()
    return re.search(r"```python\n(.*?)```", text, flags=re.S).group(1)


#: the snippet the README shows, run exactly as written
README_SNIPPET = python_block("README.md")


def test_getting_started_shows_the_readme_snippet() -> None:
    assert python_block("docs/getting-started.md") == README_SNIPPET


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
