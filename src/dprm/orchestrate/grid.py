"""The grids of ``dprm reproduce`` and the resolved configuration of one run.

A *grid* (``demo``, ``paper``, ``tiny``) is a set of synthetic worlds (generators x PRMs at one
world size), the calibrators to train, the training seeds and per-method training defaults. It
is not a world: a world is one ``{generator}__{prm}`` of :mod:`dprm.data.synth`. The command-line
name of the grid is ``--grid`` (``--preset`` is kept as the documented alias).
:func:`resolve` turns a grid name and command-line choices into a :class:`RunConfig`, validating
every training override against its method's config class before any work starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dprm.config import ConfigError
from dprm.runner.config import RunConfig, config_dict  # noqa: F401 - config_dict re-exported

#: methods a grid may train, in report order; only those in the registry at run time are used
CANDIDATE_METHODS = ("ot", "qr", "mono", "binomial", "isotonic", "platt", "conformal")
#: the paper grid's calibrators (besides Base): the paper's two
PAPER_METHODS = ("ot", "qr")
ALL_GENERATORS = (
    "llama-3.2-1b",
    "llama-3.1-8b",
    "qwen-2.5-1.5b",
    "qwen-2.5-7b",
    "r1-llama-8b",
    "r1-qwen-7b",
)
ALL_PRMS = ("qwen-prm", "reasoneval", "shepherd")
#: demo-only training caps so that ``make demo`` stays within 5 minutes on 2 CPU cores (keys a
#: method's config does not have are dropped, so a renamed option never breaks the demo)
#: (every gradient-trained method runs past its 400-step warm-up, so a checkpoint is selected)
DEMO_STEPS = {"max_steps": 600, "eval_every": 25}
DEMO_OVERRIDES: dict[str, dict[str, Any]] = {
    # ot: patience can stop it (400 + patience 16 x 25 < 1000); ~5 s per demo world on one core
    "ot": {"max_steps": 1000, "eval_every": 25},
    "mono": dict(DEMO_STEPS),
    "binomial": dict(DEMO_STEPS),
    "qr": {"max_steps": 1000, "eval_every": 50},
    "conformal": {"inner_set": ";".join(f"{k}={v}" for k, v in DEMO_STEPS.items())},
}


@dataclass
class Grid:
    """A reproduction grid: worlds (generators x PRMs at one size), methods, seeds, defaults."""

    name: str
    generators: tuple[str, ...]
    prms: tuple[str, ...]
    size: str
    seeds: int
    methods: tuple[str, ...] = CANDIDATE_METHODS
    keep_worlds: bool = True
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)


GRIDS = {
    "demo": Grid(
        "demo", ("qwen-2.5-7b", "r1-qwen-7b"), ("qwen-prm",), "demo", 1, overrides=DEMO_OVERRIDES
    ),
    # the paper's methods only (Base is always evaluated): 18 worlds x 3 seeds of every
    # calibrator would take hours on 2 cores; --methods adds others
    "paper": Grid("paper", ALL_GENERATORS, ALL_PRMS, "paper", 3, PAPER_METHODS, keep_worlds=False),
    # for tests: a tiny world, one generator
    "tiny": Grid("tiny", ("r1-qwen-7b",), ("qwen-prm",), "tiny", 1),
}


def default_methods(grid: Grid) -> list[str]:
    """The grid's methods that exist in the registry now (data-driven: new calibrators appear)."""
    from dprm.models import REGISTRY

    return [m for m in grid.methods if m in REGISTRY and m != "base"]


def _known_keys(method: str, values: dict[str, Any]) -> dict[str, Any]:
    """The grid defaults that ``method``'s config dataclass accepts."""
    from dprm.models import REGISTRY

    config_class = getattr(REGISTRY[method], "config_class", None)
    if config_class is None:
        return {}
    names = {f.name for f in dataclasses.fields(config_class)}
    return {k: v for k, v in values.items() if k in names}


def validate_overrides(methods: list[str], overrides: dict[str, dict[str, Any]]) -> None:
    """Check every ``METHOD.KEY=VALUE`` override against the method's config class.

    Raises:
        ConfigError: an override names a method that is not trained in this run, a key the
            method's config class does not have, or a value it rejects.
    """
    from dprm.models.fit import resolve_config

    for method, values in overrides.items():
        if method not in methods:
            raise ConfigError(
                f"--set {method}.{next(iter(values), 'KEY')}=...: method {method!r} is not "
                f"trained in this run; methods: {methods}"
            )
        try:
            resolve_config(method, None, values)
        except ConfigError as err:
            raise ConfigError(f"--set {method}.KEY=VALUE for method {method!r}: {err}") from None


def resolve(
    grid: str,
    methods: list[str] | None = None,
    seeds: int | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    keep_worlds: bool | None = None,
    jobs: int = 1,
    worlds: list[str] | None = None,
    tune_trials: int = 0,
) -> RunConfig:
    """A :class:`RunConfig` from a grid name and command-line choices (validated, no work done)."""
    from dprm.models import REGISTRY

    if grid not in GRIDS:
        raise ConfigError(f"unknown grid {grid!r}; choose from {sorted(GRIDS)}")
    g = GRIDS[grid]
    chosen = list(methods) if methods else default_methods(g)
    unknown = [m for m in chosen if m not in REGISTRY or m == "base"]
    if unknown:
        raise ConfigError(
            f"unknown or untrainable method(s) {unknown}; trainable: {sorted(set(REGISTRY) - {'base'})}"
        )
    validate_overrides(chosen, overrides or {})
    every = [f"{gen}__{prm}" for prm in g.prms for gen in g.generators]
    outside = [w for w in worlds or [] if w not in every]
    if outside:
        raise ConfigError(f"world(s) {outside} are not in grid {grid!r}; its worlds: {every}")
    merged = {m: _known_keys(m, v) for m, v in g.overrides.items() if m in chosen}
    merged = {m: v for m, v in merged.items() if v}
    for m, v in (overrides or {}).items():
        merged.setdefault(m, {}).update(v)
    return RunConfig(
        grid=grid,
        generators=list(g.generators),
        prms=list(g.prms),
        size=g.size,
        seeds=list(range(seeds if seeds is not None else g.seeds)),
        methods=chosen,
        overrides=merged,
        keep_worlds=g.keep_worlds if keep_worlds is None else keep_worlds,
        jobs=max(1, int(jobs)),
        only_worlds=list(worlds or []),
        tune_trials=max(0, int(tune_trials)),
    )
