"""The twin's presets: generators, PRMs, world sizes and the fitted score cells.

A preset is one ``GENERATOR__PRM`` world (or ``demo``). The fitted cells (one
(generator, PRM, split kind) readout each) are package data, ``score_cells.csv`` beside this
module, written by ``tools/fit_twin.py --write`` (do not edit it by hand: rerun the fit).
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass, fields
from importlib import resources


@dataclass(frozen=True)
class SynthGenerator:
    """A synthetic generator: its question difficulty per split and how its trajectories run.

    ``skill`` is the mean success logit of a question, ``spread`` its standard deviation across
    questions (MATH / AIME difficulty is strongly bimodal for one generator: a large spread);
    the ``ood_`` pair describes the AIME-like split.
    """

    name: str
    skill: float
    spread: float
    ood_skill: float
    ood_spread: float
    walk: float  # sd of the per-step change of the success logit
    mean_steps: float  # typical number of reasoning steps at paper size (R1: long)

    def difficulty(self, kind: str) -> tuple[float, float]:
        """(skill, spread) of split kind ``"id"`` (MATH; also ``train``) or ``"ood"``."""
        return (self.skill, self.spread) if kind == "id" else (self.ood_skill, self.ood_spread)


@dataclass(frozen=True)
class SynthPRM:
    """A synthetic PRM: what its hidden state carries and how its final scores separate."""

    name: str
    visibility: float  # kappa in (0, 1): share of the success logit's variance h carries
    ood_blindness: float  # share of the ID -> OOD difficulty drop its reading o_1 misses
    signal_share: float  # share of h's pre-activation variance from success-related features
    difficulty_weight: float  # weight of question difficulty in its score (vs trajectory)
    bon_separation: float  # logit gap between correct and wrong complete responses


@dataclass(frozen=True)
class ScoreCell:
    """One (generator, PRM, split kind) cell's fitted numbers.

    (score_bias, score_gain, score_noise) are the PRM score's readout, fitted to the paper's
    Base metrics; ``linear_share`` (lambda in [0, 1]) is how much of the PRM's success reading
    reaches h through its linear channel, fitted so that a converged linear QR matches the
    paper's QR cells (docs/synth.md, "Twin v2").
    """

    score_bias: float
    score_gain: float
    score_noise: float
    linear_share: float = 1.0


GENERATORS: dict[str, SynthGenerator] = {
    g.name: g
    for g in [
        # name  skill  spread  ood_skill  ood_spread  (success logits; see docs/synth.md)
        SynthGenerator("llama-3.2-1b", -1.5, 3.2, -6.5, 2.5, walk=0.55, mean_steps=7),
        SynthGenerator("llama-3.1-8b", -0.3, 3.4, -5.5, 2.5, walk=0.55, mean_steps=7),
        SynthGenerator("qwen-2.5-1.5b", 0.2, 3.4, -5.5, 2.5, walk=0.55, mean_steps=8),
        SynthGenerator("qwen-2.5-7b", 1.9, 3.6, -4.0, 2.8, walk=0.5, mean_steps=8),
        SynthGenerator("r1-llama-8b", 1.0, 3.6, -4.9, 2.8, walk=0.45, mean_steps=16),
        SynthGenerator("r1-qwen-7b", 1.4, 3.6, -4.6, 2.8, walk=0.45, mean_steps=16),
    ]
}
PRMS: dict[str, SynthPRM] = {
    p.name: p
    for p in [
        # name  visibility  ood_blindness  signal_share  difficulty_weight  bon_separation
        SynthPRM("qwen-prm", 0.85, 0.5, 0.3, 0.5, 1.6),
        SynthPRM("reasoneval", 0.6, 0.5, 0.2, 0.4, 0.9),
        SynthPRM("shepherd", 0.35, 0.5, 0.1, 0.3, 0.4),
    ]
}

#: the fitted cells' file (package data), written by tools/fit_twin.py
SCORE_CELLS_FILE = "score_cells.csv"
#: its columns: the cell's key, then the :class:`ScoreCell` fields in order
SCORE_CELL_KEY = ("generator", "prm", "kind")


def read_keyed_csv(text: str, key: tuple[str, ...], record: type, file_name: str) -> dict:
    """Parse a fitted table's CSV text: the ``key`` columns, then ``record``'s dataclass fields.

    Returns:
        key values (a tuple of strings) -> ``record`` of the row's floats.

    Raises:
        ValueError: a header other than ``key`` + the fields of ``record``.
    """
    reader = csv.reader(io.StringIO(text))
    header = tuple(next(reader))
    expected = key + tuple(f.name for f in fields(record))
    if header != expected:
        raise ValueError(f"{file_name}: header {header}, expected {expected}")
    width = len(key)
    return {
        tuple(row[:width]): record(*map(float, row[width:])) for row in reader if row and row[0]
    }


def write_keyed_csv(rows: dict, key: tuple[str, ...], record: type, decimals: int) -> str:
    """A fitted table as CSV text, in ``rows``' order: :func:`read_keyed_csv`'s inverse."""
    names = [f.name for f in fields(record)]
    lines = [",".join(key + tuple(names))]
    for values, row in rows.items():
        lines.append(",".join([*values, *(f"{getattr(row, n):.{decimals}f}" for n in names)]))
    return "\n".join(lines) + "\n"


def read_score_cells(text: str) -> dict[tuple[str, str, str], ScoreCell]:
    """Parse the fitted cells' CSV text: one row per (generator, PRM, split kind).

    Raises:
        ValueError: a header other than :data:`SCORE_CELL_KEY` + the :class:`ScoreCell` fields.
    """
    return read_keyed_csv(text, SCORE_CELL_KEY, ScoreCell, SCORE_CELLS_FILE)


def write_score_cells(cells: dict[tuple[str, str, str], ScoreCell]) -> str:
    """The fitted cells as CSV text (4 decimals), in ``cells``' order: :func:`read_score_cells`'s
    inverse."""
    return write_keyed_csv(cells, SCORE_CELL_KEY, ScoreCell, 4)


SCORE_CELLS: dict[tuple[str, str, str], ScoreCell] = read_score_cells(
    resources.files(__package__).joinpath(SCORE_CELLS_FILE).read_text(encoding="utf-8")
)
#: the unfitted fallback: an over-confident readout (used where the table has no row)
DEFAULT_CELL = ScoreCell(score_bias=1.5, score_gain=0.5, score_noise=0.5, linear_share=0.5)


def score_cell(gen: SynthGenerator, prm: SynthPRM, kind: str) -> ScoreCell:
    """The fitted score readout of a (generator, PRM, split kind) cell."""
    return SCORE_CELLS.get((gen.name, prm.name, kind), DEFAULT_CELL)


@dataclass(frozen=True)
class Split:
    """Question distribution of one split.

    ``kind`` is ``"id"`` (MATH-like: ``train`` and ``id``) or ``"ood"`` (AIME-like).
    ``n_bon_questions == 0`` marks a training split (calibration records only, no BoN pools).
    Splits are generated in tuple order from ``default_rng([seed, index])``, so a split appended
    at the end leaves the earlier splits' data unchanged.
    """

    name: str
    n_questions: int
    n_bon_questions: int
    kind: str
    nuisance_shift: float


@dataclass(frozen=True)
class WorldSize:
    hidden_dim: int
    splits: tuple[Split, ...]
    n_responses: int = 8
    max_steps: int = 20  # prefixes per response at most (steps 0..max_steps-1)
    min_steps: int = 3
    n_rollouts: int = 8
    pool_size: int = 64


SIZES: dict[str, WorldSize] = {
    # MATH-500-like in distribution, AIME-like (harder, shifted, 60 questions) out of it.
    "paper": WorldSize(
        hidden_dim=3584,
        splits=(
            Split("id", 500, 500, "id", 0.0),
            Split("ood", 60, 60, "ood", 1.0),
            Split("train", 500, 0, "id", 0.0),
        ),
    ),
    "demo": WorldSize(
        hidden_dim=256,
        splits=(
            Split("id", 200, 200, "id", 0.0),
            Split("ood", 60, 60, "ood", 1.0),
            Split("train", 200, 0, "id", 0.0),
        ),
    ),
    "tiny": WorldSize(
        hidden_dim=32,
        splits=(
            Split("id", 40, 40, "id", 0.0),
            Split("ood", 12, 12, "ood", 1.0),
            Split("train", 40, 0, "id", 0.0),
        ),
        n_responses=4,
        max_steps=8,
        min_steps=3,
    ),
}


def preset_names() -> list[str]:
    """All ``generator__prm`` presets plus ``demo`` (a small world)."""
    return ["demo"] + [f"{g}__{p}" for p in PRMS for g in GENERATORS]


def resolve_preset(preset: str) -> tuple[SynthGenerator, SynthPRM]:
    """``"llama-3.2-1b__qwen-prm"`` -> (SynthGenerator, SynthPRM); ``"demo"`` is llama-3.2-1b__qwen-prm."""
    if preset == "demo":
        preset = "llama-3.2-1b__qwen-prm"
    gen_name, _, prm_name = preset.partition("__")
    if gen_name not in GENERATORS or prm_name not in PRMS:
        raise ValueError(
            f"unknown preset {preset!r}: expected GENERATOR__PRM with GENERATOR in "
            f"{sorted(GENERATORS)} and PRM in {sorted(PRMS)}, or 'demo'"
        )
    return GENERATORS[gen_name], PRMS[prm_name]


def stable_seed(*parts: object) -> int:
    """A 32-bit seed derived from ``parts`` (stable across runs and platforms)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little")


def default_seed(preset: str) -> int:
    """The world seed of a preset: derived from its generator only.

    The PRMs of one generator share its rollouts, and every size shares the paper size's seed:
    a split with the same shape at two sizes (the 60-question ``ood`` split of ``paper`` and
    ``demo``) holds the same records, so the demo's AIME-like split is the fitted one.
    """
    gen, _ = resolve_preset(preset)
    return stable_seed("twin", gen.name, "paper")
