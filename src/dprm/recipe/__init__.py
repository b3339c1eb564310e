"""Recipes: one TOML file from questions to report, run locally, on Ray or on SLURM.

:func:`load_recipe` reads and checks a recipe (:mod:`dprm.recipe.spec`); :func:`run_recipe` runs
it (:mod:`dprm.recipe.run`) with an executor of :data:`dprm.runner.executors.EXECUTORS`. See
docs/cluster.md.
"""

from dprm.recipe.run import run_recipe
from dprm.recipe.spec import Recipe, load_recipe

__all__ = ["Recipe", "load_recipe", "run_recipe"]
