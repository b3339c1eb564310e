"""Moved to :mod:`dprm.ias.learnt.auto`; this module keeps the old import path working."""

from dprm.ias.learnt.auto import (  # noqa: F401 (re-exported)
    AutoAllocator,
    mean_budget,
    pool_share,
)

__all__ = [
    "AutoAllocator",
    "mean_budget",
    "pool_share",
]
