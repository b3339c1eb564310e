"""Calibrators, one module per method, collected in a registry (name -> class).

The method modules are listed in :data:`METHOD_MODULES`; importing this package imports each
so its ``@register`` runs. Add a method by writing a module and adding it to the list.
"""

import importlib

from dprm.models.interface import REGISTRY, Calibrator, QuantileFunction, load, register

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

for _module in METHOD_MODULES:
    importlib.import_module(f"{__name__}.{_module}")

__all__ = ["REGISTRY", "Calibrator", "QuantileFunction", "load", "register"]
