"""Moved to :mod:`dprm.ias.paper.pools`; this module keeps the old import path working."""

from dprm.ias.paper.pools import (  # noqa: F401 (re-exported)
    Pools,
    response_rows,
)

__all__ = [
    "Pools",
    "response_rows",
]
