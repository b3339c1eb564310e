"""Writing a twin world (:func:`write_world`) and replaying a test split's BoN questions."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from dprm.data.contract import SetWriter
from dprm.data.synth.bon import add_v2, write_train_bon
from dprm.data.synth.bon_fitted import write_fitted_bon, write_fitted_train_bon
from dprm.data.synth.draws import (
    Embedding,
    Records,
    draw_generator,
    draw_pool,
    draw_prm,
    simulate,
    split_rngs,
)
from dprm.data.synth.fitted_presets import fitted_default_seed, fitted_pair
from dprm.data.synth.presets import (
    SIZES,
    ScoreCell,
    SynthGenerator,
    SynthPRM,
    WorldSize,
    default_seed,
    resolve_preset,
    score_cell,
)
from dprm.version import __version__

#: version of the world format, written to every set's meta.json as ``synth_format``
#: (1: h a near-linear map of the readings; 2: twin v2, h lossy and non-linear: docs/synth.md)
SYNTH_FORMAT = 2


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
        preset: ``GENERATOR__PRM`` or ``demo``, or a fitted best-of-N preset
            (:mod:`dprm.data.synth.fitted_presets`: its pools come from
            :mod:`dprm.data.synth.bon_fitted`).
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
    fitted = fitted_pair(preset)
    if fitted is not None:
        gen, prm = fitted.generator, fitted.prm

        def cell_of(kind: str) -> ScoreCell:
            return fitted.cell(kind)
    else:
        gen, prm = resolve_preset(preset)

        def cell_of(kind: str) -> ScoreCell:
            return score_cell(gen, prm, kind)

    size_name = size or ("demo" if preset == "demo" else "paper")
    if size_name not in SIZES:
        raise ValueError(f"unknown size {size_name!r}; choose from {sorted(SIZES)}")
    world = SIZES[size_name]
    if hidden_dim is not None:
        world = replace(world, hidden_dim=int(hidden_dim))
    if seed is None:
        seed = fitted_default_seed(preset) if fitted is not None else default_seed(preset)
    seed = int(seed)
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
        cell = cell_of(split.kind)
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
        if split.n_bon_questions == 0 and fitted is not None:
            written[f"{split.name}/bon"] = write_fitted_train_bon(
                out / split.name / "bon", seed, split_index, fitted, cell, split, world, embed,
                provenance)  # fmt: skip
            bar.update()
            continue
        if split.n_bon_questions == 0:  # a training split: its BoN pools (v2) come from a
            written[f"{split.name}/bon"] = write_train_bon(  # separate stream
                out / split.name / "bon", seed, split_index, gen, prm, cell, split, world, embed,
                provenance)  # fmt: skip
            bar.update()
            continue
        # -- best-of-N set: fresh questions from the same distribution (question-only) -------
        q_draws = draw_generator(rng, gen, split, world, split.n_bon_questions, question_only=True)
        q_prm_draws = draw_prm(prm_rng, q_draws, mask_rng)
        q_rec = simulate(gen, prm, cell, split.kind, q_draws, q_prm_draws, world.max_steps)
        path = out / split.name / "bon"
        if fitted is not None:
            ids = [f"{split.name}-b{q:04d}" for q in q_draws.question]
            written[f"{split.name}/bon"] = write_fitted_bon(
                path, fitted, cell, q_rec, ids, seed, split_index, world, embed, provenance,
                split.name)  # fmt: skip
            bar.update()
            continue
        questions, responses, correct = draw_pool(
            rng, prm_rng, prm, cell, q_rec, q_draws.question, split.name, world.pool_size
        )
        p_q = q_rec.true_p
        path = out / split.name / "bon"
        with SetWriter(path, "bon", len(questions), world.hidden_dim) as writer:
            fill_hidden(writer, q_rec.latent)
            writer.records = questions
            writer.responses = add_v2(writer, responses, seed, split_index, gen, prm,
                                                p_q, q_rec.latent, correct, embed, world,
                                                cell.linear_share)  # fmt: skip
            writer.meta.update(provenance, split=split.name, pool_size=world.pool_size)
        written[f"{split.name}/bon"] = path
        bar.update()
    bar.close()
    return written


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
    this is how the population oracle (:mod:`dprm.ias.curves.population`) draws fresh pools for the very
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
