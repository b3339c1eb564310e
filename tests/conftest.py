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
