"""The real-data stages of a recipe, as units of the shared runner (:mod:`dprm.runner`).

They turn a recipe into the same world layout a synthetic world has, so the train / evaluate /
IAS stages and the report of ``dprm reproduce`` run on it unchanged::

    OUT/data/...                                          questions, first pass, labels, pools
                                                          (:mod:`dprm.recipe.layout`)
    OUT/worlds/{generator}__{prm}/{split}/calib           PRM embedding of the labels
    OUT/worlds/{generator}__{prm}/{id,ood}/bon            PRM embedding of the pools

Stage order (:meth:`RecipeStages.world_stages`): questions -> generate -> rollout (or Park's
labels, by ``[data] source``: :attr:`RecipeStages.LABEL_JOBS`) -> embed, each GPU stage cut into
shards (``[run] shards``, :mod:`dprm.recipe.sharding`) followed by a merge stage that joins
them. What a unit runs is in :mod:`dprm.recipe.bodies` and :mod:`dprm.recipe.park`; what it
depends on (its fingerprint) in :mod:`dprm.recipe.fingerprints`. The names of those modules
stay importable from here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dprm.recipe.bodies import (
    embed_shard,
    generate_shard,
    make_questions,
    merge,
    rollout_shard,
)
from dprm.recipe.fingerprints import (
    PLACEMENT,
    labels_fp,
    pool_splits,
    questions_fp,
    sampling_settings,
    trajectories_fp,
    world_data,
)
from dprm.recipe.layout import (
    data_dir,
    labels_path,
    pool_path,
    questions_path,
    split_world,
    trajectories_path,
)
from dprm.recipe.park import local_park_files, park_file, park_labels
from dprm.recipe.sharding import DRIVER, count_questions, model_reads, sharded
from dprm.recipe.spec import SPLITS, GeneratorSpec, Recipe
from dprm.runner.units import Unit

if TYPE_CHECKING:
    from dprm.runner.pipeline import Pipeline

__all__ = [
    "DRIVER",
    "EMBED_INPUTS",
    "PLACEMENT",
    "RecipeStages",
    "data_dir",
    "embed_shard",
    "generate_shard",
    "labels_fp",
    "labels_path",
    "local_park_files",
    "make_questions",
    "merge",
    "model_reads",
    "park_file",
    "park_labels",
    "pool_path",
    "pool_splits",
    "questions_fp",
    "questions_path",
    "rollout_shard",
    "sharded",
    "split_world",
    "trajectories_fp",
    "trajectories_path",
    "world_data",
]

#: one output of a GPU stage: its shard units and the merge unit that joins them (None: 1 shard)
Job = tuple[list[Unit], Unit | None]

#: world subfolder -> (``dprm embed``'s kind, the data file of a (generator, split) it embeds)
EMBED_INPUTS: dict[str, tuple[str, Callable[[Path, str, str], Path]]] = {
    "calib": ("calibration", labels_path),
    "bon": ("bon", pool_path),
}


class RecipeStages:
    """Builds the data-stage units of a recipe, stage by stage (see the module docstring).

    Args:
        recipe: the recipe.
        shards: shards per GPU stage and split (resolved: ``[run] shards`` or the executor's).
    """

    def __init__(self, recipe: Recipe, shards: int):
        self.recipe, self.shards = recipe, max(1, shards)

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

    # which splits need which data
    def _question_splits(self) -> list[str]:
        generate = self.recipe.data.source == "generate"
        return [s for s in SPLITS if generate or s in pool_splits(self.recipe)]

    def _sharded(
        self, pipe: Pipeline, key: str, final: Path, source: Path, body, inputs: dict, spec: Any
    ) -> Job:
        """Shards of one output of a GPU stage, one engine (``spec``) per worker.

        ``body(content, index, count)``: ``content`` is the digest of ``source``.
        """
        served = getattr(spec, "backend", "") == "openai"  # the server holds the model, not us
        resources = {"gpus": 0.0 if served else spec.gpus, "engine": spec.name}
        reads = pipe.reads(source)
        work = functools.partial(body, reads[pipe.state.name_of(source)])
        reads |= model_reads(pipe, spec.model)  # the checkpoint the engine loads
        items = count_questions(source)
        return sharded(pipe, key, final, items, self.shards, work, inputs, resources, reads)

    # ------------------------------------------------------------------------- questions
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

    # ------------------------------------------------------------------------- generate
    def _generate_jobs(self, pipe: Pipeline, world: str) -> list[Job]:
        r, (gen_name, _) = self.recipe, split_world(world)
        gen = r.generator(gen_name)
        spec = dataclasses.asdict(gen)
        grading = dataclasses.asdict(r.grading)
        jobs = []
        plans = [(s, False) for s in SPLITS if r.data.source == "generate"]
        plans += [(s, True) for s in pool_splits(r)]
        for split, pool in plans:
            final = (pool_path if pool else trajectories_path)(pipe.out, gen_name, split)
            questions = questions_path(pipe.out, split)
            sampling = sampling_settings(r, r.bon.n if pool else r.sampling.n)
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
            fp = trajectories_fp(r, gen_name, split, pool)
            jobs.append(self._sharded(pipe, key, final, questions, body, fp, gen))
        return jobs

    def generate(self, pipe: Pipeline, world: str) -> list[Unit]:
        return _shard_units(self._generate_jobs(pipe, world))

    def generate_merge(self, pipe: Pipeline, world: str) -> list[Unit]:
        return _merge_units(self._generate_jobs(pipe, world))

    # ------------------------------------------------------------------------- labels
    def _park_job(self, pipe: Pipeline, gen: GeneratorSpec, split: str) -> Job:
        """Park et al.'s released labels of one (generator, split): one CPU unit, no engine."""
        r = self.recipe
        final = labels_path(pipe.out, gen.name, split)
        unit = Unit(
            key=f"labels/{gen.name}/{split}",
            outputs=[final],
            run=functools.partial(
                park_labels,
                r.data.park,
                list(r.data.park_datasets(split)),
                gen.park_name or gen.name,
                r.data.park_rollouts,
                str(final),
            ),
            inputs=labels_fp(r, gen.name, split),
            needs_world=False,
            parallel=True,
            reads=pipe.reads(*local_park_files(r, gen, split)),
        )
        return [unit], None

    def _rollout_job(self, pipe: Pipeline, gen: GeneratorSpec, split: str) -> Job:
        """Monte Carlo rollouts from every prefix of the first pass: shards of the generator."""
        r = self.recipe
        final = labels_path(pipe.out, gen.name, split)
        source = trajectories_path(pipe.out, gen.name, split)
        body = functools.partial(
            _rollout_body,
            dataclasses.asdict(gen),
            sampling_settings(r, r.sampling.n),
            dataclasses.asdict(r.rollout),
            dataclasses.asdict(r.grading),
            str(source),
            str(final),
            r.run.questions_per_part,
        )
        fp = labels_fp(r, gen.name, split)
        return self._sharded(pipe, f"rollout/{gen.name}/{split}", final, source, body, fp, gen)

    #: ``[data] source`` -> the builder of the labels job of one (generator, split)
    LABEL_JOBS: dict[str, Callable[[RecipeStages, Pipeline, GeneratorSpec, str], Job]] = {
        "generate": _rollout_job,
        "park": _park_job,
    }

    def _label_jobs(self, pipe: Pipeline, world: str) -> list[Job]:
        gen = self.recipe.generator(split_world(world)[0])
        build = self.LABEL_JOBS[self.recipe.data.source]
        return [build(self, pipe, gen, split) for split in SPLITS]

    def labels(self, pipe: Pipeline, world: str) -> list[Unit]:
        return _shard_units(self._label_jobs(pipe, world))

    def labels_merge(self, pipe: Pipeline, world: str) -> list[Unit]:
        return _merge_units(self._label_jobs(pipe, world))

    # ------------------------------------------------------------------------- embed
    def _embed_jobs(self, pipe: Pipeline, world: str) -> list[Job]:
        r, (gen_name, prm_name) = self.recipe, split_world(world)
        prm = r.prm(prm_name)
        spec = dataclasses.asdict(prm)
        data = world_data(r, world)
        jobs = []
        plans = [(s, "calib") for s in SPLITS] + [(s, "bon") for s in pool_splits(r)]
        for split, sub in plans:
            kind, data_path = EMBED_INPUTS[sub]
            final = pipe.world_dir(world) / split / sub
            source = data_path(pipe.out, gen_name, split)
            body = functools.partial(
                _embed_body, spec, str(source), kind, str(final), r.run.questions_per_part
            )
            fp = data[f"{split}/{sub}"]
            key = f"embed/{world}/{split}/{sub}"
            jobs.append(self._sharded(pipe, key, final, source, body, fp, prm))
        return jobs

    def embed(self, pipe: Pipeline, world: str) -> list[Unit]:
        return _shard_units(self._embed_jobs(pipe, world))

    def embed_merge(self, pipe: Pipeline, world: str) -> list[Unit]:
        return _merge_units(self._embed_jobs(pipe, world))


def _shard_units(jobs: list[Job]) -> list[Unit]:
    return [u for units, _ in jobs for u in units]


def _merge_units(jobs: list[Job]) -> list[Unit]:
    return [joined for _, joined in jobs if joined is not None]


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
