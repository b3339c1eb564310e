"""The calibrator registry: name -> class, filled by each method module's ``@register``.

The method modules are listed in :data:`METHOD_MODULES`; :func:`load_methods` imports each so
its ``@register`` runs (the package :mod:`dprm.models` calls it on import). Add a method by
writing a module and adding it to the list.
"""

from __future__ import annotations

import importlib

#: name -> calibrator class (a :class:`dprm.models.interface.Calibrator` subclass); filled by the ``@register`` decorator of each method module.
REGISTRY: dict[str, type] = {}
#: the calibrator kinds, in the order "least" to "most" information
KINDS = ("point", "levels", "distribution")

#: the modules that register calibrators (registry names in comments), in registry order
METHOD_MODULES = (
    "raw_score",  # base
    "binomial",  # binomial
    "conformal",  # conformal
    "mono",  # mono
    "ot",  # ot
    "park_qr",  # park-qr
    "qr",  # qr
    "score_only",  # isotonic, platt
)


def register(name: str):
    """Class decorator adding a calibrator to :data:`REGISTRY` under ``name``."""

    def deco(cls: type) -> type:
        if name in REGISTRY and REGISTRY[name] is not cls:
            raise ValueError(f"calibrator {name!r} registered twice")
        if cls.kind not in KINDS:
            raise ValueError(f"calibrator {name!r}: kind {cls.kind!r} is not one of {KINDS}")
        cls.method = name
        REGISTRY[name] = cls
        return cls

    return deco


def load_methods() -> dict[str, type]:
    """Import every method module of :data:`METHOD_MODULES` (once) and return :data:`REGISTRY`."""
    for module in METHOD_MODULES:
        importlib.import_module(f"dprm.models.{module}")
    return REGISTRY
