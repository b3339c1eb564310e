"""BoN contract v2 for the twin worlds: final answers, candidate states and step scores.

:func:`dprm.data.write_world` draws each test question's pool of 64 candidates (their
correctness and final PRM score, contract v1). This module adds what contract v2 carries, from
its own random stream (so every v1 column stays bit for bit what it was):

* **final answers with realistic collisions.** A correct candidate states the gold answer
  (``"a0"``); a wrong one states a wrong value drawn from the question's wrong-answer
  distribution, a GEM (stick-breaking) distribution with concentration
  alpha_q = clip(ALPHA_0 exp(ALPHA_SLOPE a_q), ALPHA_MIN, ALPHA_MAX), a_q the question's success
  logit. A small alpha puts most wrong answers on one or two popular values (a systematic
  mistake); a large alpha scatters them. Hard questions and weak generators (low a_q) get the
  small alphas: this is what makes majority vote plateau below pass@n on hard problems
  (Brown et al. 2024, "Large Language Monkeys"; Wang et al. 2023, self-consistency).
  With ALPHA_0 = 2, ALPHA_SLOPE = 0.25: a_q = -6 gives alpha = 0.45 (the top wrong value takes
  about 70 % of wrong answers), a_q = 0 gives alpha = 2 (about 1/3), a_q = 4 gives alpha = 5.4.
* **candidate states from the same generative model.** A candidate is a complete trajectory of
  the question: its length T, walk w_{T-1}, style c and nuisance draws follow
  :func:`dprm.data.draw_generator`, and its correctness must agree with them. Given the
  candidate's correctness (drawn in v1 from Bernoulli(p_q)), (w, c) is drawn from its posterior
  by sampling-importance-resampling (``N_PROPOSALS`` prior proposals weighted by
  sigmoid(l) or 1 - sigmoid(l), l = a_q + walk w + 0.5 sin(1.5 c)). The PRM reads it as on the
  calibration records (o_1 the question's reading, o_2 = walk w + e with the same noise), and
  the hidden state is the world's own :class:`dprm.data.Embedding` of those features at
  the last prefix step T - 1. So a calibrator's estimate on a candidate state is exactly as
  informative as the twin makes any final-step state.
* **step scores**: the candidate's final score's logit, walked back with N(0, STEP_SCORE_WALK^2)
  steps over its T steps (the last equals ``prm_score``), so min / product aggregations differ
  from the last score as they do on real PRMs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dprm.data.contract import SetWriter
from dprm.data.synth.draws import (
    LENGTH_SPREAD,
    LINEAR_COLS,
    N_NUISANCE,
    N_SIGNAL,
    QUIRK_COL,
    RAW_COLS,
    REFERENCE_STEP,
    STYLE_WEIGHT,
    assemble_latent,
    draw_generator,
    draw_pool,
    draw_prm,
    simulate,
)
from dprm.data.synth.presets import SIZES, stable_seed

#: wrong-answer concentration alpha_q = ALPHA_0 exp(ALPHA_SLOPE a_q), clipped
ALPHA_0 = 2.0
ALPHA_SLOPE = 0.25
ALPHA_MIN, ALPHA_MAX = 0.2, 20.0
#: prior proposals per candidate for the sampling-importance-resampling of its trajectory
N_PROPOSALS = 32
#: sd of the per-step change of the step-score logit, walking back from the final score
STEP_SCORE_WALK = 0.5
GOLD = "a0"


def bon_stream(seed: int, split_index: int) -> np.random.Generator:
    """The v2 stream of one split: separate from the v1 streams, shared by a generator's PRMs
    (answers and trajectories are the generator's), so the three PRMs see the same answers."""
    return np.random.default_rng([seed, split_index, 20])


def wrong_answer_concentration(question_logit: np.ndarray) -> np.ndarray:
    """alpha_q of the GEM wrong-answer distribution [Q] (small: clustered)."""
    alpha = ALPHA_0 * np.exp(ALPHA_SLOPE * np.asarray(question_logit, dtype=np.float64))
    return np.clip(alpha, ALPHA_MIN, ALPHA_MAX)


def draw_answers(rng: np.random.Generator, correct: np.ndarray, question_logit) -> np.ndarray:
    """Final answers [Q, K] (strings): the gold answer if correct, else a popular wrong value.

    Wrong value j (1-based, answer ``"w{j}"``) has GEM(alpha_q) stick-breaking weight
    v_j prod_{i<j} (1 - v_i), v ~ Beta(1, alpha_q), truncated at K values (renormalised).
    """
    q_count, k = correct.shape
    alpha = wrong_answer_concentration(question_logit)
    v = rng.beta(1.0, alpha[:, None], size=(q_count, k))
    left = np.cumprod(np.concatenate([np.ones((q_count, 1)), 1 - v[:, :-1]], axis=1), axis=1)
    weights = v * left
    weights /= weights.sum(axis=1, keepdims=True)
    cdf = np.cumsum(weights, axis=1)
    u = rng.random((q_count, k))
    value = (u[:, :, None] > cdf[:, None, :]).sum(axis=2).clip(0, k - 1) + 1  # [Q, K] in 1..K
    labels = np.char.add("w", value.astype(str)).astype(object)
    return np.where(correct, GOLD, labels)


def candidate_latents(
    rng: np.random.Generator,
    gen,
    prm,
    question_logit: np.ndarray,
    question_latent: np.ndarray,
    correct: np.ndarray,
    linear_share: float,
    max_steps: int,
    min_steps: int,
    reference_step: int,
    style_weight: float,
    length_spread: float,
    paper_max_steps: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Latents [Q * K, LATENT_DIM] of each candidate's final state, and its length [Q, K].

    Args:
        rng: the v2 stream.
        gen, prm: the world's :class:`~dprm.data.SynthGenerator` / ``SynthPRM``.
        question_logit: a_q [Q].
        question_latent: the question-only latents [Q, LATENT_DIM] (twin v2 layout,
            :func:`dprm.data.assemble_latent`): o_1, the question parts of the masking
            noise and of the quirk, the nuisance.
        correct: [Q, K] candidate correctness.
        linear_share: the cell's lambda (the share of the readings in the linear channel).
        max_steps, min_steps, reference_step, style_weight, length_spread, paper_max_steps:
            the world's constants (passed in, so this module does not import synth).
    """
    q_count, k = correct.shape
    typical = gen.mean_steps * max_steps / paper_max_steps
    length = np.clip(
        np.round(typical * np.exp(length_spread * rng.standard_normal((q_count, k)))),
        min_steps,
        max_steps,
    ).astype(np.int64)
    t = (length - 1).astype(np.float64)  # the last prefix step the calibration records have
    walk = rng.standard_normal((q_count, k, N_PROPOSALS)) * np.sqrt(t)[..., None]
    style = rng.standard_normal((q_count, k, N_PROPOSALS))
    logit = question_logit[:, None, None] + gen.walk * walk + style_weight * np.sin(1.5 * style)
    p = 1 / (1 + np.exp(-logit))
    weight = np.where(correct[..., None], p, 1 - p) + 1e-300
    cdf = np.cumsum(weight, axis=-1)
    pick = (rng.random((q_count, k, 1)) * cdf[..., -1:] > cdf).sum(axis=-1).clip(0, N_PROPOSALS - 1)
    w = np.take_along_axis(walk, pick[..., None], axis=-1)[..., 0]
    c = np.take_along_axis(style, pick[..., None], axis=-1)[..., 0]
    kappa = prm.visibility
    tau2 = reference_step * gen.walk**2 * (1 - kappa) / kappa
    o2 = gen.walk * w + np.sqrt(tau2) * rng.standard_normal((q_count, k))

    q_lat = np.asarray(question_latent, dtype=np.float64)
    z_question = q_lat[:, RAW_COLS]  # (o_1 / 4, 0, 0) at step 0
    readings = np.repeat(z_question[:, None, :], k, axis=1)  # [Q, K, N_SIGNAL]
    readings[..., 1] = o2 / 2
    readings[..., 2] = c
    # masking noise as draw_prm makes it: the question's part (recovered from its linear
    # channel m = sqrt(lam) z + sqrt(1 - lam) xi) plus a record part, / sqrt(2) each
    lam = float(np.clip(linear_share, 0.0, 1.0))
    xi_question = (
        (q_lat[:, LINEAR_COLS] - np.sqrt(lam) * z_question) / np.sqrt(1 - lam)
        if lam < 1
        else np.zeros_like(z_question)
    )
    masking = xi_question[:, None, :] + rng.standard_normal((q_count, k, N_SIGNAL)) / np.sqrt(2)
    key = 2.0 * (rng.random((q_count, k)) < 0.5) - 1  # a fresh key per record, as from step 1
    quirk = q_lat[:, None, QUIRK_COL] + rng.standard_normal((q_count, k)) / np.sqrt(2)
    nuisance = q_lat[:, None, QUIRK_COL + 1 :] + (
        rng.normal(0, 0.7, (q_count, k, N_NUISANCE)) + rng.normal(0, 0.3, (q_count, k, N_NUISANCE))
    )
    n = q_count * k
    latent = assemble_latent(
        readings.reshape(n, -1),
        masking.reshape(n, -1),
        key.reshape(n),
        (2 * t / max_steps - 1).reshape(n),
        quirk.reshape(n),
        nuisance.reshape(n, -1),
        lam,
    )
    return latent, length


def step_scores(rng: np.random.Generator, final_score: np.ndarray, length: np.ndarray) -> list:
    """Per-step scores (a list of float32 arrays, row-major over [Q, K]) ending at the final score."""
    logit = np.log(final_score) - np.log1p(-final_score)
    out = []
    for s, n in zip(logit.ravel(), length.ravel(), strict=True):
        back = np.concatenate([[0.0], np.cumsum(rng.normal(0, STEP_SCORE_WALK, int(n) - 1))])[::-1]
        out.append((1 / (1 + np.exp(-(s + back)))).astype(np.float32))
    return out


def add_v2(
    writer,
    responses: pd.DataFrame,
    seed: int,
    split_index: int,
    gen,
    prm,
    p_q: np.ndarray,
    question_latent: np.ndarray,
    correct: np.ndarray,
    embed,
    world,
    linear_share: float,
    chunk_rows: int = 1024,
) -> pd.DataFrame:
    """Fill a BoN :class:`~dprm.data.contract.SetWriter` with the v2 parts.

    Args:
        writer: the open BoN writer (its response hidden states are filled here).
        responses: the v1 responses, rows in [Q, K] row-major order.
        seed, split_index: the world seed and the split's index (the v2 stream).
        gen, prm: the world's generator and PRM.
        p_q: [Q] the questions' true success probabilities sigmoid(a_q).
        question_latent: [Q, LATENT_DIM] the question-only latents.
        correct: [Q, K] candidate correctness.
        embed: the world's :class:`~dprm.data.Embedding`.
        world: the :class:`~dprm.data.WorldSize`.
        linear_share: the cell's lambda (twin v2).

    Returns:
        ``responses`` with ``answer`` and ``step_scores`` added.
    """

    rng = bon_stream(seed, split_index)
    p = np.clip(np.asarray(p_q, dtype=np.float64), 1e-12, 1 - 1e-12)
    question_logit = np.log(p) - np.log1p(-p)
    answers = draw_answers(rng, correct, question_logit)
    latent, length = candidate_latents(
        rng,
        gen,
        prm,
        question_logit,
        question_latent,
        correct,
        linear_share,
        world.max_steps,
        world.min_steps,
        REFERENCE_STEP,
        STYLE_WEIGHT,
        LENGTH_SPREAD,
        SIZES["paper"].max_steps,
    )
    target = writer.open_response_hidden(len(latent))
    for start in range(0, len(latent), chunk_rows):
        target[start : start + chunk_rows] = embed(latent[start : start + chunk_rows])
    final = responses["prm_score"].to_numpy(np.float64).clip(1e-6, 1 - 1e-6)
    out = responses.copy()
    out["answer"] = answers.ravel()
    out["step_scores"] = step_scores(rng, final, length)
    return out


def write_train_bon(path, seed, split_index, gen, prm, cell, split, world, embed, provenance):
    """The training split's BoN set (v2): pools for learning a selection-accuracy model.

    Same model as the test splits' pools in :func:`dprm.data.write_world` (question-only
    draws, correct ~ Bernoulli(p_q), final score separated by ``bon_separation``), one pool per
    training-split question count, from streams of its own so the calibration records and the
    test splits are unchanged. Question ids ``train-b####`` are disjoint from ``train-q####``.
    """

    rng = np.random.default_rng([seed, split_index, 21])
    prm_rng = np.random.default_rng([seed, split_index, 22, stable_seed("prm", prm.name)])
    mask_rng = np.random.default_rng([seed, split_index, 23, stable_seed("prm", prm.name)])
    n_q = split.n_questions
    draws = draw_generator(rng, gen, split, world, n_q, question_only=True)
    rec = simulate(
        gen, prm, cell, split.kind, draws, draw_prm(prm_rng, draws, mask_rng), world.max_steps
    )
    questions, responses, correct = draw_pool(
        rng, prm_rng, prm, cell, rec, draws.question, split.name, world.pool_size
    )
    p_q = rec.true_p
    with SetWriter(path, "bon", n_q, world.hidden_dim) as writer:
        for start in range(0, n_q, 1024):
            writer.hidden[start : start + 1024] = embed(rec.latent[start : start + 1024])
        writer.records = questions
        writer.responses = add_v2(
            writer,
            responses,
            seed,
            split_index,
            gen,
            prm,
            p_q,
            rec.latent,
            correct,
            embed,
            world,
            cell.linear_share,
        )
        writer.meta.update(provenance, split=split.name, pool_size=world.pool_size)
    return path


def fresh_pool_stream(seed: int, split_index: int, pool: int) -> np.random.Generator:
    """The stream of fresh pool ``pool`` of a test split (population oracle): separate from
    every stream :func:`dprm.data.write_world` uses, so the written world is unchanged."""
    return np.random.default_rng([seed, split_index, 30, pool])


def draw_fresh_pool(bq, pool: int, *, step_scores_too: bool = False):
    """One fresh candidate pool for each of a test split's questions, their latents fixed.

    Same generative model as the written pools: correct ~ Bernoulli(p_q) and the final score as
    :func:`dprm.data.draw_pool`; answers as :func:`draw_answers` (a fresh draw of the
    question's wrong-answer distribution: the twin draws it with the pool, it is not a stored
    question latent); with ``step_scores_too``, per-step scores as :func:`step_scores` over
    lengths drawn as the candidates' (slow: a Python loop over candidates). Candidate hidden
    states are not drawn.

    Args:
        bq: :class:`dprm.data.BonQuestions` of the split.
        pool: the pool's index (its own stream, :func:`fresh_pool_stream`).

    Returns:
        (questions, responses): data frames shaped like a BoN set's (v2 columns ``answer`` and,
        with ``step_scores_too``, ``step_scores``), question ids as in the written set.
    """

    rng = fresh_pool_stream(bq.seed, bq.split_index, pool)
    prm_rng = np.random.default_rng(rng.integers(2**63))
    split = bq.world.splits[bq.split_index]
    q_count = len(bq.rec.true_p)
    questions, responses, correct = draw_pool(
        rng, prm_rng, bq.prm, bq.cell, bq.rec, np.arange(q_count), split.name,
        bq.world.pool_size,
    )  # fmt: skip
    p = np.clip(np.asarray(bq.rec.true_p, dtype=np.float64), 1e-12, 1 - 1e-12)
    responses["answer"] = draw_answers(rng, correct, np.log(p) - np.log1p(-p)).ravel()
    if step_scores_too:
        typical = bq.gen.mean_steps * bq.world.max_steps / SIZES["paper"].max_steps
        length = np.clip(
            np.round(typical * np.exp(LENGTH_SPREAD * rng.standard_normal(correct.shape))),
            bq.world.min_steps,
            bq.world.max_steps,
        ).astype(np.int64)
        final = responses["prm_score"].to_numpy(np.float64).clip(1e-6, 1 - 1e-6)
        responses["step_scores"] = step_scores(rng, final, length)
    return questions, responses


def highest_last_population_curve(
    p: np.ndarray, separation: float, score_sd: float, n_max: int, points: int = 2001
) -> np.ndarray:
    """Exact population accuracy of the highest-final-score pick from n i.i.d. candidates.

    Under :func:`dprm.data.draw_pool` a candidate's score logit is
    shift_q + separation (2c - 1) + score_sd Z with c ~ Bernoulli(p_q); the question's shift is
    common to its candidates and cancels. With u = logit / score_sd,
    P(pick correct | n) = int n p phi(u - a) F(u)^(n - 1) du, a = separation / score_sd,
    F(u) = p Phi(u - a) + (1 - p) Phi(u + a) (trapezoid rule on ``points`` nodes over
    [-a - 9, a + 9]).

    Args:
        p: [Q] success probabilities.
        separation: the PRM's ``bon_separation``; score_sd: sqrt(1 + score_noise^2).
        n_max: the largest n.

    Returns:
        [Q, n_max] curves.
    """
    import math

    ndtr = np.vectorize(lambda v: 0.5 * math.erfc(-v / math.sqrt(2.0)))  # 4002 calls: cheap
    p = np.asarray(p, dtype=np.float64)
    a = separation / score_sd
    u = np.linspace(-a - 9.0, a + 9.0, points)
    phi1 = np.exp(-0.5 * (u - a) ** 2) / np.sqrt(2 * np.pi)  # [X]
    big1, big0 = ndtr(u - a), ndtr(u + a)
    n = np.arange(1, n_max + 1, dtype=np.float64)
    out = np.empty((len(p), n_max))
    for start in range(0, len(p), 64):
        pc = p[start : start + 64, None]  # [Qc, 1]
        log_f = np.log(np.clip(pc * big1 + (1 - pc) * big0, 1e-300, 1.0))  # [Qc, X]
        integrand = np.exp(log_f[:, :, None] * (n - 1)) * (pc * phi1[None, :])[:, :, None]
        out[start : start + 64] = n * np.trapezoid(integrand, u, axis=1)
    return np.clip(out, 0.0, 1.0)
