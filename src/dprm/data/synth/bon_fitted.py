"""The fitted best-of-N twin's pools: one candidate state per candidate, attractor wrong answers.

The v2 pools (:mod:`dprm.data.synth.bon`) draw a candidate's PRM score and its hidden state
separately, and their wrong answers follow the GEM family. Here, for a fitted preset
(:mod:`dprm.data.synth.fitted_presets`):

* **one candidate state.** A candidate is correct ~ Bernoulli(p_q); its trajectory (walk, style,
  length) is drawn from its posterior given that (as :func:`dprm.data.synth.bon.candidate_latents`
  does), the PRM reads it (o_1 the question's reading, o_2 the walk's reading, its quirk) and
  the latent u of those readings is the one state of the candidate: the hidden state the
  calibrator reads is the world's embedding of u, and the PRM score is a readout of u,
  logit r = score_bias + score_gain (difficulty_weight o_1 + o_2) + score_noise quirk: the same
  readout the calibration records' ``prm_score`` use (:func:`dprm.data.synth.simulate`). No
  second, independent signal: what separates a correct candidate's score from a wrong one's is
  the walk reading the calibrator sees too.
* **attractor wrong answers** (:class:`~dprm.data.synth.fitted_presets.AttractorModel`): 1 to 3
  attractor values per question with question-specific weights, plus a long tail of singletons
  (a value no other candidate states). Not the CRP / GEM family ``auto-seq`` assumes.
* **step scores**: the final score's logit walked back, as the v2 pools.

:func:`pool_curves` gives a pool's accuracy-vs-n curves (highest-last, weighted-last,
majority, pass) by random orders; ``tools/fit_bon_twin.py`` fits the free numbers so that these
curves match published points (:func:`draw_fit_pools` is its fast path: no hidden states).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dprm.data.contract import SetWriter
from dprm.data.synth.bon import bon_stream, candidate_latents, step_scores
from dprm.data.synth.draws import (
    LENGTH_SPREAD,
    QUIRK_COL,
    RAW_COLS,
    REFERENCE_STEP,
    STYLE_WEIGHT,
    Records,
    _sigmoid,
    draw_generator,
    draw_prm,
    simulate,
)
from dprm.data.synth.fitted_presets import AttractorModel, FittedPair
from dprm.data.synth.presets import SIZES, ScoreCell, Split, SynthPRM, WorldSize

GOLD = "a0"
#: group ids of :func:`answer_groups`: 0 the gold answer, 1..MAX attractors, then singletons
SINGLETON_BASE = 16
#: the curves' n (powers of two up to the pool size)
CURVE_NS = (1, 2, 4, 8, 16, 32, 64)


def draw_answer_groups(
    rng: np.random.Generator, correct: np.ndarray, model: AttractorModel
) -> np.ndarray:
    """Answer group ids [Q, K] (int): 0 gold, j in 1..m_q an attractor, else a singleton.

    Args:
        rng: the pool's stream.
        correct: [Q, K] candidate correctness.
        model: the world's attractor model.

    Returns:
        [Q, K] ids; a singleton's id is ``SINGLETON_BASE + k`` (k its position): unique.
    """
    q_count, k = correct.shape
    n_att = rng.integers(1, model.max_attractors + 1, q_count)
    gam = rng.gamma(1.0, 1.0, (q_count, model.max_attractors))
    gam[np.arange(model.max_attractors)[None, :] >= n_att[:, None]] = 0.0
    weights = gam / gam.sum(axis=1, keepdims=True)
    share = _sigmoid(model.share_logit + model.share_sd * rng.standard_normal(q_count))
    on_attractor = rng.random((q_count, k)) < share[:, None]
    cdf = np.cumsum(weights, axis=1)
    which = (rng.random((q_count, k))[:, :, None] > cdf[:, None, :]).sum(axis=2) + 1
    which = np.minimum(which, n_att[:, None])
    singleton = SINGLETON_BASE + np.arange(k)[None, :].repeat(q_count, axis=0)
    groups = np.where(on_attractor, which, singleton)
    return np.where(correct, 0, groups)


def group_labels(groups: np.ndarray) -> np.ndarray:
    """Answer strings [Q, K]: ``a0`` gold, ``w{j}`` attractor j, ``s{k}`` singleton k."""
    out = np.where(
        groups == 0,
        GOLD,
        np.where(groups < SINGLETON_BASE, np.char.add("w", groups.astype(str)),
                 np.char.add("s", (groups - SINGLETON_BASE).astype(str))),
    )  # fmt: skip
    return out.astype(object)


def score_readout(latent: np.ndarray, prm: SynthPRM, cell: ScoreCell) -> np.ndarray:
    """The PRM score of candidate states [n] from their latents [n, LATENT_DIM].

    logit r = score_bias + score_gain (difficulty_weight o_1 + o_2) + score_noise quirk, with
    o_1 = 4 z_1, o_2 = 2 z_2 the readings and the quirk as :func:`dprm.data.assemble_latent`
    lays them out: the same readout as :func:`dprm.data.synth.simulate`'s.
    """
    z = np.asarray(latent, dtype=np.float64)[:, RAW_COLS]
    quirk = np.asarray(latent, dtype=np.float64)[:, QUIRK_COL]
    logit = (
        cell.score_bias
        + cell.score_gain * (prm.difficulty_weight * 4 * z[:, 0] + 2 * z[:, 1])
        + cell.score_noise * quirk
    )
    return _sigmoid(logit)


def candidate_states(
    rng: np.random.Generator,
    pair: FittedPair,
    cell: ScoreCell,
    q_rec: Records,
    correct: np.ndarray,
    world: WorldSize,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each candidate's latent [Q * K, LATENT_DIM], length [Q, K] and PRM score [Q, K]."""
    p = np.clip(np.asarray(q_rec.true_p, dtype=np.float64), 1e-12, 1 - 1e-12)
    latent, length = candidate_latents(
        rng, pair.generator, pair.prm, np.log(p) - np.log1p(-p), q_rec.latent, correct,
        cell.linear_share, world.max_steps, world.min_steps, REFERENCE_STEP, STYLE_WEIGHT,
        LENGTH_SPREAD, SIZES["paper"].max_steps,
    )  # fmt: skip
    score = score_readout(latent, pair.prm, cell).reshape(correct.shape)
    return latent, length, score


