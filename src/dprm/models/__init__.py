"""Calibrators, one module per method, collected in a registry (name -> class).

Every module in this package is imported on first use so its ``@register`` runs; add a method
by adding a module.
"""

import importlib
import pkgutil

from dprm.models.base import REGISTRY, Calibrator, QuantileFunction, load, register

for _info in pkgutil.iter_modules(__path__):
    if _info.name not in ("base",) and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["REGISTRY", "Calibrator", "QuantileFunction", "load", "register"]
