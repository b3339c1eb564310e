"""The search spaces: method -> config key -> dimension (:data:`SEARCH_SPACES`), and the
settings of the trials only (:data:`TRIAL_ONLY`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LogFloat:
    """A positive float searched on a log scale in [low, high]."""

    low: float
    high: float

    def suggest(self, trial, key: str) -> float:
        return trial.suggest_float(key, self.low, self.high, log=True)


@dataclass(frozen=True)
class Choice:
    """One of a few values (int, float, str or bool)."""

    options: tuple

    def suggest(self, trial, key: str) -> Any:
        return trial.suggest_categorical(key, list(self.options))


@dataclass(frozen=True)
class Layers:
    """Hidden layer widths (a tuple config value): depth x width, searched as two choices."""

    depths: tuple[int, ...]
    widths: tuple[int, ...]

    def suggest(self, trial, key: str) -> tuple[int, ...]:
        depth = trial.suggest_categorical(f"{key}_depth", list(self.depths))
        width = trial.suggest_categorical(f"{key}_width", list(self.widths))
        return (int(width),) * int(depth)


#: shared by every method: Adam's rate, batch size and weight decay
_OPTIMISATION = {
    "lr": LogFloat(1e-4, 3e-2),
    "batch_size": Choice((128, 256, 512)),
    "weight_decay": Choice((0.0, 1e-5, 1e-4, 1e-3)),
}
#: the quantile-map network of ``mono`` / ``binomial`` / ``ot`` (layers and sizes). The PICNN
#: over the scalar tau keeps one hidden layer: one layer is already universal for monotone
#: maps (docs: same validation WQL as (32, 32) at 2.5x less cost), and a second layer of 64
#: made a binomial trial ~125 CPU s at D = 3584 (measured), a quarter of the whole budget.
_MAP_NET = {
    "context_hidden": Layers(depths=(1, 2), widths=(32, 64, 128)),
    "context_dim": Choice((8, 16, 32)),
    "picnn_hidden": Layers(depths=(1,), widths=(16, 32, 64)),
}
#: method -> config key -> dimension. Keys are fields of the method's config dataclass (a test
#: checks it); everything not listed keeps the method's default (or a ``fixed`` override).
SEARCH_SPACES: dict[str, dict[str, LogFloat | Choice | Layers]] = {
    "qr": dict(_OPTIMISATION),
    "mono": _OPTIMISATION | _MAP_NET,
    # levels of the training mixture: its cost is linear in them (default 32)
    "binomial": _OPTIMISATION | _MAP_NET | {"n_levels": Choice((16, 32))},
    # the min-max: f's own rate and how often f moves per g update
    "ot": _OPTIMISATION
    | _MAP_NET
    | {"lr_f": LogFloat(1e-4, 3e-2), "f_every": Choice((1, 2, 3, 4))},
}
#: settings of the *trials* only, not of the tuned model: ``ot``'s trials train one map (the
#: member whose learning rates, sizes and f cadence are searched) and the refit bags
#: ``ensemble_size`` maps with the best member settings, as ``dprm train`` does. An ensemble in
#: every trial would cost K min-max games per trial (4x ``ot``'s trial CPU) for a score that
#: mostly measures the member's settings.
TRIAL_ONLY: dict[str, dict[str, Any]] = {"ot": {"ensemble_size": 1}}


def suggest_overrides(method: str, trial) -> dict[str, Any]:
    """The config overrides of one trial, drawn from ``SEARCH_SPACES[method]``."""
    return {key: dim.suggest(trial, key) for key, dim in SEARCH_SPACES[method].items()}
