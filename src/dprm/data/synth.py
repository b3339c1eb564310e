"""Synthetic worlds with a known truth: every calibrator can be scored against p itself.

Generative model (one world = one generator x one PRM x one split):

* latent state u [k=8] per record (question q, response r, step t):
  u = (d_q, s_{q,r,t}, t / T_max, v_{q,r,1..5}) with question difficulty d_q, a trajectory
  "progress" random walk s (s_0 = 0), and nuisance features v (style, length, ...);
* hidden state h = fixed nonlinear embedding of u: h = (tanh(u A + b) B) * col_scale + col_shift,
  A [k, 128], B [128, D], fixed per PRM (the PRM's "network"), so h determines u;
* success probability: logit p = mu(u) + sigma(u) * xi, xi ~ N(0, 1) independent of h, with
  mu(u) = skill - a_d d + a_s s + 0.6 sin(1.5 v_1) and sigma(u) = sigma_0 (0.6 + 0.8
  sigmoid(v_2)) (1 - 0.5 t / T_max). The true conditional quantile function is therefore
  Q(tau | h) = sigmoid(mu(u) + sigma(u) Phi^-1(tau)) in closed form;
* labels: k ~ Binomial(n_rollouts, p), success_prob = k / n_rollouts;
* PRM score: an over-confident readout of h that does not know the generator's skill and
  under-weights difficulty: r = sigmoid(bias + gain (rho (-a_d d / 5 + a_s s) + (1 - rho) w(v))).
  rho is the PRM's ranking quality (Qwen-PRM high, Shepherd low).

Best-of-N pools: each question's true p_q is drawn from its question-only distribution; 64
candidates are correct ~ Bernoulli(p_q); candidate PRM scores separate correct from wrong ones
with the PRM's ranking quality.

Truth goes into ``true_mu``, ``true_sigma`` (logit-normal parameters) and ``true_p`` (the
realised p). Nothing in dprm reads ``true_*`` except truth-based metrics.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from dprm import __version__
from dprm.data.contract import SetWriter

LATENT_DIM = 8
EMBED_WIDTH = 128


@dataclass(frozen=True)
class Generator:
    """A synthetic generator: ``skill`` shifts the logit of p; weak < 0 < strong."""

    name: str
    skill: float
    sigma0: float  # aleatoric spread of logit p given h
    progress: float  # a_s: how strongly the trajectory walk moves p


@dataclass(frozen=True)
class PRM:
    """A synthetic PRM: an over-confident readout of h."""

    name: str
    rank_quality: float  # rho in [0, 1]: weight on the true quality signal vs nuisance
    gain: float  # > 1: over-confident
    bias: float  # > 0: over-estimates
    bon_separation: float  # how far correct and wrong complete responses are apart in score


GENERATORS: dict[str, Generator] = {
    g.name: g
    for g in [
        Generator("llama-3.2-1b", skill=-2.2, sigma0=1.2, progress=0.6),
        Generator("llama-3.1-8b", skill=-1.3, sigma0=1.3, progress=0.7),
        Generator("qwen-2.5-1.5b", skill=-0.6, sigma0=1.3, progress=0.8),
        Generator("qwen-2.5-7b", skill=0.0, sigma0=1.2, progress=0.8),
        Generator("r1-llama-8b", skill=0.4, sigma0=1.4, progress=0.9),
        Generator("r1-qwen-7b", skill=0.8, sigma0=1.4, progress=0.9),
    ]
}
PRMS: dict[str, PRM] = {
    p.name: p
    for p in [
        PRM("qwen-prm", rank_quality=0.85, gain=1.8, bias=2.0, bon_separation=1.6),
        PRM("reasoneval", rank_quality=0.6, gain=1.5, bias=1.6, bon_separation=0.9),
        PRM("shepherd", rank_quality=0.3, gain=1.2, bias=1.3, bon_separation=0.35),
    ]
}


@dataclass(frozen=True)
class Split:
    """Question distribution of one split.

    ``n_bon_questions == 0`` marks a training split (calibration records only, no BoN pools).
    Splits are generated in tuple order from ``default_rng([seed, index])``, so a split appended
    at the end leaves the earlier splits' data unchanged.
    """

    name: str
    n_questions: int
    n_bon_questions: int
    difficulty_mean: float
    nuisance_shift: float


@dataclass(frozen=True)
class WorldSize:
    hidden_dim: int
    splits: tuple[Split, ...]
    n_responses: int = 8
    max_steps: int = 20  # prefixes per response at most (steps 0..max_steps-1)
    min_steps: int = 4
    n_rollouts: int = 8
    pool_size: int = 64


SIZES: dict[str, WorldSize] = {
    # MATH-500-like in distribution, AIME-like (harder, shifted, 60 questions) out of it.
    "paper": WorldSize(
        hidden_dim=3584,
        splits=(
            Split("id", 500, 500, 0.0, 0.0),
            Split("ood", 60, 60, 1.6, 1.0),
            Split("train", 500, 0, 0.0, 0.0),
        ),
    ),
    "demo": WorldSize(
        hidden_dim=256,
        splits=(
            Split("id", 200, 200, 0.0, 0.0),
            Split("ood", 60, 60, 1.6, 1.0),
            Split("train", 200, 0, 0.0, 0.0),
        ),
    ),
    "tiny": WorldSize(
        hidden_dim=32,
        splits=(
            Split("id", 40, 40, 0.0, 0.0),
            Split("ood", 12, 12, 1.6, 1.0),
            Split("train", 40, 0, 0.0, 0.0),
        ),
        n_responses=4,
        max_steps=8,
        min_steps=3,
    ),
}
DIFFICULTY_WEIGHT = 1.0  # a_d


def preset_names() -> list[str]:
    """All ``generator__prm`` presets plus ``demo`` (a small world)."""
    return ["demo"] + [f"{g}__{p}" for p in PRMS for g in GENERATORS]


def resolve_preset(preset: str) -> tuple[Generator, PRM]:
    """``"llama-3.2-1b__qwen-prm"`` -> (Generator, PRM); ``"demo"`` is r1-qwen-7b__qwen-prm."""
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


class Embedding:
    """The PRM's fixed map from latent u [n, 8] to hidden states h [n, D]."""

    def __init__(self, prm: PRM, hidden_dim: int):
        rng = np.random.default_rng(_stable_seed("embedding", prm.name, hidden_dim))
        self.first = rng.normal(0, 1 / np.sqrt(LATENT_DIM), (LATENT_DIM, EMBED_WIDTH)) * 1.5
        self.first_bias = rng.normal(0, 0.3, EMBED_WIDTH)
        self.second = rng.normal(0, 1 / np.sqrt(EMBED_WIDTH), (EMBED_WIDTH, hidden_dim))
        # Real hidden states have very different scales and offsets per dimension.
        self.col_scale = np.exp(rng.normal(0, 0.7, hidden_dim))
        self.col_shift = rng.normal(0, 2.0, hidden_dim)

    def __call__(self, latent: np.ndarray) -> np.ndarray:
        # float32 throughout: a float64 [chunk, D] temporary would dwarf the output chunk.
        features = np.tanh(latent @ self.first + self.first_bias).astype(np.float32)
        out = features @ self.second.astype(np.float32)
        out *= self.col_scale.astype(np.float32)
        out += self.col_shift.astype(np.float32)
        return out


