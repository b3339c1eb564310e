"""Calibrators, one module per method, collected in a registry (name -> class).

The method modules are listed in :data:`dprm.models.registry.METHOD_MODULES`; importing this
package imports each so its ``@register`` runs. Add a method by writing a module and adding it
to the list.
"""

from dprm.models.interface import Calibrator, QuantileFunction
from dprm.models.registry import METHOD_MODULES, REGISTRY, load_methods, register
from dprm.models.storage import load

load_methods()

__all__ = ["METHOD_MODULES", "REGISTRY", "Calibrator", "QuantileFunction", "load", "register"]
