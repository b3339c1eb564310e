"""Moved to :mod:`dprm.ias.peers.fallback`; this module keeps the old import path working."""

from dprm.ias.peers.fallback import (  # noqa: F401 (re-exported)
    ShiftFallback,
    level_for_target,
    shift_fallback,
)

__all__ = [
    "ShiftFallback",
    "level_for_target",
    "shift_fallback",
]