def fitted_pool(
    rng: np.random.Generator,
    pair: FittedPair,
    cell: ScoreCell,
    q_rec: Records,
    question_ids: list[str],
    pool_size: int,
    world: WorldSize,
) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """One BoN set's questions, responses (v2 columns) and candidate latents.

    Args:
        rng: the pool stream (:func:`dprm.data.synth.bon.bon_stream`).
        pair, cell: the fitted pair and the split kind's score readout.
        q_rec: the question-only records [Q] (``true_p``, ``latent``, ...).
        question_ids: [Q] the set's question ids.
        pool_size: candidates per question K.
        world: the world size.

    Returns:
        (questions [Q rows], responses [Q * K rows, row-major; ``prm_score``, ``correct``,
        ``answer``, ``step_scores``], latents [Q * K, LATENT_DIM]).
    """
    p_q = np.asarray(q_rec.true_p, dtype=np.float64)
    correct = rng.random((len(p_q), pool_size)) < p_q[:, None]
    latent, length, score = candidate_states(rng, pair, cell, q_rec, correct, world)
    groups = draw_answer_groups(rng, correct, pair.attractors)
    questions = pd.DataFrame(
        {
            "question_id": question_ids,
            "prm_score": q_rec.prm_score.astype(np.float32),
            "true_mu": q_rec.true_mu.astype(np.float32),
            "true_sigma": q_rec.true_sigma.astype(np.float32),
            "true_p": p_q.astype(np.float32),
        }
    )
    final = score.astype(np.float32)
    responses = pd.DataFrame(
        {
            "question_id": np.repeat(question_ids, pool_size),
            "response_id": np.tile(np.arange(pool_size, dtype=np.int32), len(question_ids)),
            "prm_score": final.ravel(),
            "correct": correct.ravel(),
            "answer": group_labels(groups).ravel(),
        }
    )
    responses["step_scores"] = step_scores(
        rng, final.astype(np.float64).clip(1e-6, 1 - 1e-6), length
    )
    return questions, responses, latent


def write_fitted_bon(
    path, pair: FittedPair, cell: ScoreCell, q_rec: Records, question_ids, seed: int,
    split_index: int, world: WorldSize, embed, provenance: dict, split_name: str,
    chunk_rows: int = 1024,
):  # fmt: skip
    """Write one fitted BoN set: question states, candidate states (the embedding of the same
    latents the scores read) and the pools."""
    rng = bon_stream(seed, split_index)
    questions, responses, latent = fitted_pool(
        rng, pair, cell, q_rec, list(question_ids), world.pool_size, world
    )
    with SetWriter(path, "bon", len(questions), world.hidden_dim) as writer:
        for start in range(0, len(questions), chunk_rows):
            writer.hidden[start : start + chunk_rows] = embed(
                q_rec.latent[start : start + chunk_rows]
            )
        writer.records = questions
        target = writer.open_response_hidden(len(latent))
        for start in range(0, len(latent), chunk_rows):
            target[start : start + chunk_rows] = embed(latent[start : start + chunk_rows])
        writer.responses = responses
        writer.meta.update(provenance, split=split_name, pool_size=world.pool_size,
                           bon_model="fitted")  # fmt: skip
    return path


