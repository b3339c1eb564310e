"""The fitted best-of-N twin's presets: (generator, PRM) pairs whose pools match published curves.

A fitted preset is a ``GENERATOR__PRM`` world whose best-of-N pools come from
:mod:`dprm.data.synth.bon_fitted` (one candidate state per candidate, attractor wrong answers)
and whose free numbers are fitted by ``tools/fit_bon_twin.py`` to the published accuracy
points in ``published_bon.csv`` (package data, one row per published point with its source).
The fitted numbers are package data too, ``fitted_bon.csv`` (written by the tool; do not edit
it by hand). These presets are separate from :data:`dprm.data.synth.presets.GENERATORS` /
``PRMS`` (the v2 twin's grid is unchanged); :func:`dprm.data.synth.write_world` accepts both.

What is fixed (not fitted) and why:

* the generator's AIME-like ``ood`` difficulty and typical length (the v2 twin's
  ``qwen-2.5-7b``) and its walk ``WALK`` (1.0: how much a trajectory decides its own success
  beyond the question; at the v2 twin's 0.5 no score readout of the candidate state reaches
  the published highest-score point);
* the PRM's visibility, signal share, difficulty weight, OOD blindness and the score gain
  (``SCORE_GAIN``): only the ratio of score noise to gain moves the highest-score pick;
* the attractor model (``SHARE_LOGIT``: half of a typical question's wrong answers on its
  attractors; ``SHARE_SD``; 1 to ``MAX_ATTRACTORS`` attractors, uniform): the published points
  (pass@8 and maj@8 only) fix two numbers of the generator, taken as skill and spread.

What is fitted: the generator's skill and spread (pass@8 and maj@8 together), each PRM's score
noise (highest-score@8) and score bias (calibration in the large on the candidates: mean score
= mean correctness).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, replace
from importlib import resources

from dprm.data.synth.presets import (
    ScoreCell,
    SynthGenerator,
    SynthPRM,
    read_keyed_csv,
    stable_seed,
    write_keyed_csv,
)

#: fitted numbers (package data, written by tools/fit_bon_twin.py) and the published points
FITTED_FILE = "fitted_bon.csv"
PUBLISHED_FILE = "published_bon.csv"
#: fixed choices (see the module docstring)
WALK = 1.0
SCORE_GAIN = 0.5
SHARE_LOGIT = 0.0
SHARE_SD = 1.5
MAX_ATTRACTORS = 3
ID_LINEAR_SHARE, OOD_LINEAR_SHARE = 0.55, 0.3


@dataclass(frozen=True)
class AttractorModel:
    """Wrong answers of one world: a few attractor values per question plus singletons.

    A question has m_q ~ uniform{1..max_attractors} attractor values with Dirichlet(1) weights;
    a wrong candidate lands on one of them with probability s_q = sigmoid(share_logit +
    share_sd z_q), z_q ~ N(0, 1), else it states a value no other candidate states.
    """

    share_logit: float = SHARE_LOGIT
    share_sd: float = SHARE_SD
    max_attractors: int = MAX_ATTRACTORS


@dataclass(frozen=True)
class FittedNumbers:
    """One pair's fitted numbers (a row of ``fitted_bon.csv``)."""

    skill: float
    spread: float
    score_noise: float
    score_bias: float


@dataclass(frozen=True)
class FittedPair:
    """A fitted preset: its generator, PRM, score readout per split kind and attractor model."""

    name: str
    generator: SynthGenerator
    prm: SynthPRM
    cells: dict[str, ScoreCell]
    attractors: AttractorModel

    def cell(self, kind: str) -> ScoreCell:
        """The score readout of split kind ``id`` (also ``train``) or ``ood``."""
        return self.cells[kind]


#: the published pairs' fixed parts: (generator name, PRM name) -> (generator, PRM)
BASE_GENERATOR = SynthGenerator(
    "qwen2.5-math-7b-instruct", skill=1.9, spread=3.6, ood_skill=-4.0, ood_spread=2.8,
    walk=WALK, mean_steps=8,
)  # fmt: skip
BASE_PRMS: dict[str, SynthPRM] = {
    # name  visibility  ood_blindness  signal_share  difficulty_weight  bon_separation (unused:
    # the fitted pools' scores are readouts of the candidate state)
    p.name: p
    for p in [
        SynthPRM("qwen2.5-math-prm-7b", 0.85, 0.5, 0.3, 0.5, 0.0),
        SynthPRM("rlhflow-prm-deepseek-8b", 0.85, 0.5, 0.3, 0.5, 0.0),
    ]
}
FITTED_KEY = ("generator", "prm")


def read_fitted(text: str) -> dict[tuple[str, str], FittedNumbers]:
    """Parse ``fitted_bon.csv``.

    Raises:
        ValueError: a header other than :data:`FITTED_KEY` + the :class:`FittedNumbers` fields.
    """
    return read_keyed_csv(text, FITTED_KEY, FittedNumbers, FITTED_FILE)


def write_fitted(numbers: dict[tuple[str, str], FittedNumbers]) -> str:
    """The fitted numbers as CSV text (6 decimals): :func:`read_fitted`'s inverse."""
    return write_keyed_csv(numbers, FITTED_KEY, FittedNumbers, 6)


def published_points() -> list[dict[str, str]]:
    """The published points (``published_bon.csv``): one dict per row, provenance included."""
    text = resources.files(__package__).joinpath(PUBLISHED_FILE).read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text)))


def build_pair(gen_name: str, prm_name: str, numbers: FittedNumbers) -> FittedPair:
    """A :class:`FittedPair` from the fixed parts and one row of fitted numbers."""
    if gen_name != BASE_GENERATOR.name or prm_name not in BASE_PRMS:
        raise ValueError(f"{FITTED_FILE}: unknown pair {gen_name}__{prm_name}")
    gen = replace(BASE_GENERATOR, skill=numbers.skill, spread=numbers.spread)
    cell = ScoreCell(numbers.score_bias, SCORE_GAIN, numbers.score_noise, ID_LINEAR_SHARE)
    cells = {"id": cell, "ood": replace(cell, linear_share=OOD_LINEAR_SHARE)}
    return FittedPair(
        f"{gen_name}__{prm_name}", gen, BASE_PRMS[prm_name], cells,
        AttractorModel(),
    )  # fmt: skip


def _load() -> dict[str, FittedPair]:
    source = resources.files(__package__).joinpath(FITTED_FILE)
    if not source.is_file():
        return {}
    rows = read_fitted(source.read_text(encoding="utf-8"))
    return {f"{g}__{p}": build_pair(g, p, n) for (g, p), n in rows.items()}


FITTED_PAIRS: dict[str, FittedPair] = _load()


def fitted_preset_names() -> list[str]:
    """The fitted presets' names (``GENERATOR__PRM``)."""
    return list(FITTED_PAIRS)


def fitted_pair(preset: str) -> FittedPair | None:
    """The fitted pair of ``preset``, or None for a v2 twin preset."""
    return FITTED_PAIRS.get(preset)


def fitted_default_seed(preset: str) -> int:
    """A fitted preset's default world seed (from its generator, as the v2 twin's)."""
    return stable_seed("twin-fitted", FITTED_PAIRS[preset].generator.name)