def truth(latent: np.ndarray, gen: Generator, max_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Logit-normal parameters (mu [n], sigma [n]) of p given the latent state."""
    d, s, t, v1, v2 = latent[:, 0], latent[:, 1], latent[:, 2], latent[:, 3], latent[:, 4]
    mu = gen.skill - DIFFICULTY_WEIGHT * d + gen.progress * s + 0.6 * np.sin(1.5 * v1)
    sigma = gen.sigma0 * (0.6 + 0.8 / (1 + np.exp(-v2))) * (1 - 0.5 * t)
    return mu, sigma


def prm_readout(latent: np.ndarray, gen: Generator, prm: PRM) -> np.ndarray:
    """The PRM's score: over-confident, skill-blind, difficulty under-weighted."""
    d, s, v3, v4 = latent[:, 0], latent[:, 1], latent[:, 5], latent[:, 6]
    quality = -0.2 * DIFFICULTY_WEIGHT * d + gen.progress * s
    nuisance = (v3 + v4) / np.sqrt(2)
    logit = prm.bias + prm.gain * (prm.rank_quality * quality + (1 - prm.rank_quality) * nuisance)
    return 1 / (1 + np.exp(-logit))


def _latents(rng, split: Split, size: WorldSize, n_questions: int, question_only: bool):
    """Latent states, ids and step indices for a split's calibration records."""
    difficulty = rng.normal(split.difficulty_mean, 1.0, n_questions)
    rows_q, rows_r, rows_t, lat = [], [], [], []
    n_resp = 1 if question_only else size.n_responses
    for q in range(n_questions):
        for r in range(n_resp):
            n_prefix = 1 if question_only else int(rng.integers(size.min_steps, size.max_steps + 1))
            walk = np.concatenate([[0.0], np.cumsum(rng.normal(0.0, 0.55, n_prefix - 1))])
            nuisance = rng.normal(split.nuisance_shift, 1.0, (1, 5)) + rng.normal(
                0, 0.3, (n_prefix, 5)
            )
            steps = np.arange(n_prefix)
            u = np.column_stack(
                [np.full(n_prefix, difficulty[q]), walk, steps / size.max_steps, nuisance]
            )
            lat.append(u)
            rows_q += [q] * n_prefix
            rows_r += [r] * n_prefix
            rows_t += list(steps)
    return np.concatenate(lat), np.array(rows_q), np.array(rows_r), np.array(rows_t)


def write_world(
    out: str | Path,
    preset: str,
    *,
    size: str | None = None,
    seed: int | None = None,
    hidden_dim: int | None = None,
    progress: bool = True,
    chunk_rows: int = 1024,
) -> dict[str, Path]:
    """Write ``out/{split}/calib`` (and ``out/{split}/bon`` for test splits) for a preset.

    Args:
        out: output directory.
        preset: ``GENERATOR__PRM`` or ``demo``.
        size: ``paper`` (3584-dim, 500 + 60 questions), ``demo`` or ``tiny``; default ``paper``
            (``demo`` for the demo preset).
        seed: world seed; default derived from the preset name so presets are reproducible.
        hidden_dim: override the size's hidden dimension.

    Returns:
        ``{"id/calib": path, "id/bon": path, "ood/calib": ..., "ood/bon": ...,
        "train/calib": ...}`` (the ``train`` split, MATH-train-like, has no BoN set).
    """
    gen, prm = resolve_preset(preset)
    size_name = size or ("demo" if preset == "demo" else "paper")
    if size_name not in SIZES:
        raise ValueError(f"unknown size {size_name!r}; choose from {sorted(SIZES)}")
    world = SIZES[size_name]
    if hidden_dim is not None:
        world = replace(world, hidden_dim=int(hidden_dim))
    seed = _stable_seed(preset, size_name) if seed is None else int(seed)
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
        "dprm_version": __version__,
    }
    n_sets = sum(1 + (split.n_bon_questions > 0) for split in world.splits)
    bar = tqdm(total=n_sets, desc=f"synth {preset}", disable=not progress, unit="set")
    for split_index, split in enumerate(world.splits):
        rng = np.random.default_rng([seed, split_index])
        # -- calibration set -----------------------------------------------------------------
        latent, qs, rs, ts = _latents(rng, split, world, split.n_questions, question_only=False)
        mu, sigma = truth(latent, gen, world.max_steps)
        true_p = 1 / (1 + np.exp(-(mu + sigma * rng.standard_normal(len(mu)))))
        n_correct = rng.binomial(world.n_rollouts, true_p)
        records = pd.DataFrame(
            {
                "question_id": [f"{split.name}-q{q:04d}" for q in qs],
                "response_id": rs.astype(np.int32),
                "step": ts.astype(np.int32),
                "prm_score": prm_readout(latent, gen, prm).astype(np.float32),
                "success_prob": (n_correct / world.n_rollouts).astype(np.float32),
                "n_rollouts": np.full(len(qs), world.n_rollouts, np.int32),
                "true_mu": mu.astype(np.float32),
                "true_sigma": sigma.astype(np.float32),
                "true_p": true_p.astype(np.float32),
            }
        )
        path = out / split.name / "calib"
        with SetWriter(path, "calibration", len(records), world.hidden_dim) as writer:
            for start in range(0, len(latent), chunk_rows):
                writer.hidden[start : start + chunk_rows] = embed(
                    latent[start : start + chunk_rows]
                )
            writer.records = records
            writer.meta.update(provenance, split=split.name)
        written[f"{split.name}/calib"] = path
        bar.update()
        if split.n_bon_questions == 0:  # a training split: calibration records only
            continue
        # -- best-of-N set: fresh questions from the same distribution ------------------------
        latent_q, qs_b, _, _ = _latents(
            rng, split, world, split.n_bon_questions, question_only=True
        )
        mu_q, sigma_q = truth(latent_q, gen, world.max_steps)
        p_q = 1 / (1 + np.exp(-(mu_q + sigma_q * rng.standard_normal(len(mu_q)))))
        correct = rng.random((len(p_q), world.pool_size)) < p_q[:, None]
        quality = np.log(p_q / (1 - p_q))[:, None] * 0.3
        cand_logit = prm.bias + prm.gain * (
            quality + prm.bon_separation * (2 * correct - 1) + rng.normal(0, 1.0, correct.shape)
        )
        ids = [f"{split.name}-b{q:04d}" for q in qs_b]
        questions = pd.DataFrame(
            {
                "question_id": ids,
                "prm_score": prm_readout(latent_q, gen, prm).astype(np.float32),
                "true_mu": mu_q.astype(np.float32),
                "true_sigma": sigma_q.astype(np.float32),
                "true_p": p_q.astype(np.float32),
            }
        )
        responses = pd.DataFrame(
            {
                "question_id": np.repeat(ids, world.pool_size),
                "response_id": np.tile(np.arange(world.pool_size, dtype=np.int32), len(ids)),
                "prm_score": (1 / (1 + np.exp(-cand_logit))).astype(np.float32).ravel(),
                "correct": correct.ravel(),
            }
        )
        path = out / split.name / "bon"
        with SetWriter(path, "bon", len(questions), world.hidden_dim) as writer:
            for start in range(0, len(latent_q), chunk_rows):
                writer.hidden[start : start + chunk_rows] = embed(
                    latent_q[start : start + chunk_rows]
                )
            writer.records = questions
            writer.responses = responses
            writer.meta.update(provenance, split=split.name, pool_size=world.pool_size)
        written[f"{split.name}/bon"] = path
        bar.update()
    bar.close()
    return written
