"""The real-data stages of a recipe, as units of the shared runner (:mod:`dprm.runner`).

They turn a recipe into the same world layout a synthetic world has, so the train / evaluate /
IAS stages and the report of ``dprm reproduce`` run on it unchanged::

    OUT/data/questions/{split}.jsonl                      questions (named sets or files)
    OUT/data/{generator}/{split}/trajectories.parquet     first pass (source "generate")
    OUT/data/{generator}/{split}/labels.parquet           rollouts, or Park's released labels
    OUT/data/{generator}/{split}/pool.parquet             BoN pools (id, ood)
    OUT/worlds/{generator}__{prm}/{split}/calib           PRM embedding of the labels
    OUT/worlds/{generator}__{prm}/{id,ood}/bon            PRM embedding of the pools

Stage order: questions -> generate -> rollout (or park labels) -> embed, each GPU stage cut into
shards (``[run] shards``) followed by a merge stage that joins them (``dprm merge``'s
function). Every unit calls the library function of the matching CLI command, which writes
resumable parts atomically: a killed or pre-empted unit resumes at its first missing part, and a
unit retried elsewhere writes the same output once. Unit fingerprints chain the settings of
every stage before them, so a changed setting re-runs exactly what depends on it.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dprm.digests import model_digest
from dprm.io import DataError
from dprm.recipe.spec import SPLITS, Recipe
from dprm.runner.layout import IAS_SPLITS
from dprm.runner.units import Unit

if TYPE_CHECKING:
    from dprm.runner.pipeline import Pipeline

#: settings of an engine spec that change where it runs, not what it outputs
PLACEMENT = ("gpus", "gpu_memory_utilization", "device")
#: resources of a unit cheap enough to run in the driver (question files, merges of shards): no
#: cluster job or task is worth its start-up, and engine workers stay up around it
DRIVER = {"driver": True}


# ----------------------------------------------------------------------------- paths
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
    generator, _, prm = world.partition("__")
    return generator, prm


# ----------------------------------------------------------------------------- fingerprints
def _engine(spec: Any) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(spec).items() if k not in PLACEMENT}


def questions_fp(recipe: Recipe, split: str) -> dict[str, Any]:
    q = recipe.questions
    return {"sets": list(getattr(q, split)), "limit": q.limit, "every": q.every}


def _sampling(recipe: Recipe, n: int, max_new_tokens: int | None = None) -> dict[str, Any]:
    s = dataclasses.asdict(recipe.sampling) | {"n": n}
    if max_new_tokens is not None:
        s["max_new_tokens"] = max_new_tokens
    return s


def trajectories_fp(recipe: Recipe, generator: str, split: str, pool: bool) -> dict[str, Any]:
    n = recipe.bon.n if pool else recipe.sampling.n
    return {
        "questions": questions_fp(recipe, split),
        "generator": _engine(recipe.generator(generator)),
        "sampling": _sampling(recipe, n),
    }


def labels_fp(recipe: Recipe, generator: str, split: str) -> dict[str, Any]:
    if recipe.data.source == "park":
        g = recipe.generator(generator)
        return {
            "park": recipe.data.park,
            "datasets": list(recipe.data.park_datasets(split)),
            "policy": g.park_name or g.name,
            "rollouts": recipe.data.park_rollouts,
        }
    return {
        "trajectories": trajectories_fp(recipe, generator, split, pool=False),
        "rollout": dataclasses.asdict(recipe.rollout),
    }


def _prm_fp(recipe: Recipe, prm: str) -> dict[str, Any]:
    return _engine(recipe.prm(prm)) | {"questions_per_part": recipe.run.questions_per_part}


def pool_splits(recipe: Recipe) -> tuple[str, ...]:
    """The splits that get a BoN pool: ``id`` / ``ood`` (and ``train`` with ``[bon] train``)."""
    if recipe.bon.n <= 0:
        return ()
    return (("train",) if recipe.bon.train else ()) + tuple(IAS_SPLITS)


def world_data(recipe: Recipe, world: str) -> dict[str, Any]:
    """The fingerprint of a world's data (every split's calibration set and BoN set)."""
    generator, prm = split_world(world)
    out: dict[str, Any] = {}
    for split in SPLITS:
        out[f"{split}/calib"] = {"labels": labels_fp(recipe, generator, split)} | {
            "prm": _prm_fp(recipe, prm)
        }
    if recipe.bon.n > 0:
        for split in pool_splits(recipe):
            out[f"{split}/bon"] = {
                "pool": trajectories_fp(recipe, generator, split, pool=True),
                "prm": _prm_fp(recipe, prm),
            }
    return out


# ----------------------------------------------------------------------------- unit bodies
def _meta() -> dict[str, Any]:
    from dprm import __version__

    return {"dprm_version": __version__, "python": sys.version.split()[0], "made_by": "dprm run"}


def _finished_or_redo(run) -> Any:
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
        path, _ = _finished_or_redo(
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
    meta = _meta() | identity | {"sampling": dataclasses.asdict(config), "seed": config.seed}
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
    meta = _meta() | identity | {"sampling": dataclasses.asdict(config), "seed": config.seed}
    meta |= config_dict(settings) | {"trajectories_meta": source}
    return _graded(
        grading,
        meta,
        lambda pool, options: run_rollout_stage(
            frame, engine, pool, out, settings, config, **options
        ),
        dict(shard=Shard(index, count), fingerprint=identity, meta=meta, per_part=per_part),
    )


def park_file(source: str, dataset: str, policy: str) -> Path:
    """``{dataset}/{policy}/data.json`` of Park's released labels: a local copy or the hub."""
    local = Path(source)
    if local.is_dir():
        path = local / dataset / policy / "data.json"
        if not path.exists():
            raise DataError(
                path, f"not found (Park's layout {{dataset}}/{{generator}}/data.json under {local})"
            )
        return path
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(source, f"{dataset}/{policy}/data.json", repo_type="dataset"))


