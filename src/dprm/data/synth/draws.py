"""The twin's generative model: the latent layout, the PRM's embedding of it, the generator's
and the PRM's draws, the records they give and the best-of-N pools (docs/synth.md)."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pandas as pd

from dprm.data.synth.presets import (
    SIZES,
    ScoreCell,
    Split,
    SynthGenerator,
    SynthPRM,
    WorldSize,
    stable_seed,
)

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
        rng = np.random.default_rng(stable_seed("embedding-v2", prm.name, hidden_dim))
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


def split_rngs(
    seed: int, split_index: int, prm: SynthPRM
) -> tuple[np.random.Generator, np.random.Generator, np.random.Generator]:
    """The generator's stream (shared by all PRMs), the PRM's own stream and the PRM's masking
    stream (twin v2's linear-channel noise) of one split."""
    return (
        np.random.default_rng([seed, split_index]),
        np.random.default_rng([seed, split_index, stable_seed("prm", prm.name)]),
        np.random.default_rng([seed, split_index, stable_seed("mask", prm.name)]),
    )
