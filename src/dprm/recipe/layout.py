"""Where a recipe's data lives in its run directory (the worlds' own layout is
:class:`dprm.runner.layout.Layout`)::

    OUT/data/questions/{split}.jsonl                      questions (named sets or files)
    OUT/data/{generator}/{split}/trajectories.parquet     first pass (source "generate")
    OUT/data/{generator}/{split}/labels.parquet           rollouts, or Park's released labels
    OUT/data/{generator}/{split}/pool.parquet             BoN pools (id, ood; train with [bon] train)
"""

from __future__ import annotations

from pathlib import Path


def questions_path(out: Path, split: str) -> Path:
    return out / "data" / "questions" / f"{split}.jsonl"


def data_dir(out: Path, generator: str, split: str) -> Path:
    return out / "data" / generator / split


def trajectories_path(out: Path, generator: str, split: str) -> Path:
    return data_dir(out, generator, split) / "trajectories.parquet"


def labels_path(out: Path, generator: str, split: str) -> Path:
    return data_dir(out, generator, split) / "labels.parquet"


def pool_path(out: Path, generator: str, split: str) -> Path:
    return data_dir(out, generator, split) / "pool.parquet"


def split_world(world: str) -> tuple[str, str]:
    """``{generator}__{prm}`` -> ``(generator, prm)``."""
    generator, _, prm = world.partition("__")
    return generator, prm