def local_park_files(recipe: Recipe, generator: Any, split: str) -> list[Path]:
    """The files of a local copy of Park's labels a split reads (none for a hub id)."""
    root = Path(recipe.data.park)
    if not root.is_dir():
        return []
    policy = generator.park_name or generator.name
    return [root / d / policy / "data.json" for d in recipe.data.park_datasets(split)]


def park_labels(source: str, datasets: list[str], policy: str, rollouts: int, out: str) -> dict:
    """Park et al.'s released labels of one (generator, split) as contract labels."""
    import pandas as pd

    from dprm.data.contract import write_labels
    from dprm.data.park import park_to_labels, read_park_json
    from dprm.io import write_json
    from dprm.llm.shard import sidecar_path

    files = [park_file(source, d, policy) for d in datasets]
    frames = [park_to_labels(read_park_json(f), rollouts, source=f) for f in files]
    frame = pd.concat(frames, ignore_index=True)
    dup = frame.duplicated(["question_id", "response_id", "step"])
    if dup.any():
        raise DataError(
            out, f"a question appears in two of {datasets} (id {frame['question_id'][dup].iloc[0]})"
        )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_json(
        sidecar_path(out),
        _meta()
        | {
            "source": "park",
            "files": [str(f) for f in files],
            "generator": policy,
            "n_rollouts": rollouts,
        },
    )
    write_labels(out, frame)
    return {"rows": len(frame), "questions": int(frame["question_id"].nunique())}


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
    provenance = _meta() | {"source_file": source, "source_meta": source_meta}
    provenance |= {
        k: source_meta[k]
        for k in ("generator", "grader", "grader_version", "seed")
        if k in source_meta
    }
    config = EmbedConfig(questions_per_part=per_part, hidden_dtype=prm["hidden_dtype"])
    engine = engines.prm(prm)
    path, _ = _finished_or_redo(
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


# ----------------------------------------------------------------------------- unit builders
def _count_questions(path: Path, column: str = "question_id") -> int:
    """Questions in a stage's input (0 if it is not there: its producer failed)."""
    if not path.exists():
        return 0
    if path.suffix == ".jsonl":
        from dprm.llm.questions import read_questions

        return len(read_questions(path))
    import pyarrow.parquet as pq

    return len(set(pq.read_table(path, columns=[column]).column(column).to_pylist()))


def sharded(
    pipe: Pipeline,
    key: str,
    final: Path,
    items: int,
    shards: int,
    body,
    inputs: dict[str, Any],
    resources: dict[str, Any],
    reads: dict[str, str | None],
) -> tuple[list[Unit], Unit | None]:
    """Shard units of one output (``count = min(shards, items)``) and its merge unit (or None).

    ``body(index, count)`` is the unit's picklable work; with one shard it writes ``final``
    directly and no merge is needed. ``reads`` are the digests of what every shard reads; the
    merge reads the shards.
    """
    from dprm.llm.shard import Shard, output_path

    count = max(1, min(shards, items))
    units = []
    for i in range(count):
        path = output_path(final, Shard(i, count))
        unit_key = key if count == 1 else f"{key}/shard{i:03d}-of-{count:03d}"
        units.append(
            Unit(
                key=unit_key,
                outputs=[path],
                run=body(i, count),
                inputs=inputs | {"shard": [i, count]},
                needs_world=False,
                parallel=True,
                resources=resources,
                reads=reads,
            )
        )
    if count == 1:
        return units, None
    joined = Unit(
        key=f"{key}/merge",
        outputs=[final],
        run=functools.partial(merge, str(final)),
        inputs=inputs | {"shards": count},
        needs_world=False,
        parallel=True,
        resources=DRIVER,
        reads=pipe.reads(*(u.outputs[0] for u in units)),
    )
    return units, joined


def model_reads(pipe: Pipeline, model: str) -> dict[str, str | None]:
    """``Unit.reads`` of a model: a local checkpoint by content, a hub id by its revision."""
    if model and Path(model).expanduser().exists():
        return pipe.reads(Path(model).expanduser())
    return {f"hub:{model}": model_digest(model)}


class RecipeStages:
    """Builds the data-stage units of a recipe, stage by stage (see the module docstring).

    Args:
        recipe: the recipe.
        shards: shards per GPU stage and split (resolved: ``[run] shards`` or the executor's).
    """

    def __init__(self, recipe: Recipe, shards: int):
        self.recipe, self.shards = recipe, max(1, shards)
        self._merges: dict[str, list[Unit]] = {}

    # which splits need which data
    def _pool_splits(self) -> tuple[str, ...]:
        return pool_splits(self.recipe)

    def _question_splits(self) -> list[str]:
        generate = self.recipe.data.source == "generate"
        return [s for s in SPLITS if generate or s in self._pool_splits()]

    def _sharded(
        self, pipe: Pipeline, key: str, final: Path, source: Path, body, inputs: dict, spec: Any
    ):
        """Shards of one output of a GPU stage, one engine (``spec``) per worker.

        ``body(content, index, count)``: ``content`` is the digest of ``source``.
        """
        resources = {"gpus": spec.gpus, "engine": spec.name}
        reads = pipe.reads(source)
        work = functools.partial(body, reads[pipe.state.name_of(source)])
        reads |= model_reads(pipe, spec.model)  # the checkpoint the engine loads
        items = _count_questions(source)
        return sharded(pipe, key, final, items, self.shards, work, inputs, resources, reads)

    def questions(self, pipe: Pipeline, world: str) -> list[Unit]:
        q = self.recipe.questions
        return [
            Unit(
                key=f"questions/{split}",
                outputs=[questions_path(pipe.out, split)],
                run=functools.partial(
                    make_questions,
                    list(getattr(q, split)),
                    q.limit,
                    q.every,
                    str(questions_path(pipe.out, split)),
                ),
                inputs=questions_fp(self.recipe, split),
                needs_world=False,
                resources=DRIVER,
                reads=pipe.reads(*(Path(s) for s in getattr(q, split) if Path(s).exists())),
            )
            for split in self._question_splits()
        ]

    def _generate_units(self, pipe: Pipeline, world: str) -> list[tuple[list[Unit], Unit | None]]:
        r, (gen_name, _) = self.recipe, split_world(world)
        gen = r.generator(gen_name)
        spec = dataclasses.asdict(gen)
        grading = dataclasses.asdict(r.grading)
        jobs = []
        plans = [(s, False) for s in SPLITS if r.data.source == "generate"]
        plans += [(s, True) for s in self._pool_splits()]
        for split, pool in plans:
            final = (pool_path if pool else trajectories_path)(pipe.out, gen_name, split)
            questions = questions_path(pipe.out, split)
            sampling = _sampling(r, r.bon.n if pool else r.sampling.n)
            body = functools.partial(
                _generate_body,
                spec,
                sampling,
                grading,
                str(questions),
                str(final),
                r.run.questions_per_part,
            )
            key = f"generate/{gen_name}/{split}/{'pool' if pool else 'trajectories'}"
            jobs.append(
                self._sharded(
                    pipe,
                    key,
                    final,
                    questions,
                    body,
                    trajectories_fp(r, gen_name, split, pool),
                    gen,
                )
            )
        return jobs

    def generate(self, pipe: Pipeline, world: str) -> list[Unit]:
        return self._shards("generate", self._generate_units(pipe, world))

    def generate_merge(self, pipe: Pipeline, world: str) -> list[Unit]:
        return self._merged(self._generate_units(pipe, world))

    def _label_units(self, pipe: Pipeline, world: str) -> list[tuple[list[Unit], Unit | None]]:
        r, (gen_name, _) = self.recipe, split_world(world)
        gen = r.generator(gen_name)
        jobs = []
        for split in SPLITS:
            final = labels_path(pipe.out, gen_name, split)
            if r.data.source == "park":
                unit = Unit(
                    key=f"labels/{gen_name}/{split}",
                    outputs=[final],
                    run=functools.partial(
                        park_labels,
                        r.data.park,
                        list(r.data.park_datasets(split)),
                        gen.park_name or gen.name,
                        r.data.park_rollouts,
                        str(final),
                    ),
                    inputs=labels_fp(r, gen_name, split),
                    needs_world=False,
                    parallel=True,
                    reads=pipe.reads(*local_park_files(r, gen, split)),
                )
                jobs.append(([unit], None))
                continue
            source = trajectories_path(pipe.out, gen_name, split)
            body = functools.partial(
                _rollout_body,
                dataclasses.asdict(gen),
                _sampling(r, r.sampling.n),
                dataclasses.asdict(r.rollout),
                dataclasses.asdict(r.grading),
                str(source),
                str(final),
                r.run.questions_per_part,
            )
            fp = labels_fp(r, gen_name, split)
            key = f"rollout/{gen_name}/{split}"
            jobs.append(self._sharded(pipe, key, final, source, body, fp, gen))
        return jobs

    def labels(self, pipe: Pipeline, world: str) -> list[Unit]:
        return self._shards("labels", self._label_units(pipe, world))

    def labels_merge(self, pipe: Pipeline, world: str) -> list[Unit]:
        return self._merged(self._label_units(pipe, world))

    def _embed_units(self, pipe: Pipeline, world: str) -> list[tuple[list[Unit], Unit | None]]:
        r, (gen_name, prm_name) = self.recipe, split_world(world)
        prm = r.prm(prm_name)
        spec = dataclasses.asdict(prm)
        data = world_data(r, world)
        jobs = []
        plans = [(s, "calibration") for s in SPLITS] + [(s, "bon") for s in self._pool_splits()]
        for split, kind in plans:
            sub = "calib" if kind == "calibration" else "bon"
            final = pipe.world_dir(world) / split / sub
            source = (labels_path if kind == "calibration" else pool_path)(
                pipe.out, gen_name, split
            )
            body = functools.partial(
                _embed_body, spec, str(source), kind, str(final), r.run.questions_per_part
            )
            fp = data[f"{split}/{sub}"]
            key = f"embed/{world}/{split}/{sub}"
            jobs.append(self._sharded(pipe, key, final, source, body, fp, prm))
        return jobs

    def embed(self, pipe: Pipeline, world: str) -> list[Unit]:
        return self._shards("embed", self._embed_units(pipe, world))

    def embed_merge(self, pipe: Pipeline, world: str) -> list[Unit]:
        return self._merged(self._embed_units(pipe, world))

    @staticmethod
    def _shards(stage: str, jobs: list[tuple[list[Unit], Unit | None]]) -> list[Unit]:
        return [u for units, _ in jobs for u in units]

    @staticmethod
    def _merged(jobs: list[tuple[list[Unit], Unit | None]]) -> list[Unit]:
        return [joined for _, joined in jobs if joined is not None]

    def world_stages(self) -> tuple:
        """``(stage name, builder)`` pairs in order: the data source's stages."""
        return (
            ("questions", self.questions),
            ("generate", self.generate),
            ("generate-merge", self.generate_merge),
            ("labels", self.labels),
            ("labels-merge", self.labels_merge),
            ("embed", self.embed),
            ("embed-merge", self.embed_merge),
        )


# partial-friendly bodies: (fixed arguments ..., content, index, count) -> the unit's run()
def _generate_body(spec, sampling, grading, questions, final, per_part, content, index, count):
    return functools.partial(
        generate_shard, spec, sampling, grading, questions, final, index, count, per_part, content
    )


def _rollout_body(spec, sampling, rollout, grading, source, final, per_part, content, index, count):
    return functools.partial(
        rollout_shard,
        spec,
        sampling,
        rollout,
        grading,
        source,
        final,
        index,
        count,
        per_part,
        content,
    )


def _embed_body(spec, source, kind, final, per_part, content, index, count):
    return functools.partial(
        embed_shard, spec, source, kind, final, index, count, per_part, content
    )
