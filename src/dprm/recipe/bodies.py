"""What the units of a recipe's data stages run: each one calls the library function of the
matching CLI command (``dprm generate``, ``rollout``, ``embed``, ``merge`` with ``--shard``).

Those functions write resumable parts atomically: a killed or pre-empted unit resumes at its
first missing part, and a unit retried elsewhere writes the same output once. Every body is a
module-level function of plain arguments, so a ``functools.partial`` of it pickles to a worker
process, a Ray actor or a SLURM task. Park et al.'s released labels are :mod:`dprm.recipe.park`.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from dprm.digests import model_digest
from dprm.io import DataError


def unit_meta() -> dict[str, Any]:
    """What every output of a recipe unit records about its maker (version, Python)."""
    from dprm import __version__

    return {"dprm_version": __version__, "python": sys.version.split()[0], "made_by": "dprm run"}


def finished_or_redo(run) -> Any:
    """Run a library stage; an output left by other settings is replaced.

    The runner only calls a unit whose recorded fingerprint differs (or that never finished), so
    an output with other settings is stale: the stage's own check refuses it, and the unit runs
    again with ``overwrite`` (finished parts made with *these* settings are still reused).
    """
    try:
        return run(False)
    except DataError as err:
        if "different settings" not in str(err):
            raise
        return run(True)


def _graded(grading: dict, meta: dict, run_stage, options: dict) -> dict:
    """Run a sampling stage (generate, rollout) with a grading pool; ``meta`` gains the grader.

    ``run_stage(pool, options)`` calls the library stage with ``options`` (shard, fingerprint,
    meta, parts) plus ``overwrite`` and ``progress``.
    """
    from dprm.llm.grading import GradingPool, grader_info

    with GradingPool(grading["workers"], grading["timeout"]) as pool:
        meta |= grader_info() | {"grader_timeout_s": grading["timeout"]}
        path, _ = finished_or_redo(
            lambda overwrite: run_stage(pool, options | {"overwrite": overwrite, "progress": False})
        )
    return {"output": str(path)}


def make_questions(sets: list[str], limit: int, every: int, out: str) -> dict:
    """Load and join the question sets of one split; write ``questions.jsonl``."""
    import pandas as pd

    from dprm.llm.questions import load_questions, write_questions

    frames = [load_questions(s, every=every, limit=limit or None) for s in sets]
    frame = pd.concat(frames, ignore_index=True)
    dup = frame["question_id"].duplicated()
    if dup.any():
        raise DataError(
            out, f"question id {frame['question_id'][dup].iloc[0]!r} in two sets {sets}"
        )
    write_questions(out, frame)
    return {"questions": len(frame)}


def generate_shard(
    generator: dict,
    sampling: dict,
    grading: dict,
    questions: str,
    out: str,
    index: int,
    count: int,
    per_part: int,
    content: str | None = None,
) -> dict:
    """``dprm generate --shard index/count`` for one (generator, split): trajectories or a pool.

    ``content`` (the digest of the questions file) joins the stage's own fingerprint, so a
    finished output made from other questions at the same path is not taken for this one.
    """
    from dprm.llm.prompts import template_for
    from dprm.llm.questions import read_questions
    from dprm.llm.rollout import SamplingConfig, run_generation_stage
    from dprm.llm.shard import Shard
    from dprm.runner import engines

    config = SamplingConfig(**sampling, template=generator["template"] or None)
    frame = read_questions(questions)
    engine = engines.generator(generator | {"seed": config.seed})
    template = config.template or template_for(generator["model"])
    identity = {
        "input": questions,
        "generator": generator["model"],
        "backend": generator["backend"],
        "template": template,
    } | ({"content": content} if content else {})
    identity["model_content"] = model_digest(generator["model"])
    meta = unit_meta() | identity | {"sampling": dataclasses.asdict(config), "seed": config.seed}
    return _graded(
        grading,
        meta,
        lambda pool, options: run_generation_stage(frame, engine, pool, out, config, **options),
        dict(shard=Shard(index, count), fingerprint=identity, meta=meta, per_part=per_part),
    )


def rollout_shard(
    generator: dict,
    sampling: dict,
    rollout: dict,
    grading: dict,
    trajectories: str,
    out: str,
    index: int,
    count: int,
    per_part: int,
    content: str | None = None,
) -> dict:
    """``dprm rollout --shard index/count`` for one (generator, split): labels with counts
    (``content``: the digest of the trajectories, as in :func:`generate_shard`)."""
    import pandas as pd

    from dprm.llm.rollout import (
        RolloutConfig,
        SamplingConfig,
        check_trajectories,
        config_dict,
        run_rollout_stage,
    )
    from dprm.llm.shard import Shard, read_output_meta
    from dprm.runner import engines

    rollout = dict(rollout)
    config = SamplingConfig(
        **(sampling | {"n": rollout.pop("n"), "max_new_tokens": rollout.pop("max_new_tokens")}),
        template=generator["template"] or None,
    )
    settings = RolloutConfig(**rollout)
    frame = pd.read_parquet(trajectories)
    check_trajectories(frame, trajectories)
    source = read_output_meta(trajectories)
    engine = engines.generator(generator | {"seed": config.seed})
    identity = {
        "input": trajectories,
        "generator": generator["model"],
        "backend": generator["backend"],
        "template": source.get("template"),
    } | ({"content": content} if content else {})
    identity["model_content"] = model_digest(generator["model"])
    meta = unit_meta() | identity | {"sampling": dataclasses.asdict(config), "seed": config.seed}
    meta |= config_dict(settings) | {"trajectories_meta": source}
    return _graded(
        grading,
        meta,
        lambda pool, options: run_rollout_stage(
            frame, engine, pool, out, settings, config, **options
        ),
        dict(shard=Shard(index, count), fingerprint=identity, meta=meta, per_part=per_part),
    )


def embed_shard(
    prm: dict,
    source: str,
    kind: str,
    out: str,
    index: int,
    count: int,
    per_part: int,
    content: str | None = None,
) -> dict:
    """``dprm embed --shard index/count``: labels -> calibration set, pool -> BoN set
    (``content``: the digest of ``source``, as in :func:`generate_shard`)."""
    import pandas as pd

    from dprm.data.contract import read_labels
    from dprm.llm.embed import EmbedConfig, run_embed
    from dprm.llm.shard import Shard, read_output_meta
    from dprm.runner import engines

    frame = read_labels(source) if kind == "calibration" else pd.read_parquet(source)
    source_meta = read_output_meta(source)
    provenance = unit_meta() | {"source_file": source, "source_meta": source_meta}
    provenance |= {
        k: source_meta[k]
        for k in ("generator", "grader", "grader_version", "seed")
        if k in source_meta
    }
    config = EmbedConfig(questions_per_part=per_part, hidden_dtype=prm["hidden_dtype"])
    engine = engines.prm(prm)
    path, _ = finished_or_redo(
        lambda overwrite: run_embed(
            frame,
            engine,
            out,
            kind=kind,
            shard=Shard(index, count),
            config=config,
            fingerprint={"input": source}
            | ({"content": content} if content else {})
            | {"model_content": model_digest(prm["model"])},
            provenance=provenance,
            overwrite=overwrite,
            progress=False,
        )
    )
    return {"output": str(path)}


def merge(out: str) -> dict:
    """Join the finished shards of ``out`` (``dprm merge``); duplicates or holes are errors."""
    from dprm.llm.shard import find_shards, merge_shards

    n = len(find_shards(out))
    merge_shards(out, overwrite=True)
    return {"shards": n}
