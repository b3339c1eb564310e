"""A recipe: one TOML file that declares a real-data run, from questions to report.

Every table of the file is one dataclass (one concern each); unknown tables and keys are
rejected with their path (``recipe.toml [generators][1]: unknown key(s) ['tp'] ...``). See
``examples/park.toml`` (generate + roll out) and ``examples/paper-table1.toml`` (Park et al.'s
released labels) and docs/cluster.md.

Layout of a recipe (every table but ``[[generators]]`` and ``[[prms]]`` is optional)::

    [run]            name, out, shards, questions_per_part
    [questions]      train / id / ood question sets (named sets or files), limit, every
    [data]           source = "generate" | "park" (+ park, park_datasets, park_rollouts)
    [sampling]       first pass: n responses per question, temperature, ... (Park's defaults)
    [rollout]        Monte Carlo rollouts per prefix: n, max_steps, boxed_prefix, max_new_tokens
    [bon]            n candidates per test question (0: no BoN pools, no IAS)
    [grading]        math-verify worker processes and per-item timeout
    [[generators]]   name, model, backend, gpus, tensor_parallel_size, ... (park_name)
    [[prms]]         name, model, kind, gpus, max_tokens, ...
    [calibrators]    methods, seeds, [calibrators.overrides.METHOD] key = value
    [ias]            beta, mc_trials, rules, vote_trials, sequential
    [executor.ray]   address, cpus_per_task, max_retries
    [executor.slurm] partition, account, time_min, cpus_per_task, mem_gb, ...

The tables live by concern: :mod:`dprm.recipe.sections` (what runs),
:mod:`dprm.recipe.engine_specs` (``[[generators]]``, ``[[prms]]``),
:mod:`dprm.recipe.executor_specs` (``[executor.*]``) and :mod:`dprm.recipe.recipe_file` (reading
the file, resolving its paths). This module joins them: :class:`Recipe`, :func:`recipe_from_dict`
(unknown tables and keys, cross-table checks) and :func:`load_recipe`; every name stays
importable from here.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dprm.config import ConfigError, from_dict, json_ready
from dprm.recipe.engine_specs import GeneratorSpec, PrmSpec
from dprm.recipe.executor_specs import ExecutorSection, RaySection, SlurmSection
from dprm.recipe.recipe_file import read_recipe_file, resolve_paths
from dprm.recipe.sections import (
    SOURCES,
    SPLITS,
    BonSection,
    CalibratorsSection,
    DataSection,
    GradingSection,
    IasSection,
    QuestionsSection,
    RolloutSection,
    RunSection,
    SamplingSection,
)

__all__ = [
    "EXECUTOR_TABLES",
    "SOURCES",
    "SPLITS",
    "TABLES",
    "BonSection",
    "CalibratorsSection",
    "DataSection",
    "ExecutorSection",
    "GeneratorSpec",
    "GradingSection",
    "IasSection",
    "PrmSpec",
    "QuestionsSection",
    "RaySection",
    "Recipe",
    "RolloutSection",
    "RunSection",
    "SamplingSection",
    "SlurmSection",
    "check",
    "load_recipe",
    "read_recipe_file",
    "recipe_from_dict",
    "resolve_paths",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Recipe:
    """A whole recipe (see the module docstring); :func:`load_recipe` builds it."""

    generators: tuple[GeneratorSpec, ...]
    prms: tuple[PrmSpec, ...]
    run: RunSection = field(default_factory=RunSection)
    questions: QuestionsSection = field(default_factory=QuestionsSection)
    data: DataSection = field(default_factory=DataSection)
    sampling: SamplingSection = field(default_factory=SamplingSection)
    rollout: RolloutSection = field(default_factory=RolloutSection)
    bon: BonSection = field(default_factory=BonSection)
    grading: GradingSection = field(default_factory=GradingSection)
    calibrators: CalibratorsSection = field(default_factory=CalibratorsSection)
    ias: IasSection = field(default_factory=IasSection)
    executor: ExecutorSection = field(default_factory=ExecutorSection)

    @property
    def worlds(self) -> list[str]:
        """``{generator}__{prm}`` for every pair, PRM-major (the report's order)."""
        return [f"{g.name}__{p.name}" for p in self.prms for g in self.generators]

    def generator(self, name: str) -> GeneratorSpec:
        return next(g for g in self.generators if g.name == name)

    def prm(self, name: str) -> PrmSpec:
        return next(p for p in self.prms if p.name == name)

    def to_dict(self) -> dict[str, Any]:
        """The resolved recipe as JSON-ready data (stored in the run directory)."""
        return json_ready(dataclasses.asdict(self))


#: top-level table -> (dataclass, is an array of tables)
TABLES: dict[str, tuple[type, bool]] = {
    "run": (RunSection, False),
    "questions": (QuestionsSection, False),
    "data": (DataSection, False),
    "sampling": (SamplingSection, False),
    "rollout": (RolloutSection, False),
    "bon": (BonSection, False),
    "grading": (GradingSection, False),
    "generators": (GeneratorSpec, True),
    "prms": (PrmSpec, True),
    "calibrators": (CalibratorsSection, False),
    "ias": (IasSection, False),
}
EXECUTOR_TABLES: dict[str, type] = {"ray": RaySection, "slurm": SlurmSection}


def _table(values: Any, cls: type, source: str) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: expected a table, got {values!r}")
    return from_dict(cls, values, source=source)


def recipe_from_dict(data: dict[str, Any], source: str = "recipe") -> Recipe:
    """Build and check a :class:`Recipe` from parsed TOML (unknown keys name their path).

    Raises:
        ConfigError: an unknown table or key, a wrong type or range, no generator or PRM, a
            duplicate or unusable name, an unknown data source or calibrator, or a bad override.
    """
    known = set(TABLES) | {"executor"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown table(s) {unknown}; known: {sorted(known)}")
    kwargs: dict[str, Any] = {}
    for name, (cls, many) in TABLES.items():
        if name not in data:
            continue
        if not many:
            values = dict(data[name]) if isinstance(data[name], dict) else data[name]
            if cls is CalibratorsSection and isinstance(values, dict):
                overrides = values.pop("overrides", {})
                section = _table(values, cls, f"{source} [{name}]")
                kwargs[name] = dataclasses.replace(
                    section, overrides=_overrides(overrides, f"{source} [{name}.overrides]")
                )
            else:
                kwargs[name] = _table(values, cls, f"{source} [{name}]")
            continue
        items = data[name]
        if not isinstance(items, list):
            raise ConfigError(f"{source} [{name}]: expected an array of tables ([[{name}]])")
        kwargs[name] = tuple(
            _table(item, cls, f"{source} [{name}][{i}]") for i, item in enumerate(items)
        )
    if "executor" in data:
        table = data["executor"]
        if not isinstance(table, dict):
            raise ConfigError(f"{source} [executor]: expected a table")
        bad = sorted(set(table) - set(EXECUTOR_TABLES))
        if bad:
            raise ConfigError(
                f"{source} [executor]: unknown table(s) {bad}; known: {sorted(EXECUTOR_TABLES)}"
            )
        kwargs["executor"] = ExecutorSection(
            **{
                k: _table(v, EXECUTOR_TABLES[k], f"{source} [executor.{k}]")
                for k, v in table.items()
            }
        )
    for name in ("generators", "prms"):
        if not kwargs.get(name):
            raise ConfigError(f"{source}: at least one [[{name}]] table is required")
    recipe = Recipe(**kwargs)
    check(recipe, source)
    return recipe


def _overrides(values: Any, source: str) -> dict[str, dict[str, Any]]:
    if not isinstance(values, dict) or not all(isinstance(v, dict) for v in values.values()):
        raise ConfigError(
            f"{source}: expected [calibrators.overrides.METHOD] tables of key = value"
        )
    return {method: dict(v) for method, v in values.items()}


def check(recipe: Recipe, source: str) -> None:
    """Cross-table checks (names, source, calibrators and their overrides)."""
    for name in ("generators", "prms"):
        names = [item.name for item in getattr(recipe, name)]
        for i, n in enumerate(names):
            if not _NAME.match(n) or "__" in n:
                raise ConfigError(
                    f"{source} [{name}][{i}]: name {n!r} must be letters, digits, '.', '-', '_' "
                    "(no '__': it separates generator and PRM in world names)"
                )
        if len(set(names)) != len(names):
            raise ConfigError(f"{source} [{name}]: duplicate names {names}")
    _check_backends(recipe, source)
    if recipe.data.source not in SOURCES:
        raise ConfigError(
            f"{source} [data]: source = {recipe.data.source!r}; expected one of {list(SOURCES)}"
        )
    if recipe.data.source == "generate" or recipe.bon.n > 0:
        for i, g in enumerate(recipe.generators):
            if not g.model:
                raise ConfigError(
                    f"{source} [generators][{i}]: model is required (it generates "
                    f"{'trajectories' if recipe.data.source == 'generate' else 'BoN pools'})"
                )
    if recipe.executor.slurm.cluster not in ("", "slurm", "local", "debug"):
        raise ConfigError(
            f"{source} [executor.slurm]: cluster = {recipe.executor.slurm.cluster!r}; expected "
            "'' (SLURM), 'local' or 'debug' (submitit's local executors)"
        )
    if recipe.rollout.boxed_prefix not in ("grade", "drop"):
        raise ConfigError(f"{source} [rollout]: boxed_prefix must be 'grade' or 'drop'")
    from dprm.models import REGISTRY

    methods = list(recipe.calibrators.methods)
    bad = [m for m in methods if m not in REGISTRY or m == "base"]
    if bad:
        trainable = sorted(set(REGISTRY) - {"base"})
        raise ConfigError(
            f"{source} [calibrators]: unknown or untrainable method(s) {bad}; trainable: {trainable}"
        )
    from dprm.ias.selection.rules import RULES

    unknown = [r for r in recipe.ias.rules if r not in RULES]
    if unknown:
        raise ConfigError(
            f"{source} [ias]: unknown selection rule(s) {unknown} in 'rules'; choose from "
            f"{list(RULES)}"
        )
    for method, values in recipe.calibrators.overrides.items():
        where = f"{source} [calibrators.overrides.{method}]"
        if method not in methods:
            raise ConfigError(
                f"{where}: method {method!r} is not in [calibrators] methods = {methods}"
            )
        config_class = REGISTRY[method].config_class
        if config_class is None:
            if values:
                raise ConfigError(f"{where}: method {method!r} has no hyper-parameters to set")
            continue
        from_dict(config_class, values, source=where)  # unknown keys, types and ranges


def _check_backends(recipe: Recipe, source: str) -> None:
    """Each generator's backend is a known one; ``openai`` has a ``base_url``, the others none."""
    from dprm.llm.generate import GENERATORS
    from dprm.llm.openai_engine import check_base_url

    for i, g in enumerate(recipe.generators):
        where = f"{source} [generators][{i}]"
        if g.backend not in GENERATORS:
            raise ConfigError(
                f"{where}: backend = {g.backend!r}; expected one of {list(GENERATORS)}"
            )
        if g.backend == "openai":
            if not g.base_url:
                raise ConfigError(f'{where}: backend = "openai" needs base_url (the API root)')
            try:
                check_base_url(g.base_url)
            except ConfigError as err:
                raise ConfigError(
                    f"{where}: {str(err).replace('--base-url', 'base_url')}"
                ) from None
        elif g.base_url or g.api_key_env:
            raise ConfigError(
                f'{where}: base_url and api_key_env are for backend = "openai" (not {g.backend!r})'
            )


def load_recipe(path: str | Path) -> Recipe:
    """Read and check a recipe file (see the module docstring).

    Relative input paths resolve against the recipe's folder, not the working directory
    (:func:`resolve_paths`); the recipe keeps them absolute (``OUT/recipe.json``).
    """
    path = Path(path)
    data = resolve_paths(read_recipe_file(path), path.resolve().parent)
    return recipe_from_dict(data, str(path))
