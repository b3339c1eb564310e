"""Synthetic worlds with a known truth, fitted to the paper's published Base statistics.

A world is one generator x one PRM; every world has the splits ``train`` (MATH-train-like),
``id`` (MATH500-like) and ``ood`` (AIME24-25-like). The generative model, its realism choices
and what the fit does and does not promise are described in docs/synth.md. In short, for a
record (question q, response r, step t):

* **success logit** l = a_q + w_{q,r,t} + c_style sin(1.5 c_{q,r}) [t >= 1], with question
  difficulty a_q ~ N(skill, spread^2) (a wide spread: many questions a generator almost always
  or almost never solves), a trajectory walk w (w_0 = 0, w_t = w_{t-1} + N(0, walk^2): a
  trajectory commits as it goes on) and a visible response style c. The true success
  probability is p = sigmoid(l); labels are k ~ Binomial(n_rollouts, p), success_prob = k / n.
* **what the PRM sees**: noisy readings o_1 = a_q + delta + e_q and o_2 = w + e_{q,r,t},
  with noise sized so that a share ``visibility`` (kappa) of each component's variance is
  visible, plus the style, the step, the PRM's own score quirk and many nuisance features
  unrelated to success. delta = 0 in distribution; out of it the reading misses a share
  ``ood_blindness`` of the generator's drop in skill, delta = ood_blindness (skill_id -
  skill_ood): AIME questions look easier than they are.
* **hidden state (twin v2, format 2)**: h is a fixed embedding, per PRM, of a latent u
  (:func:`assemble_latent`, the one place latents are put together) that carries the
  readings z = (o_1 / 4, o_2 / 2, style) twice: through a linear channel masked by fresh noise,
  m = sqrt(lambda) z + sqrt(1 - lambda) xi, and raw through keyed units
  tanh(s (z . a_k + b_k)) with a visible random key s = +-1. The keyed units are odd in s, so a
  linear readout of them carries nothing about success, while products of two of them (a
  quadratic readout, a network) recover z. lambda = ``linear_share`` is fitted per cell so
  that a converged linear QR matches the paper's QR cells; most of h's variance comes from
  the nuisance features. h = (units B) * col_scale + col_shift, B [128, D].
* **truth**: the success distribution given the PRM's readings (o_1, o_2, style, step).
  Everything is jointly Gaussian in logit space, so l | readings is exactly
  N(true_mu, true_sigma^2) with true_mu = skill + kappa (o_1 - delta - skill) + kappa_t o_2 +
  c_style sin(1.5 c), true_sigma^2 = (1 - kappa) spread^2 + (1 - kappa_t) V_t,
  V_t = t walk^2, kappa_t = V_t / (V_t + tau^2); Q(tau | readings) = sigmoid(true_mu +
  true_sigma Phi^-1(tau)) in closed form. h determines the readings (the key is visible and
  the keyed units are injective in z for generic a_k), so this is also the truth given h; a
  linear calibrator of h reaches it only when lambda = 1.
* **PRM score** (the Base prediction), a readout of h that knows neither the generator's skill
  nor its own uncertainty: logit r = score_bias + score_gain (difficulty_weight o_1 + o_2) +
  score_noise n, n the PRM's quirk feature. (score_bias, score_gain, score_noise) are fitted
  per (generator, PRM, split kind) cell so that the Base Brier, PosBrier and ECE match the
  paper's tables (``benchmarks/fit_twin.py``; table ``SCORE_CELLS`` below). Nothing else is
  fitted; calibrators never see these parameters.

The three PRM worlds of one generator share the generator's draws (questions, trajectories,
labels): by default the seed is derived from the generator alone, as in the paper,
where three PRMs score the same rollouts. The PRM's own draws come from a separate stream.

Best-of-N pools: each question's true p_q = sigmoid(a_q) follows the question-only (step 0)
distribution of the calibration set; 64 candidates are correct ~ Bernoulli(p_q) and their
final PRM scores separate correct from wrong ones by the PRM's ``bon_separation``.

Truth goes into ``true_mu``, ``true_sigma`` (logit-normal parameters) and ``true_p`` (the
realised p). Nothing in dprm reads ``true_*`` except truth-based metrics.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from dprm.data import synth_bon
from dprm.data.contract import SetWriter
from dprm.version import __version__

#: version of the world format, written to every set's meta.json as ``synth_format``
#: (1: h a near-linear map of the readings; 2: twin v2, h lossy and non-linear: docs/synth.md)
SYNTH_FORMAT = 2
#: the PRM's success readings z = (o_1 / 4, o_2 / 2, style): three signal columns
N_SIGNAL = 3
N_NUISANCE = 11
#: latent layout (:func:`assemble_latent`): masked linear channel m [3], raw readings z [3],
#: the key s (+-1), step feature, score quirk, then N_NUISANCE nuisance features
LINEAR_COLS = slice(0, N_SIGNAL)
RAW_COLS = slice(N_SIGNAL, 2 * N_SIGNAL)
KEY_COL = 2 * N_SIGNAL
STEP_COL = 2 * N_SIGNAL + 1
QUIRK_COL = 2 * N_SIGNAL + 2
LATENT_DIM = 2 * N_SIGNAL + 3 + N_NUISANCE
#: tanh units read the masked linear channel, the step, the quirk and the nuisance features;
#: keyed units read the raw readings only, as tanh((s z) . a_k + s b_k): odd in s
TANH_WIDTH = 96
KEYED_WIDTH = 32
EMBED_WIDTH = TANH_WIDTH + KEYED_WIDTH
#: weight of the visible response style in the success logit
STYLE_WEIGHT = 0.5
#: step at which the trajectory reading o_2 reaches the PRM's visibility kappa
REFERENCE_STEP = 5
#: trajectory length is log-normal around the generator's typical length with this spread
LENGTH_SPREAD = 0.35


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

# --- fitted by benchmarks/fit_twin.py: do not edit by hand (rerun the fit) --------------------
# BEGIN SCORE_CELLS
SCORE_CELLS_TABLE = """
generator      prm         kind  score_bias  score_gain  score_noise  linear_share
llama-3.2-1b   qwen-prm    id        1.8409      0.1489       1.4248        0.4000
llama-3.2-1b   qwen-prm    ood       1.4416      0.3111       2.5764        0.0000
llama-3.2-1b   reasoneval  id        2.1808      0.3331       1.1032        0.1500
llama-3.2-1b   reasoneval  ood       1.2148      0.3111       1.6087        0.0000
llama-3.2-1b   shepherd    id        0.8622      0.2730       0.0102        0.8000
llama-3.2-1b   shepherd    ood      -0.4727      0.3101       0.7649        0.0000
llama-3.1-8b   qwen-prm    id        2.7278      0.1735       2.0433        0.1500
llama-3.1-8b   qwen-prm    ood       1.7576      0.2010       3.0023        0.1500
llama-3.1-8b   reasoneval  id        2.0686      0.0755       1.5830        0.1000
llama-3.1-8b   reasoneval  ood       1.1406      0.1996       1.8395        0.0000
llama-3.1-8b   shepherd    id        1.4204      0.7416       0.4711        0.0000
llama-3.1-8b   shepherd    ood      -0.2699      0.1651       0.8395        0.9000
qwen-2.5-1.5b  qwen-prm    id        1.4646      0.0000       0.3301        0.5000
qwen-2.5-1.5b  qwen-prm    ood       2.8017      0.1546       3.7616        0.0000
qwen-2.5-1.5b  reasoneval  id        1.1634      0.0097       0.7580        0.1000
qwen-2.5-1.5b  reasoneval  ood       1.9353      0.1819       2.5474        0.0000
qwen-2.5-1.5b  shepherd    id        0.6727      0.0712       0.2211        0.2500
qwen-2.5-1.5b  shepherd    ood       0.4151      0.0339       1.2315        0.0000
qwen-2.5-7b    qwen-prm    id        1.6222      0.1963       0.4145        0.5500
qwen-2.5-7b    qwen-prm    ood       4.0830      1.1770       5.2416        0.3000
qwen-2.5-7b    reasoneval  id        1.1918      0.0681       0.2831        0.7000
qwen-2.5-7b    reasoneval  ood       1.5172      0.2297       1.8079        0.1500
qwen-2.5-7b    shepherd    id        0.8500      0.2953       0.0378        1.0000
qwen-2.5-7b    shepherd    ood       0.5572      0.4021       0.7204        0.3500
r1-llama-8b    qwen-prm    id        1.4372      0.0479       0.1527        0.6000
r1-llama-8b    qwen-prm    ood       5.7569      0.5574       4.9152        0.9000
r1-llama-8b    reasoneval  id        1.3432      0.0193       0.0152        0.6500
r1-llama-8b    reasoneval  ood       5.6626      0.0004       5.4323        0.2500
r1-llama-8b    shepherd    id       -0.0353      0.4039       0.9265        1.0000
r1-llama-8b    shepherd    ood      -5.1767      0.0000       5.7878        1.0000
r1-qwen-7b     qwen-prm    id        1.5049      0.0719       0.1658        0.6500
r1-qwen-7b     qwen-prm    ood       6.7454      0.3460       5.4301        0.4500
r1-qwen-7b     reasoneval  id        1.4664      0.0545       0.1337        0.6500
r1-qwen-7b     reasoneval  ood       6.5458      0.1697       5.5552        0.5500
r1-qwen-7b     shepherd    id       -0.0277      0.1374       0.0788        1.0000
r1-qwen-7b     shepherd    ood      -4.4886      0.0001       5.9694        1.0000
"""
# END SCORE_CELLS


def _parse_cells(table: str) -> dict[tuple[str, str, str], ScoreCell]:
    lines = [line.split() for line in table.strip().splitlines()[1:] if line.strip()]
    return {(gen, prm, kind): ScoreCell(*map(float, values)) for gen, prm, kind, *values in lines}


SCORE_CELLS: dict[tuple[str, str, str], ScoreCell] = _parse_cells(SCORE_CELLS_TABLE)
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


def _stable_seed(*parts: object) -> int:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little")


def default_seed(preset: str) -> int:
    """The world seed of a preset: derived from its generator only.

    The PRMs of one generator share its rollouts, and every size shares the paper size's seed:
    a split with the same shape at two sizes (the 60-question ``ood`` split of ``paper`` and
    ``demo``) holds the same records, so the demo's AIME-like split is the fitted one.
    """
    gen, _ = resolve_preset(preset)
    return _stable_seed("twin", gen.name, "paper")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


_PHI_INV = np.vectorize(NormalDist().inv_cdf, otypes=[np.float64])


def _stratified_normal(rng: np.random.Generator, n: int) -> np.ndarray:
    """n standard normals, one per stratum of equal probability, in random order [n].

    Each value is marginally N(0, 1); together they cover the distribution evenly, so a 60-
    question split has the difficulty profile of its distribution, not a lucky draw of it.
    """
    return _PHI_INV((rng.permutation(n) + rng.random(n)) / n)


class Embedding:
    """The PRM's fixed map from latents u [n, LATENT_DIM] to hidden states h [n, D].

    Twin v2 (docs/synth.md): two blocks of units, then a fixed linear map to D dimensions.

    * ``TANH_WIDTH`` tanh units read the masked linear channel m (:func:`assemble_latent`), the
      step, the score quirk and the nuisance features. Their first-layer rows are scaled so that
      m carries a share ``prm.signal_share`` of the pre-activation variance: most of h's
      variance comes from directions that have nothing to do with success.
    * ``KEYED_WIDTH`` keyed units tanh((s z) . a_k + s b_k) read the raw readings z through a
      visible random key s = +-1 (independent of everything else, P(s = 1) = 1/2). Each unit is
      odd in s, so for any function g, E[g(z) unit_k] = 0: a linear readout of these units
      carries nothing about success. Products of two of them do not depend on s
      (unit_k unit_l = tanh(z . a_k + b_k) tanh(z . a_l + b_l)): a quadratic readout, or any
      network that can multiply, recovers z, and h determines z exactly.

    The map is fixed per (PRM, hidden_dim); how informative h is about success is set by the
    latent (the cell's ``linear_share``), not here, so one PRM embeds every generator alike.
    """

    def __init__(self, prm: SynthPRM, hidden_dim: int):
        rng = np.random.default_rng(_stable_seed("embedding-v2", prm.name, hidden_dim))
        reads = np.zeros(LATENT_DIM, bool)
        reads[LINEAR_COLS] = True
        others = np.ones(LATENT_DIM, bool)
        others[LINEAR_COLS] = others[RAW_COLS] = others[KEY_COL] = False
        row_var = np.zeros(LATENT_DIM)
        row_var[reads] = prm.signal_share / reads.sum()
        row_var[others] = (1 - prm.signal_share) / others.sum()
        self.first = rng.normal(0, 1, (LATENT_DIM, TANH_WIDTH)) * np.sqrt(row_var)[:, None] * 1.3
        self.first_bias = rng.normal(0, 0.3, TANH_WIDTH)
        self.keyed = rng.normal(0, 1, (N_SIGNAL, KEYED_WIDTH))
        self.keyed_bias = rng.normal(0, 1, KEYED_WIDTH)
        self.second = rng.normal(0, 1 / np.sqrt(EMBED_WIDTH), (EMBED_WIDTH, hidden_dim))
        # Real hidden states have very different scales and offsets per dimension.
        self.col_scale = np.exp(rng.normal(0, 0.7, hidden_dim))
        self.col_shift = rng.normal(0, 2.0, hidden_dim)

    def features(self, latent: np.ndarray) -> np.ndarray:
        """The EMBED_WIDTH unit activations [n, EMBED_WIDTH] (float32); h is affine in them."""
        latent = np.asarray(latent, dtype=np.float64)
        key = latent[:, KEY_COL : KEY_COL + 1]
        tanh_units = np.tanh(latent @ self.first + self.first_bias)
        keyed_units = np.tanh(key * (latent[:, RAW_COLS] @ self.keyed + self.keyed_bias))
        return np.concatenate([tanh_units, keyed_units], axis=1).astype(np.float32)

    def __call__(self, latent: np.ndarray) -> np.ndarray:
        # float32 throughout: a float64 [chunk, D] temporary would dwarf the output chunk.
        out = self.features(latent) @ self.second.astype(np.float32)
        out *= self.col_scale.astype(np.float32)
        out += self.col_shift.astype(np.float32)
        return out


def assemble_latent(
    readings: np.ndarray,
    masking: np.ndarray,
    key: np.ndarray,
    step_feature: np.ndarray,
    quirk: np.ndarray,
    nuisance: np.ndarray,
    linear_share: float,
) -> np.ndarray:
    """The embedding's input u [n, LATENT_DIM]: the one place latents are assembled.

    Args:
        readings: z [n, N_SIGNAL], the PRM's success readings (o_1 / 4, o_2 / 2, style).
        masking: xi [n, N_SIGNAL], unit-variance noise that hides part of z from the linear
            channel (drawn by :func:`draw_prm`; independent of everything else).
        key: s [n] in {-1, +1}, the keyed units' key (drawn by :func:`draw_prm`).
        step_feature: [n], 2 t / max_steps - 1.
        quirk: [n], the PRM's score quirk (visible).
        nuisance: [n, N_NUISANCE], features unrelated to success.
        linear_share: lambda in [0, 1]: the linear channel is m = sqrt(lambda) z +
            sqrt(1 - lambda) xi; the raw z reach h only through the keyed units.

    Returns:
        u [n, LATENT_DIM] = [m, z, s, step_feature, quirk, nuisance].
    """
    lam = float(np.clip(linear_share, 0.0, 1.0))
    linear = np.sqrt(lam) * readings + np.sqrt(1 - lam) * masking
    return np.column_stack([linear, readings, key, step_feature, quirk, nuisance])


@dataclass
class GeneratorDraws:
    """The generator's random numbers for one split's records (shared by the three PRMs).

    All arrays are [n] per record (``nuisance`` [n, N_NUISANCE], ``label_uniform``
    [n, n_rollouts]); step-0 records of a question carry identical inputs (the empty prefix).
    """

    question: np.ndarray
    response: np.ndarray
    step: np.ndarray
    difficulty: np.ndarray  # standard normal of the record's question
    walk: np.ndarray  # unit-variance-step random walk, 0 at step 0
    style: np.ndarray  # response style, 0 at step 0
    nuisance: np.ndarray
    label_uniform: np.ndarray


@dataclass
class PRMDraws:
    """The PRM's own random numbers for the same records: reading noise and its score quirk."""

    question_noise: np.ndarray  # e_q / its sd, shared by a question's records
    step_noise: np.ndarray  # e_{q,r,t} / its sd, 0 at step 0
    quirk: np.ndarray  # the PRM's score quirk n (visible), question + record parts
    masking: np.ndarray  # [n, N_SIGNAL] xi of the linear channel, question + record parts
    key: np.ndarray  # [n] s = +-1 of the keyed units: per question at step 0, else per record


def _segments(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Owner index and position within the owner for concatenated segments of ``lengths``."""
    owner = np.repeat(np.arange(len(lengths)), lengths)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return owner, np.arange(int(lengths.sum())) - starts


def draw_generator(
    rng: np.random.Generator,
    gen: SynthGenerator,
    split: Split,
    size: WorldSize,
    n_questions: int,
    question_only: bool = False,
) -> GeneratorDraws:
    """Draw one split's question/trajectory/label randomness (calibration or question-only)."""
    n_resp = 1 if question_only else size.n_responses
    difficulty = _stratified_normal(rng, n_questions)
    n_traj = n_questions * n_resp
    typical = gen.mean_steps * size.max_steps / SIZES["paper"].max_steps
    lengths = np.clip(
        np.round(typical * np.exp(LENGTH_SPREAD * rng.standard_normal(n_traj))),
        size.min_steps,
        size.max_steps,
    ).astype(np.int64)
    if question_only:
        lengths[:] = 1
    traj, step = _segments(lengths)
    n = len(traj)
    increments = rng.standard_normal(n)
    increments[step == 0] = 0.0
    cumulative = np.cumsum(increments)
    walk = cumulative - (cumulative - increments)[np.flatnonzero(step == 0)][traj]
    style = rng.standard_normal(n_traj)[traj] * (step > 0)
    question = traj // n_resp
    nuisance = (
        rng.normal(split.nuisance_shift, 1.0, (n_questions, N_NUISANCE))[question]
        + rng.normal(0, 0.7, (n_traj, N_NUISANCE))[traj] * (step > 0)[:, None]
        + rng.normal(0, 0.3, (n, N_NUISANCE)) * (step > 0)[:, None]
    )
    return GeneratorDraws(
        question=question,
        response=traj % n_resp,
        step=step,
        difficulty=difficulty[question],
        walk=walk,
        style=style,
        nuisance=nuisance,
        label_uniform=rng.random((n, size.n_rollouts)),
    )


def draw_prm(
    rng: np.random.Generator, draws: GeneratorDraws, mask_rng: np.random.Generator
) -> PRMDraws:
    """Draw the PRM's reading noise, score quirk and linear-channel masking for ``draws``.

    The masking comes from its own stream ``mask_rng`` (:func:`split_rngs`), so the readings,
    scores and labels are the same random numbers as in format 1 worlds (the Base fit holds).
    """
    n, n_q = len(draws.step), int(draws.question.max()) + 1
    later = draws.step > 0
    # question-level parts are stratified like the difficulty: a 12- or 60-question split
    # gets the distribution's profile, not a lucky draw of it
    # masking: a question part shared by its records (step 0 records stay one input per
    # question) plus a record part from step 1 on; unit variance from step 1 on
    masking = (
        mask_rng.standard_normal((n_q, N_SIGNAL))[draws.question]
        + mask_rng.standard_normal((n, N_SIGNAL)) * later[:, None]
    ) / np.sqrt(2)
    signs = 2.0 * (mask_rng.random(n_q + n) < 0.5) - 1
    key = np.where(later, signs[n_q:], signs[:n_q][draws.question])
    return PRMDraws(
        question_noise=_stratified_normal(rng, n_q)[draws.question],
        step_noise=rng.standard_normal(n) * later,
        quirk=(_stratified_normal(rng, n_q)[draws.question] + rng.standard_normal(n) * later)
        / np.sqrt(2),
        masking=masking,
        key=key,
    )


@dataclass
class Records:
    """Everything about one split's records except the hidden states (all [n])."""

    true_mu: np.ndarray
    true_sigma: np.ndarray
    true_p: np.ndarray
    n_correct: np.ndarray
    prm_score: np.ndarray
    latent: np.ndarray  # [n, LATENT_DIM]: the embedding's input (:func:`assemble_latent`)
    question_reading: np.ndarray  # o_1, the PRM's difficulty reading


def simulate(
    gen: SynthGenerator,
    prm: SynthPRM,
    cell: ScoreCell,
    kind: str,
    draws: GeneratorDraws,
    prm_draws: PRMDraws,
    max_steps: int,
) -> Records:
    """Truth, labels, PRM score and visible features of a split's records (no hidden states)."""
    skill, spread = gen.difficulty(kind)
    kappa = prm.visibility
    t = draws.step.astype(np.float64)
    question_logit = skill + spread * draws.difficulty
    walk = gen.walk * draws.walk
    style_term = STYLE_WEIGHT * np.sin(1.5 * draws.style)
    logit = question_logit + walk + style_term
    # the PRM's readings: a share kappa of each component's variance is visible
    # out of distribution the reading misses part of the difficulty drop: AIME questions look
    # easier to a MATH-trained PRM than they are (a known offset, so the truth stays exact)
    delta = prm.ood_blindness * (gen.skill - skill)
    o1 = question_logit + delta + spread * np.sqrt((1 - kappa) / kappa) * prm_draws.question_noise
    tau2 = REFERENCE_STEP * gen.walk**2 * (1 - kappa) / kappa
    o2 = walk + np.sqrt(tau2) * prm_draws.step_noise
    var_walk = t * gen.walk**2
    kappa_t = var_walk / (var_walk + tau2)
    true_mu = skill + kappa * (o1 - delta - skill) + kappa_t * o2 + style_term
    true_sigma = np.sqrt((1 - kappa) * spread**2 + (1 - kappa_t) * var_walk)
    true_p = _sigmoid(logit)
    n_correct = (draws.label_uniform < true_p[:, None]).sum(axis=1)
    score_logit = (
        cell.score_bias
        + cell.score_gain * (prm.difficulty_weight * o1 + o2)
        + cell.score_noise * prm_draws.quirk
    )
    latent = assemble_latent(
        np.column_stack([o1 / 4, o2 / 2, draws.style]),
        prm_draws.masking,
        prm_draws.key,
        2 * t / max_steps - 1,
        prm_draws.quirk,
        draws.nuisance,
        cell.linear_share,
    )
    return Records(true_mu, true_sigma, true_p, n_correct, _sigmoid(score_logit), latent, o1)


def draw_pool(
    rng: np.random.Generator,
    prm_rng: np.random.Generator,
    prm: SynthPRM,
    cell: ScoreCell,
    rec: Records,
    question: np.ndarray,
    split_name: str,
    pool_size: int,
) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """A BoN set's questions and candidate pools from question-only records.

    Candidates are correct ~ Bernoulli(p_q) (``rng``); their final PRM scores separate correct
    from wrong ones by the PRM's ``bon_separation`` around the question's score (``prm_rng``).

    Args:
        rng, prm_rng: the generator's and the PRM's streams (drawn in that order).
        prm, cell: the world's PRM and score cell.
        rec: the question-only records [Q] (:func:`simulate`).
        question: [Q] question indices (ids ``{split_name}-b####``).
        split_name: the split's name.
        pool_size: candidates per question K.

    Returns:
        (questions [Q rows], responses [Q * K rows, row-major], correct [Q, K]).
    """
    p_q = rec.true_p
    correct = rng.random((len(p_q), pool_size)) < p_q[:, None]
    cand_logit = (
        cell.score_bias
        + cell.score_gain * prm.difficulty_weight * rec.question_reading[:, None]
        + prm.bon_separation * (2 * correct - 1)
        + np.sqrt(1 + cell.score_noise**2) * prm_rng.standard_normal(correct.shape)
    )
    ids = [f"{split_name}-b{q:04d}" for q in question]
    questions = pd.DataFrame(
        {
            "question_id": ids,
            "prm_score": rec.prm_score.astype(np.float32),
            "true_mu": rec.true_mu.astype(np.float32),
            "true_sigma": rec.true_sigma.astype(np.float32),
            "true_p": p_q.astype(np.float32),
        }
    )
    responses = pd.DataFrame(
        {
            "question_id": np.repeat(ids, pool_size),
            "response_id": np.tile(np.arange(pool_size, dtype=np.int32), len(ids)),
            "prm_score": _sigmoid(cand_logit).astype(np.float32).ravel(),
            "correct": correct.ravel(),
        }
    )
    return questions, responses, correct


def write_world(
    out: str | Path,
    preset: str,
    *,
    size: str | None = None,
    seed: int | None = None,
    hidden_dim: int | None = None,
    progress: bool = True,
    chunk_rows: int = 1024,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Write ``out/{split}/calib`` (and ``out/{split}/bon`` for test splits) for a preset.

    Args:
        out: output directory.
        preset: ``GENERATOR__PRM`` or ``demo``.
        size: ``paper`` (3584-dim, 500 + 60 + 500 questions), ``demo`` or ``tiny``; default
            ``paper`` (``demo`` for the demo preset).
        seed: world seed; default derived from the generator (:func:`default_seed`), so
            presets are reproducible and the PRMs of one generator share its rollouts.
        hidden_dim: override the size's hidden dimension.
        overwrite: write into an ``out`` that already holds files (False: refused before any
            work, as ``dprm synth`` refuses an existing ``--out``).

    Returns:
        ``{"id/calib": path, "id/bon": path, "ood/calib": ..., "ood/bon": ...,
        "train/calib": ...}`` (the ``train`` split, MATH-train-like, has no BoN set).
    """
    out = Path(out)
    if not overwrite and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists; pass overwrite=True to write into it")
    gen, prm = resolve_preset(preset)
    size_name = size or ("demo" if preset == "demo" else "paper")
    if size_name not in SIZES:
        raise ValueError(f"unknown size {size_name!r}; choose from {sorted(SIZES)}")
    world = SIZES[size_name]
    if hidden_dim is not None:
        world = replace(world, hidden_dim=int(hidden_dim))
    seed = default_seed(preset) if seed is None else int(seed)
    embed = Embedding(prm, world.hidden_dim)
    out = Path(out)
    written: dict[str, Path] = {}
    provenance = {
        "source": "dprm synth",
        "preset": preset,
        "generator": gen.name,
        "prm": prm.name,
        "size": size_name,
        "seed": seed,
        "synth_format": SYNTH_FORMAT,
        "dprm_version": __version__,
    }
    n_sets = 2 * len(world.splits)
    bar = tqdm(total=n_sets, desc=f"synth {preset}", disable=not progress, unit="set")

    def fill_hidden(writer: SetWriter, latent: np.ndarray) -> None:
        for start in range(0, len(latent), chunk_rows):
            writer.hidden[start : start + chunk_rows] = embed(latent[start : start + chunk_rows])

    for split_index, split in enumerate(world.splits):
        rng, prm_rng, mask_rng = split_rngs(seed, split_index, prm)
        cell = score_cell(gen, prm, split.kind)
        # -- calibration set -----------------------------------------------------------------
        draws = draw_generator(rng, gen, split, world, split.n_questions)
        prm_draws = draw_prm(prm_rng, draws, mask_rng)
        rec = simulate(gen, prm, cell, split.kind, draws, prm_draws, world.max_steps)
        records = pd.DataFrame(
            {
                "question_id": [f"{split.name}-q{q:04d}" for q in draws.question],
                "response_id": draws.response.astype(np.int32),
                "step": draws.step.astype(np.int32),
                "prm_score": rec.prm_score.astype(np.float32),
                "success_prob": (rec.n_correct / world.n_rollouts).astype(np.float32),
                "n_rollouts": np.full(len(draws.step), world.n_rollouts, np.int32),
                "true_mu": rec.true_mu.astype(np.float32),
                "true_sigma": rec.true_sigma.astype(np.float32),
                "true_p": rec.true_p.astype(np.float32),
            }
        )
        path = out / split.name / "calib"
        with SetWriter(path, "calibration", len(records), world.hidden_dim) as writer:
            fill_hidden(writer, rec.latent)
            writer.records = records
            writer.meta.update(provenance, split=split.name)
        written[f"{split.name}/calib"] = path
        bar.update()
        if split.n_bon_questions == 0:  # a training split: its BoN pools (v2) come from a
            written[f"{split.name}/bon"] = synth_bon.write_train_bon(  # separate stream
                out / split.name / "bon", seed, split_index, gen, prm, cell, split, world, embed,
                provenance)  # fmt: skip
            bar.update()
            continue
        # -- best-of-N set: fresh questions from the same distribution (question-only) -------
        q_draws = draw_generator(rng, gen, split, world, split.n_bon_questions, question_only=True)
        q_prm_draws = draw_prm(prm_rng, q_draws, mask_rng)
        q_rec = simulate(gen, prm, cell, split.kind, q_draws, q_prm_draws, world.max_steps)
        questions, responses, correct = draw_pool(
            rng, prm_rng, prm, cell, q_rec, q_draws.question, split.name, world.pool_size
        )
        p_q = q_rec.true_p
        path = out / split.name / "bon"
        with SetWriter(path, "bon", len(questions), world.hidden_dim) as writer:
            fill_hidden(writer, q_rec.latent)
            writer.records = questions
            writer.responses = synth_bon.add_v2(writer, responses, seed, split_index, gen, prm,
                                                p_q, q_rec.latent, correct, embed, world,
                                                cell.linear_share)  # fmt: skip
            writer.meta.update(provenance, split=split.name, pool_size=world.pool_size)
        written[f"{split.name}/bon"] = path
        bar.update()
    bar.close()
    return written


def split_rngs(
    seed: int, split_index: int, prm: SynthPRM
) -> tuple[np.random.Generator, np.random.Generator, np.random.Generator]:
    """The generator's stream (shared by all PRMs), the PRM's own stream and the PRM's masking
    stream (twin v2's linear-channel noise) of one split."""
    return (
        np.random.default_rng([seed, split_index]),
        np.random.default_rng([seed, split_index, _stable_seed("prm", prm.name)]),
        np.random.default_rng([seed, split_index, _stable_seed("mask", prm.name)]),
    )


@dataclass
class BonQuestions:
    """A twin BoN split's question-level model, replayed (:func:`replay_bon_questions`).

    Attributes:
        gen, prm, cell, world: the world's generator, PRM, score cell and size.
        seed: the world seed; split_index: the split's index in ``world.splits``.
        rec: the BoN questions' records [Q] (question-only: ``true_p``, ``question_reading``,
            ``latent`` [Q, LATENT_DIM], ...), as :func:`write_world` drew them.
    """

    gen: SynthGenerator
    prm: SynthPRM
    cell: ScoreCell
    world: WorldSize
    seed: int
    split_index: int
    rec: Records


def replay_bon_questions(preset: str, split: str, size: str, seed: int) -> BonQuestions:
    """Replay :func:`write_world`'s streams up to one test split's BoN questions.

    The BoN questions are drawn after the split's calibration records from the same streams, so
    the calibration draws are replayed too (no hidden states are embedded). Nothing is written:
    this is how the population oracle (:mod:`dprm.ias.pays`) draws fresh pools for the very
    questions of a written BoN set. Its ``true_p`` equals the set's ``questions.true_p``.

    Args:
        preset: ``GENERATOR__PRM`` (or ``demo``), as in the set's ``meta["preset"]``.
        split: a test split's name (``id`` / ``ood``).
        size: the world size's name; seed: the world seed (``meta["size"]``, ``meta["seed"]``).

    Raises:
        ValueError: an unknown size or split, or a training split (its pools use other streams).
    """
    gen, prm = resolve_preset(preset)
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose from {sorted(SIZES)}")
    world = SIZES[size]
    names = [s.name for s in world.splits]
    if split not in names:
        raise ValueError(f"unknown split {split!r} of size {size!r}; choose from {names}")
    split_index = names.index(split)
    spl = world.splits[split_index]
    if spl.n_bon_questions == 0:
        raise ValueError(f"split {split!r} is a training split: no test BoN questions to replay")
    rng, prm_rng, mask_rng = split_rngs(int(seed), split_index, prm)
    cell = score_cell(gen, prm, spl.kind)
    draws = draw_generator(rng, gen, spl, world, spl.n_questions)
    draw_prm(prm_rng, draws, mask_rng)  # advances the streams as write_world does
    q_draws = draw_generator(rng, gen, spl, world, spl.n_bon_questions, question_only=True)
    q_prm_draws = draw_prm(prm_rng, q_draws, mask_rng)
    rec = simulate(gen, prm, cell, spl.kind, q_draws, q_prm_draws, world.max_steps)
    return BonQuestions(gen, prm, cell, world, int(seed), split_index, rec)
