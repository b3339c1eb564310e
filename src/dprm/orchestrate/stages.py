"""The per-world stages of a run, in order: ``(stage name, units of one world)`` pairs.

:mod:`dprm.orchestrate.world_units` (synth), :mod:`dprm.orchestrate.calibrator_units` (train,
evaluate) and :mod:`dprm.orchestrate.ias_units` (ias) build the units; a recipe's real-data
stages (:mod:`dprm.recipe.stages`) replace ``synth`` and run :data:`MODEL_STAGES` unchanged.
"""

from __future__ import annotations

from dprm.orchestrate.calibrator_units import evaluate_units, train_units
from dprm.orchestrate.ias_units import ias_units
from dprm.orchestrate.world_units import synth_units

#: the stages that run on a world's data, whatever its source (synthetic or a recipe's)
MODEL_STAGES = (
    ("train", train_units),
    ("evaluate", evaluate_units),
    ("ias", ias_units),
)
#: ``dprm reproduce``: synthetic worlds are the data source
WORLD_STAGES = (("synth", synth_units), *MODEL_STAGES)
