"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import pytest


@pytest.fixture
def one_thread():
    """Tiny models on two test workers sharing two cores: one intra-op thread each avoids
    oversubscription (and is faster for small tensors)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """The one tiny-world fixture: ``tiny_world(preset)`` -> ``write_world`` paths, built once per
    preset per session (treat the files as read-only)."""
    from dprm.data.synth import write_world

    cache: dict[str, dict] = {}

    def make(preset: str = "llama-3.2-1b__qwen-prm") -> dict:
        if preset not in cache:
            root = tmp_path_factory.mktemp(preset.replace("__", "-"))
            cache[preset] = write_world(root, preset, size="tiny", progress=False)
        return cache[preset]

    return make
