"""The resolved configuration of one run: what decides the outputs of its train / evaluate / IAS
stages (stored in ``run.json``). :mod:`dprm.orchestrate.grid` resolves one from a grid, a recipe from
its tables (:func:`dprm.recipe.run.run_config`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: the ``size`` of a run whose worlds hold real data (a recipe's), not synthetic worlds
REAL_DATA = "real"


@dataclass
class RunConfig:
    """Everything that determines a run's outputs (stored in run.json)."""

    grid: str
    generators: list[str]
    prms: list[str]
    size: str
    seeds: list[int]
    methods: list[str]
    overrides: dict[str, dict[str, Any]]
    keep_worlds: bool
    jobs: int = 1
    beta: float = 0.1
    mc_trials: int = 100
    #: run only these worlds of the grid (empty = all), e.g. to time one paper-size world
    only_worlds: list[str] = field(default_factory=list)
    #: > 0: each gradient-trained method is trained with the best parameters of a search of
    #: this many trials per (world, method) on the training split (dprm.models.tune)
    tune_trials: int = 0
    #: selection rules (dprm.ias.selection.rules.RULES) of the IAS stage's "does it pay?" rows: uniform,
    #: oracle and (with the world's train/bon) ``auto`` per rule; empty = none
    ias_rules: list[str] = field(default_factory=lambda: ["highest-last", "majority"])
    #: Monte Carlo orders per question of the voting rules (``majority``, ``weighted-*``) there
    vote_trials: int = 64
    #: also the sequential allocation there (``allocation = auto-seq``, dprm.ias.sequential): each
    #: calibrator's unit draws candidates one at a time, reading their calibrated estimates and
    #: final answers (needs candidate hidden states for calibrators that read hidden states);
    #: slower than ``auto``, so off by default
    ias_sequential: bool = False

    def __post_init__(self) -> None:
        from dprm.config import ConfigError
        from dprm.ias.selection.rules import RULES

        unknown = [r for r in self.ias_rules if r not in RULES]
        if unknown:
            raise ConfigError(
                f"ias_rules: unknown selection rule(s) {unknown}; choose from {list(RULES)}"
            )
        if int(self.vote_trials) < 2:
            raise ConfigError(f"vote_trials: expected an integer >= 2, found {self.vote_trials!r}")
        if not isinstance(self.ias_sequential, bool):
            raise ConfigError(
                f"ias_sequential: expected true or false, found {self.ias_sequential!r}"
            )

    @property
    def worlds(self) -> list[str]:
        every = [f"{g}__{p}" for p in self.prms for g in self.generators]
        return [w for w in every if w in self.only_worlds] if self.only_worlds else every


def config_dict(config: RunConfig) -> dict[str, Any]:
    """The run configuration as a JSON-ready dict (with the world list)."""
    return asdict(config) | {"worlds": config.worlds}
