"""What the report calls the run's data: the synthetic grid's words or the recipe's names."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dprm.runner.config import REAL_DATA

SPLITS = ("train", "id", "ood")


@dataclass(frozen=True)
class RunNames:
    """What the report calls the run's data: the synthetic grid's words or the recipe's names.

    Attributes:
        real: a recipe's real data (``dprm run``), not synthetic worlds (``dprm reproduce``).
        recipe: the resolved recipe (``OUT/recipe.json``'s ``recipe``); empty for synthetic runs.
    """

    real: bool = False
    recipe: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.recipe.get("run", {}).get("name", "")) or "recipe"

    def sets(self, split: str) -> list[str]:
        """The user's names of a split's sets (Park dataset folders, or question sets / files)."""
        data = self.recipe.get("data", {})
        if data.get("source") == "park":
            names = data.get(f"park_{split}", [])
        else:
            names = self.recipe.get("questions", {}).get(split, [])
        # a file is named by its file name, a packaged or hub set by its name
        return [Path(n).name if ("/" in n or os.sep in n) else n for n in map(str, names)]

    def set_text(self, split: str) -> str:
        return ", ".join(self.sets(split)) or split

    @property
    def labels(self) -> dict[str, str]:
        """Dataset labels of tables and figures (the defaults for synthetic runs)."""
        if not self.real:
            return {}
        return {
            "train": f"ID, in-sample ({self.set_text('train')}; training questions included)",
            "id": f"ID, held out ({self.set_text('id')})",
            "ood": f"OOD, held out ({self.set_text('ood')})",
        }

    def protocol_word(self, protocol: str) -> str:
        """``paper`` protocol = Park et al.'s; on real data it is named for what it is."""
        return "in-sample" if self.real and protocol == "paper" else protocol


def run_names(out: Path, size: str) -> RunNames:
    """The :class:`RunNames` of the run in ``out`` (its ``recipe.json`` when it holds real data)."""
    if size != REAL_DATA:
        return RunNames()
    path = Path(out) / "recipe.json"
    recipe = {}
    if path.exists():
        from dprm.io import read_json

        recipe = read_json(path).get("recipe", {})
    return RunNames(real=True, recipe=recipe)
