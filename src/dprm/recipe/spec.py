"""A recipe: one TOML file that declares a real-data run, from questions to report.

Every table of the file is one dataclass (one concern each); unknown tables and keys are
rejected with their path (``recipe.toml [generators][1]: unknown key(s) ['tp'] ...``). See
``examples/park.toml`` (generate + roll out) and ``examples/paper-table1.toml`` (Park et al.'s
released labels) and docs/cluster.md.

Layout of a recipe (every table but ``[[generators]]`` and ``[[prms]]`` is optional)::

    [run]            name, out, shards, questions_per_part
    [questions]      train / id / ood question sets (named sets or files), limit, every
    [data]           source = "generate" | "park" (+ park, park_datasets, park_rollouts)
    [sampling]       first pass: n responses per question, temperature, ... (Park's defaults)
    [rollout]        Monte Carlo rollouts per prefix: n, max_steps, boxed_prefix, max_new_tokens
    [bon]            n candidates per test question (0: no BoN pools, no IAS)
    [grading]        math-verify worker processes and per-item timeout
    [[generators]]   name, model, backend, gpus, tensor_parallel_size, ... (park_name)
    [[prms]]         name, model, kind, gpus, max_tokens, ...
    [calibrators]    methods, seeds, [calibrators.overrides.METHOD] key = value
    [ias]            beta, mc_trials, rules, vote_trials, sequential
    [executor.ray]   address, cpus_per_task, max_retries
    [executor.slurm] partition, account, time_min, cpus_per_task, mem_gb, ...
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dprm.config import ConfigError, from_dict, in_range, json_ready

#: the question splits of a world: calibrators train on ``train``; ``id`` / ``ood`` are held out
SPLITS = ("train", "id", "ood")
#: data sources a recipe may name
SOURCES = ("generate", "park")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class RunSection:
    """Where outputs go and how GPU stages are cut into shards.

    Attributes:
        name: the run's name (report title).
        out: output directory (relative to the working directory, like ``dprm run --out``,
            which wins; recorded absolute in ``OUT/recipe.json``).
        shards: shards per GPU stage and split (0: one per visible GPU on the local executor,
            at least 1; Ray / SLURM: use at least the number of workers).
        questions_per_part: questions per resumable part inside a shard.
    """

    name: str = "recipe"
    out: str = "runs/recipe"
    shards: int = in_range(0, ge=0)
    questions_per_part: int = in_range(8, ge=1)


@dataclass(frozen=True)
class QuestionsSection:
    """Question sets per split: names (``math500``, ``aime24``, ``math500train``, ...) or files."""

    train: tuple[str, ...] = ("math500train",)
    id: tuple[str, ...] = ("math500",)
    ood: tuple[str, ...] = ("aime24", "aime25")
    #: keep at most this many questions of each set (0 = all)
    limit: int = in_range(0, ge=0)
    #: keep every k-th question of each set
    every: int = in_range(1, ge=1)


@dataclass(frozen=True)
class DataSection:
    """Where labels come from.

    Attributes:
        source: ``generate`` (first pass + Monte Carlo rollouts) or ``park`` (Park et al.'s
            released labels ``{park}/{dataset}/{generator.park_name}/data.json``: only the PRM
            embedding pass runs).
        park: hub dataset id or a local directory in the same layout.
        park_train / park_id / park_ood: the dataset folders of each split.
        park_rollouts: rollouts behind each released ``success_prob`` (8).
    """

    source: str = "generate"
    park: str = "young-j-park/prm_calibration"
    park_train: tuple[str, ...] = ("math500train",)
    park_id: tuple[str, ...] = ("math500",)
    park_ood: tuple[str, ...] = ("aime24", "aime25")
    park_rollouts: int = in_range(8, ge=1)

    def park_datasets(self, split: str) -> tuple[str, ...]:
        return {"train": self.park_train, "id": self.park_id, "ood": self.park_ood}[split]


@dataclass(frozen=True)
class SamplingSection:
    """First-pass sampling (Park et al.'s defaults); rollouts share all but ``n``."""

    n: int = in_range(8, ge=1)
    temperature: float = in_range(0.7, ge=0)
    top_p: float = in_range(1.0, gt=0, le=1)
    top_k: int = in_range(0, ge=0)
    repetition_penalty: float = in_range(1.0, gt=0)
    max_new_tokens: int = in_range(2048, ge=1)
    seed: int = 42
    boxed_first: bool = False


@dataclass(frozen=True)
class RolloutSection:
    """Monte Carlo rollouts from every prefix of every first-pass response."""

    n: int = in_range(8, ge=1)
    max_steps: int = in_range(19, ge=0)
    boxed_prefix: str = "grade"
    max_new_tokens: int = in_range(2048, ge=1)


@dataclass(frozen=True)
class BonSection:
    """Best-of-N pools for IAS: ``n`` candidates per ``id`` / ``ood`` question (0: no IAS).

    ``train = true`` also draws a pool on the ``train`` split: the training BoN set that the
    ``auto`` / ``auto-seq`` allocations learn from (without it only the uniform, C-rule and
    oracle rows are reported).
    """

    n: int = in_range(64, ge=0)
    train: bool = False


@dataclass(frozen=True)
class GradingSection:
    """math-verify grading worker processes per stage task and the per-item timeout (s)."""

    workers: int = in_range(2, ge=1)
    timeout: float = in_range(5.0, gt=0)


@dataclass(frozen=True)
class GeneratorSpec:
    """One generator (policy) and how one engine of it runs.

    Attributes:
        name: short name used in world names (``{name}__{prm}``).
        model: hub id or local directory (unused with ``data.source = "park"``).
        backend: ``vllm`` or ``transformers``.
        template: chat format (``""``: from the model name).
        park_name: its folder in Park's released labels (``""``: ``name``).
        gpus: GPUs per engine (Ray actor / SLURM task); 0 on CPU.
        tensor_parallel_size: vLLM GPUs per model replica.
    """

    name: str
    model: str = ""
    backend: str = "vllm"
    template: str = ""
    park_name: str = ""
    gpus: float = in_range(1.0, ge=0)
    tensor_parallel_size: int = in_range(1, ge=1)
    device: str = ""
    dtype: str = ""
    max_model_len: int = in_range(4096, ge=1)
    gpu_memory_utilization: float = in_range(0.9, gt=0, le=1)


@dataclass(frozen=True)
class PrmSpec:
    """One PRM whose hidden states feed the calibrators (one forward pass per trajectory)."""

    name: str
    model: str
    kind: str = ""
    gpus: float = in_range(1.0, ge=0)
    device: str = ""
    #: "auto" shards a PRM larger than one GPU over its ``gpus`` (e.g. 4 for
    #: Qwen2.5-Math-PRM-72B); ``max_memory`` as ``dprm embed --max-memory`` ("0=70GiB,...")
    device_map: str = ""
    max_memory: str = ""
    dtype: str = ""
    max_tokens: int = in_range(4096, ge=1)
    batch_tokens: int = in_range(16384, ge=1)
    prompt: str = "park"
    hidden_dtype: str = "float16"


@dataclass(frozen=True)
class CalibratorsSection:
    """Calibrators to train (Base is always evaluated), seeds, per-method overrides."""

    methods: tuple[str, ...] = ("ot", "qr")
    seeds: int = in_range(1, ge=1)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    # > 0: each gradient-trained method (ot, qr, mono, binomial) is trained with the best
    # parameters of a `dprm tune` search of this many trials per (world, method) on the
    # training split (the same trials for each; needs optuna); 0 = the methods' defaults
    tune_trials: int = in_range(0, ge=0)


@dataclass(frozen=True)
class IasSection:
    """Instance-adaptive best-of-N settings (docs/design.md §4)."""

    beta: float = in_range(0.1, gt=0, lt=1)
    mc_trials: int = in_range(100, ge=1)
    #: selection rules of the "does it pay?" rows (dprm.ias.rules.RULES); [] = none
    rules: tuple[str, ...] = ("highest-last", "majority")
    #: Monte Carlo orders per question of the voting rules among them
    vote_trials: int = in_range(64, ge=2)
    #: also the sequential allocation (``auto-seq`` rows, dprm.ias.sequential) of each
    #: calibrator; slower than ``auto``
    sequential: bool = False


@dataclass(frozen=True)
class RaySection:
    """Ray executor: ``address`` ``""`` starts a local instance, ``"auto"`` joins ``ray start``."""

    address: str = ""
    cpus_per_task: float = in_range(1.0, gt=0)
    max_retries: int = in_range(3, ge=0)
    #: engines (actors) per GPU stage (0: as many as the cluster's GPUs allow, at least 1)
    workers: int = in_range(0, ge=0)


@dataclass(frozen=True)
class SlurmSection:
    """SLURM executor (submitit): resources of one array task (a GPU-stage task also gets the
    ``gpus`` of its generator or PRM, rounded up)."""

    partition: str = ""
    account: str = ""
    time_min: int = in_range(240, ge=1)
    cpus_per_task: int = in_range(8, ge=1)
    mem_gb: int = in_range(64, ge=1)
    array_parallelism: int = in_range(64, ge=1)
    #: submitit's job folder (logs, pickled tasks), relative to the run directory
    folder: str = "slurm"
    #: "" = SLURM (``sbatch`` must be on PATH); "local" = submitit's local executor, every task
    #: a process on this machine (tests, dry runs): never chosen silently
    cluster: str = ""


@dataclass(frozen=True)
class ExecutorSection:
    ray: RaySection = field(default_factory=RaySection)
    slurm: SlurmSection = field(default_factory=SlurmSection)


@dataclass(frozen=True)
class Recipe:
    """A whole recipe (see the module docstring); :func:`load_recipe` builds it."""

    generators: tuple[GeneratorSpec, ...]
    prms: tuple[PrmSpec, ...]
    run: RunSection = field(default_factory=RunSection)
    questions: QuestionsSection = field(default_factory=QuestionsSection)
    data: DataSection = field(default_factory=DataSection)
    sampling: SamplingSection = field(default_factory=SamplingSection)
    rollout: RolloutSection = field(default_factory=RolloutSection)
    bon: BonSection = field(default_factory=BonSection)
    grading: GradingSection = field(default_factory=GradingSection)
    calibrators: CalibratorsSection = field(default_factory=CalibratorsSection)
    ias: IasSection = field(default_factory=IasSection)
    executor: ExecutorSection = field(default_factory=ExecutorSection)

    @property
    def worlds(self) -> list[str]:
        """``{generator}__{prm}`` for every pair, PRM-major (the report's order)."""
        return [f"{g.name}__{p.name}" for p in self.prms for g in self.generators]

    def generator(self, name: str) -> GeneratorSpec:
        return next(g for g in self.generators if g.name == name)

    def prm(self, name: str) -> PrmSpec:
        return next(p for p in self.prms if p.name == name)

    def to_dict(self) -> dict[str, Any]:
        """The resolved recipe as JSON-ready data (stored in the run directory)."""
        return json_ready(dataclasses.asdict(self))


#: top-level table -> (dataclass, is an array of tables)
TABLES: dict[str, tuple[type, bool]] = {
    "run": (RunSection, False),
    "questions": (QuestionsSection, False),
    "data": (DataSection, False),
    "sampling": (SamplingSection, False),
    "rollout": (RolloutSection, False),
    "bon": (BonSection, False),
    "grading": (GradingSection, False),
    "generators": (GeneratorSpec, True),
    "prms": (PrmSpec, True),
    "calibrators": (CalibratorsSection, False),
    "ias": (IasSection, False),
}
EXECUTOR_TABLES: dict[str, type] = {"ray": RaySection, "slurm": SlurmSection}


def _table(values: Any, cls: type, source: str) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: expected a table, got {values!r}")
    return from_dict(cls, values, source=source)


def recipe_from_dict(data: dict[str, Any], source: str = "recipe") -> Recipe:
    """Build and check a :class:`Recipe` from parsed TOML (unknown keys name their path).

    Raises:
        ConfigError: an unknown table or key, a wrong type or range, no generator or PRM, a
            duplicate or unusable name, an unknown data source or calibrator, or a bad override.
    """
    known = set(TABLES) | {"executor"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown table(s) {unknown}; known: {sorted(known)}")
    kwargs: dict[str, Any] = {}
    for name, (cls, many) in TABLES.items():
        if name not in data:
            continue
        if not many:
            values = dict(data[name]) if isinstance(data[name], dict) else data[name]
            if cls is CalibratorsSection and isinstance(values, dict):
                overrides = values.pop("overrides", {})
                section = _table(values, cls, f"{source} [{name}]")
                kwargs[name] = dataclasses.replace(
                    section, overrides=_overrides(overrides, f"{source} [{name}.overrides]")
                )
            else:
                kwargs[name] = _table(values, cls, f"{source} [{name}]")
            continue
        items = data[name]
        if not isinstance(items, list):
            raise ConfigError(f"{source} [{name}]: expected an array of tables ([[{name}]])")
        kwargs[name] = tuple(
            _table(item, cls, f"{source} [{name}][{i}]") for i, item in enumerate(items)
        )
    if "executor" in data:
        table = data["executor"]
        if not isinstance(table, dict):
            raise ConfigError(f"{source} [executor]: expected a table")
        bad = sorted(set(table) - set(EXECUTOR_TABLES))
        if bad:
            raise ConfigError(
                f"{source} [executor]: unknown table(s) {bad}; known: {sorted(EXECUTOR_TABLES)}"
            )
        kwargs["executor"] = ExecutorSection(
            **{
                k: _table(v, EXECUTOR_TABLES[k], f"{source} [executor.{k}]")
                for k, v in table.items()
            }
        )
    for name in ("generators", "prms"):
        if not kwargs.get(name):
            raise ConfigError(f"{source}: at least one [[{name}]] table is required")
    recipe = Recipe(**kwargs)
    check(recipe, source)
    return recipe


def _overrides(values: Any, source: str) -> dict[str, dict[str, Any]]:
    if not isinstance(values, dict) or not all(isinstance(v, dict) for v in values.values()):
        raise ConfigError(
            f"{source}: expected [calibrators.overrides.METHOD] tables of key = value"
        )
    return {method: dict(v) for method, v in values.items()}


def check(recipe: Recipe, source: str) -> None:
    """Cross-table checks (names, source, calibrators and their overrides)."""
    for name in ("generators", "prms"):
        names = [item.name for item in getattr(recipe, name)]
        for i, n in enumerate(names):
            if not _NAME.match(n) or "__" in n:
                raise ConfigError(
                    f"{source} [{name}][{i}]: name {n!r} must be letters, digits, '.', '-', '_' "
                    "(no '__': it separates generator and PRM in world names)"
                )
        if len(set(names)) != len(names):
            raise ConfigError(f"{source} [{name}]: duplicate names {names}")
    if recipe.data.source not in SOURCES:
        raise ConfigError(
            f"{source} [data]: source = {recipe.data.source!r}; expected one of {list(SOURCES)}"
        )
    if recipe.data.source == "generate" or recipe.bon.n > 0:
        for i, g in enumerate(recipe.generators):
            if not g.model:
                raise ConfigError(
                    f"{source} [generators][{i}]: model is required (it generates "
                    f"{'trajectories' if recipe.data.source == 'generate' else 'BoN pools'})"
                )
    if recipe.executor.slurm.cluster not in ("", "slurm", "local", "debug"):
        raise ConfigError(
            f"{source} [executor.slurm]: cluster = {recipe.executor.slurm.cluster!r}; expected "
            "'' (SLURM), 'local' or 'debug' (submitit's local executors)"
        )
    if recipe.rollout.boxed_prefix not in ("grade", "drop"):
        raise ConfigError(f"{source} [rollout]: boxed_prefix must be 'grade' or 'drop'")
    from dprm.models import REGISTRY

    methods = list(recipe.calibrators.methods)
    bad = [m for m in methods if m not in REGISTRY or m == "base"]
    if bad:
        trainable = sorted(set(REGISTRY) - {"base"})
        raise ConfigError(
            f"{source} [calibrators]: unknown or untrainable method(s) {bad}; trainable: {trainable}"
        )
    from dprm.ias.rules import RULES

    unknown = [r for r in recipe.ias.rules if r not in RULES]
    if unknown:
        raise ConfigError(
            f"{source} [ias]: unknown selection rule(s) {unknown} in 'rules'; choose from "
            f"{list(RULES)}"
        )
    for method, values in recipe.calibrators.overrides.items():
        where = f"{source} [calibrators.overrides.{method}]"
        if method not in methods:
            raise ConfigError(
                f"{where}: method {method!r} is not in [calibrators] methods = {methods}"
            )
        config_class = REGISTRY[method].config_class
        if config_class is None:
            if values:
                raise ConfigError(f"{where}: method {method!r} has no hyper-parameters to set")
            continue
        from_dict(config_class, values, source=where)  # unknown keys, types and ranges


#: a value that names a file or folder whatever exists: ``./x``, ``../x``, ``/x``, ``~/x``, ``x.jsonl``
_PATH_LIKE = re.compile(r"^(\.{1,2}/|/|~)|\.(jsonl|json|parquet|csv)$")


def _resolve(value: str, base: Path) -> str:
    """A recipe value that is a path, made absolute against the recipe's folder; else itself.

    Question sets, Park's labels and models are names (``math500``, a hub id) or paths. A value
    is a path when it looks like one (:data:`_PATH_LIKE`) or names something next to the recipe;
    the working directory is never looked at (a folder of the same name there is a decoy).
    """
    if not isinstance(value, str) or not value:
        return value
    expanded = Path(value).expanduser()
    if expanded.is_absolute():
        return str(expanded)
    if _PATH_LIKE.search(value) or (base / value).exists():
        return str((base / value).resolve())
    return value


def resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """The parsed recipe with every input path resolved against ``base`` (the recipe's folder):
    question files, ``[data] park`` and the models of ``[[generators]]`` / ``[[prms]]``."""
    data = dict(data)
    if isinstance(data.get("questions"), dict):
        questions = dict(data["questions"])
        for split in SPLITS:
            if isinstance(questions.get(split), list):
                questions[split] = [_resolve(v, base) for v in questions[split]]
        data["questions"] = questions
    if isinstance(data.get("data"), dict) and "park" in data["data"]:
        data["data"] = dict(data["data"]) | {"park": _resolve(data["data"]["park"], base)}
    for name in ("generators", "prms"):
        if isinstance(data.get(name), list):
            data[name] = [
                dict(t) | {"model": _resolve(t["model"], base)}
                if isinstance(t, dict) and "model" in t
                else t
                for t in data[name]
            ]
    return data


def read_recipe_file(path: Path) -> dict[str, Any]:
    """Parse a recipe file (TOML is UTF-8 whatever the locale); errors are one line naming it."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: recipe file not found") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the recipe file ({err.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path}: recipe file is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset "
            f"{err.start}); save it as UTF-8"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None


def load_recipe(path: str | Path) -> Recipe:
    """Read and check a recipe file (see the module docstring).

    Relative input paths resolve against the recipe's folder, not the working directory
    (:func:`resolve_paths`); the recipe keeps them absolute (``OUT/recipe.json``).
    """
    path = Path(path)
    data = resolve_paths(read_recipe_file(path), path.resolve().parent)
    return recipe_from_dict(data, str(path))