def write_fitted_train_bon(path, seed, split_index, pair: FittedPair, cell, split: Split, world,
                           embed, provenance):  # fmt: skip
    """The training split's fitted BoN set, from streams of its own (the calibration records and
    the test splits are unchanged); question ids ``train-b####``."""
    from dprm.data.synth.presets import stable_seed

    rng = np.random.default_rng([seed, split_index, 21])
    prm_rng = np.random.default_rng([seed, split_index, 22, stable_seed("prm", pair.prm.name)])
    mask_rng = np.random.default_rng([seed, split_index, 23, stable_seed("prm", pair.prm.name)])
    draws = draw_generator(rng, pair.generator, split, world, split.n_questions,
                           question_only=True)  # fmt: skip
    rec = simulate(pair.generator, pair.prm, cell, split.kind, draws,
                   draw_prm(prm_rng, draws, mask_rng), world.max_steps)  # fmt: skip
    ids = [f"{split.name}-b{q:04d}" for q in draws.question]
    return write_fitted_bon(path, pair, cell, rec, ids, seed, split_index, world, embed,
                            provenance, split.name)  # fmt: skip


def draw_fit_pools(
    pair: FittedPair, n_questions: int, pool_size: int, seed: int, kind: str = "id"
) -> dict[str, np.ndarray]:
    """Pools of a fitted pair without hidden states (the fit's and the tests' fast path).

    Same draws as a written set's pools (questions from the split kind's difficulty, stratified;
    candidates as :func:`fitted_pool`), from ``default_rng([seed, 77])``.

    Returns:
        ``{"score": [Q, K], "correct": [Q, K], "groups": [Q, K], "latent": [Q * K, LATENT_DIM]}``.
    """
    world = SIZES["demo"]
    split = Split("fit", n_questions, n_questions, kind, 0.0)
    rng = np.random.default_rng([seed, 77])
    cell = pair.cell(kind)
    draws = draw_generator(rng, pair.generator, split, world, n_questions, question_only=True)
    rec = simulate(pair.generator, pair.prm, cell, kind, draws, draw_prm(rng, draws, rng),
                   world.max_steps)  # fmt: skip
    correct = rng.random((n_questions, pool_size)) < rec.true_p[:, None]
    latent, _, score = candidate_states(rng, pair, cell, rec, correct, world)
    groups = draw_answer_groups(rng, correct, pair.attractors)
    return {"score": score, "correct": correct, "groups": groups, "latent": latent,
            "true_p": rec.true_p}  # fmt: skip


def pool_curves(
    score: np.ndarray,
    correct: np.ndarray,
    groups: np.ndarray,
    ns=CURVE_NS,
    trials: int = 8,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Accuracy at each n of ``ns`` of highest-last, weighted-last, majority and pass@n.

    Each trial draws a random order per question; the first n of an order are the draw of n.
    Highest: the candidate of largest score. Weighted: the answer of largest summed score.
    Majority: the most frequent answer. Ties between answers broken uniformly at random (a
    random priority per answer and trial, as :mod:`dprm.ias.selection.rules` breaks them).

    Args:
        score, correct, groups: [Q, K] scores, correctness, answer group ids (0 = gold).
        ns: the n's (each <= K).
        trials: random orders per question.

    Returns:
        ``{"highest": [len(ns)], "weighted": ..., "majority": ..., "pass": ...}`` mean accuracy.
    """
    rng = np.random.default_rng(seed)
    q_count, k = score.shape
    n_groups = SINGLETON_BASE + k
    rows = np.arange(q_count)
    marks = {n: i for i, n in enumerate(ns)}
    out = {name: np.zeros(len(ns)) for name in ("highest", "weighted", "majority", "pass")}
    for _ in range(trials):
        order = np.argsort(rng.random((q_count, k)), axis=1)
        tie = rng.random((q_count, n_groups)) * 1e-6
        sums = np.zeros((q_count, n_groups))
        counts = np.zeros((q_count, n_groups))
        best = np.full(q_count, -np.inf)
        best_ok = np.zeros(q_count, bool)
        any_ok = np.zeros(q_count, bool)
        for j in range(k):
            c = order[:, j]
            s, ok, g = score[rows, c], correct[rows, c], groups[rows, c]
            better = s > best
            best = np.where(better, s, best)
            best_ok = np.where(better, ok, best_ok)
            any_ok |= ok
            sums[rows, g] += s
            counts[rows, g] += 1
            if j + 1 in marks:
                i = marks[j + 1]
                out["highest"][i] += best_ok.mean()
                out["pass"][i] += any_ok.mean()
                out["weighted"][i] += (np.argmax(sums + tie, axis=1) == 0).mean()
                out["majority"][i] += (np.argmax(counts + tie, axis=1) == 0).mean()
    return {name: v / trials for name, v in out.items()}
