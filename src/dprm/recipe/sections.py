"""The tables of a recipe that say what runs: outputs, questions, labels, sampling, BoN, grading,
calibrators and IAS (one frozen dataclass per table, unknown keys rejected by
:func:`dprm.config.from_dict`). The engines are in :mod:`dprm.recipe.engine_specs`, the executors
in :mod:`dprm.recipe.executor_specs`; :mod:`dprm.recipe.spec` joins them into a recipe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dprm.config import in_range

#: the question splits of a world: calibrators train on ``train``; ``id`` / ``ood`` are held out
SPLITS = ("train", "id", "ood")
#: data sources a recipe may name
SOURCES = ("generate", "park")


@dataclass(frozen=True)
class RunSection:
    """Where outputs go and how GPU stages are cut into shards.

    Attributes:
        name: the run's name (report title).
        out: output directory (relative to the working directory, like ``dprm run --out``,
            which wins; recorded absolute in ``OUT/recipe.json``).
        shards: shards per GPU stage and split (0: one per visible GPU on the local executor,
            at least 1; Ray / SLURM: use at least the number of workers).
        questions_per_part: questions per resumable part inside a shard.
    """

    name: str = "recipe"
    out: str = "runs/recipe"
    shards: int = in_range(0, ge=0)
    questions_per_part: int = in_range(8, ge=1)


@dataclass(frozen=True)
class QuestionsSection:
    """Question sets per split: names (``math500``, ``aime24``, ``math500train``, ...) or files."""

    train: tuple[str, ...] = ("math500train",)
    id: tuple[str, ...] = ("math500",)
    ood: tuple[str, ...] = ("aime24", "aime25")
    #: keep at most this many questions of each set (0 = all)
    limit: int = in_range(0, ge=0)
    #: keep every k-th question of each set
    every: int = in_range(1, ge=1)


@dataclass(frozen=True)
class DataSection:
    """Where labels come from.

    Attributes:
        source: ``generate`` (first pass + Monte Carlo rollouts) or ``park`` (Park et al.'s
            released labels ``{park}/{dataset}/{generator.park_name}/data.json``: only the PRM
            embedding pass runs).
        park: hub dataset id or a local directory in the same layout.
        park_train / park_id / park_ood: the dataset folders of each split.
        park_rollouts: rollouts behind each released ``success_prob`` (8).
    """

    source: str = "generate"
    park: str = "young-j-park/prm_calibration"
    park_train: tuple[str, ...] = ("math500train",)
    park_id: tuple[str, ...] = ("math500",)
    park_ood: tuple[str, ...] = ("aime24", "aime25")
    park_rollouts: int = in_range(8, ge=1)

    def park_datasets(self, split: str) -> tuple[str, ...]:
        return {"train": self.park_train, "id": self.park_id, "ood": self.park_ood}[split]


@dataclass(frozen=True)
class SamplingSection:
    """First-pass sampling (Park et al.'s defaults); rollouts share all but ``n``."""

    n: int = in_range(8, ge=1)
    temperature: float = in_range(0.7, ge=0)
    top_p: float = in_range(1.0, gt=0, le=1)
    top_k: int = in_range(0, ge=0)
    repetition_penalty: float = in_range(1.0, gt=0)
    max_new_tokens: int = in_range(2048, ge=1)
    seed: int = 42
    boxed_first: bool = False


@dataclass(frozen=True)
class RolloutSection:
    """Monte Carlo rollouts from every prefix of every first-pass response."""

    n: int = in_range(8, ge=1)
    max_steps: int = in_range(19, ge=0)
    boxed_prefix: str = "grade"
    max_new_tokens: int = in_range(2048, ge=1)


@dataclass(frozen=True)
class BonSection:
    """Best-of-N pools for IAS: ``n`` candidates per ``id`` / ``ood`` question (0: no IAS).

    ``train = true`` also draws a pool on the ``train`` split: the training BoN set that the
    ``auto`` / ``auto-seq`` allocations learn from (without it only the uniform, C-rule and
    oracle rows are reported).
    """

    n: int = in_range(64, ge=0)
    train: bool = False


@dataclass(frozen=True)
class GradingSection:
    """math-verify grading worker processes per stage task and the per-item timeout (s)."""

    workers: int = in_range(2, ge=1)
    timeout: float = in_range(5.0, gt=0)


@dataclass(frozen=True)
class CalibratorsSection:
    """Calibrators to train (Base is always evaluated), seeds, per-method overrides."""

    methods: tuple[str, ...] = ("ot", "qr")
    seeds: int = in_range(1, ge=1)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    # > 0: each gradient-trained method (ot, qr, mono, binomial) is trained with the best
    # parameters of a `dprm tune` search of this many trials per (world, method) on the
    # training split (the same trials for each; needs optuna); 0 = the methods' defaults
    tune_trials: int = in_range(0, ge=0)


@dataclass(frozen=True)
class IasSection:
    """Instance-adaptive best-of-N settings (docs/design.md §4)."""

    beta: float = in_range(0.1, gt=0, lt=1)
    mc_trials: int = in_range(100, ge=1)
    #: selection rules of the "does it pay?" rows (dprm.ias.selection.rules.RULES); [] = none
    rules: tuple[str, ...] = ("highest-last", "majority")
    #: Monte Carlo orders per question of the voting rules among them
    vote_trials: int = in_range(64, ge=2)
    #: also the sequential allocation (``auto-seq`` rows, dprm.ias.sequential) of each
    #: calibrator; slower than ``auto``
    sequential: bool = False
