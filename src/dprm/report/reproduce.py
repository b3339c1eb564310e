"""``dprm reproduce``: synth -> train -> evaluate -> ias -> tables, figures, report.md.

Every stage is a list of *units* (one world, one model, one evaluation, ...). A unit whose key
is recorded in ``OUT/state.json`` and whose outputs exist is skipped, so an interrupted run
resumes where it stopped; each unit writes its outputs atomically and is recorded only after
they are complete. Worlds are processed in batches: ``demo`` keeps all its (small) worlds and
runs stage by stage over all of them; ``paper`` handles one world at a time and deletes its
synthetic data (~700 MB at 3584 dims) once its evaluations and IAS sweeps are done (regenerated
deterministically if a later run needs it again).

Layout of OUT::

    state.json  run.json  report.md  results.json
    worlds/{gen}__{prm}/{id,ood}/{calib,bon}       (synth; deleted after use for ``paper``)
    models/{gen}__{prm}/{method}/seed{s}/          (calibrator directories)
    eval/{gen}__{prm}/{method}/seed{s}.json        (metrics + curves per split)
    ias/{gen}__{prm}/{split}/{method}/seed{s}.csv  (IAS sweeps; budgets beside as .parquet)
    tables/  figures/
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from dprm.io import read_json, write_json

#: methods a preset may train, in report order; only those in the registry at run time are used
CANDIDATE_METHODS = ("ot", "qr", "mono", "binomial", "isotonic", "platt", "conformal")
ALL_GENERATORS = (
    "llama-3.2-1b",
    "llama-3.1-8b",
    "qwen-2.5-1.5b",
    "qwen-2.5-7b",
    "r1-llama-8b",
    "r1-qwen-7b",
)
ALL_PRMS = ("qwen-prm", "reasoneval", "shepherd")
SPLITS = ("id", "ood")
#: demo-only training caps so that ``make demo`` stays within 5 minutes on 2 CPU cores (keys a
#: method's config does not have are dropped, so a renamed option never breaks the demo)
DEMO_STEPS = {"max_steps": 300, "eval_every": 25}
DEMO_OVERRIDES: dict[str, dict[str, Any]] = {
    "ot": dict(DEMO_STEPS),
    "mono": dict(DEMO_STEPS),
    "binomial": dict(DEMO_STEPS),
    "qr": {"max_steps": 1000, "eval_every": 50},
    "conformal": {"inner_set": ";".join(f"{k}={v}" for k, v in DEMO_STEPS.items())},
}


@dataclass
class Preset:
    """A reproduction grid."""

    name: str
    generators: tuple[str, ...]
    prms: tuple[str, ...]
    size: str
    seeds: int
    methods: tuple[str, ...] = CANDIDATE_METHODS
    keep_worlds: bool = True
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)


PRESETS = {
    "demo": Preset(
        "demo", ("qwen-2.5-7b", "r1-qwen-7b"), ("qwen-prm",), "demo", 1, overrides=DEMO_OVERRIDES
    ),
    "paper": Preset("paper", ALL_GENERATORS, ALL_PRMS, "paper", 3, keep_worlds=False),
    # for tests: a tiny world, one generator
    "tiny": Preset("tiny", ("r1-qwen-7b",), ("qwen-prm",), "tiny", 1),
}


@dataclass
class RunConfig:
    """Everything that determines a run's outputs (stored in run.json)."""

    preset: str
    generators: list[str]
    prms: list[str]
    size: str
    seeds: list[int]
    methods: list[str]
    overrides: dict[str, dict[str, Any]]
    keep_worlds: bool
    jobs: int = 1
    beta: float = 0.1
    mc_trials: int = 100

    @property
    def worlds(self) -> list[str]:
        return [f"{g}__{p}" for p in self.prms for g in self.generators]


def default_methods(preset: Preset) -> list[str]:
    """The preset's methods that exist in the registry now (data-driven: new calibrators appear)."""
    from dprm.models import REGISTRY

    return [m for m in preset.methods if m in REGISTRY and m != "base"]


def _known_keys(method: str, values: dict[str, Any]) -> dict[str, Any]:
    """The preset overrides that ``method``'s config dataclass accepts."""
    import dataclasses

    from dprm.models import REGISTRY

    config_class = getattr(REGISTRY[method], "config_class", None)
    if config_class is None:
        return {}
    names = {f.name for f in dataclasses.fields(config_class)}
    return {k: v for k, v in values.items() if k in names}


def resolve(
    preset: str,
    methods: list[str] | None = None,
    seeds: int | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    keep_worlds: bool | None = None,
    jobs: int = 1,
) -> RunConfig:
    """A :class:`RunConfig` from a preset name and command-line choices."""
    from dprm.config import ConfigError
    from dprm.models import REGISTRY

    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    p = PRESETS[preset]
    chosen = list(methods) if methods else default_methods(p)
    unknown = [m for m in chosen if m not in REGISTRY or m == "base"]
    if unknown:
        raise ConfigError(
            f"unknown or untrainable method(s) {unknown}; trainable: {sorted(set(REGISTRY) - {'base'})}"
        )
    merged = {m: _known_keys(m, v) for m, v in p.overrides.items() if m in chosen}
    merged = {m: v for m, v in merged.items() if v}
    for m, v in (overrides or {}).items():
        merged.setdefault(m, {}).update(v)
    return RunConfig(
        preset=preset,
        generators=list(p.generators),
        prms=list(p.prms),
        size=p.size,
        seeds=list(range(seeds if seeds is not None else p.seeds)),
        methods=chosen,
        overrides=merged,
        keep_worlds=p.keep_worlds if keep_worlds is None else keep_worlds,
        jobs=max(1, int(jobs)),
    )


# ----------------------------------------------------------------------------- state
class State:
    """``state.json``: completed units (key -> record) and their outputs, written atomically."""

    def __init__(self, out: Path):
        self.path = out / "state.json"
        self.data: dict[str, Any] = (
            read_json(self.path) if self.path.exists() else {"version": 1, "done": {}}
        )

    def done(self, key: str, outputs: list[Path]) -> bool:
        return key in self.data["done"] and all(p.exists() for p in outputs)

    def mark(self, key: str, seconds: float, **extra) -> None:
        self.data["done"][key] = {
            "seconds": round(seconds, 3),
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **extra,
        }
        write_json(self.path, self.data)


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:8]


@dataclass
class Unit:
    """One resumable piece of work: ``run()`` writes ``outputs``; ``needs_world`` if it reads synth data."""

    key: str
    outputs: list[Path]
    run: Callable[[], Any]
    world: str | None = None
    needs_world: bool = True
    parallel: bool = False  # ``run`` is picklable and may go to a worker process (--jobs)


class Pipeline:
    """Runs units stage by stage with a progress bar per stage and per-stage timing."""

    def __init__(
        self,
        out: Path,
        config: RunConfig,
        progress: bool = True,
        log: Callable[[str], None] = print,
    ):
        self.out, self.config, self.progress, self.log = out, config, progress, log
        self.state = State(out)
        self.timing: dict[str, dict[str, float]] = {}
        self.failures: list[dict[str, str]] = []

    def world_dir(self, world: str) -> Path:
        return self.out / "worlds" / world

    def run_stage(self, name: str, units: list[Unit], label: str = "") -> None:
        """Run the units of one stage that are not already done; time the stage."""
        start = time.perf_counter()
        todo = [u for u in units if not self.state.done(u.key, u.outputs)]
        stats = self.timing.setdefault(name, {"seconds": 0.0, "units": 0, "skipped": 0})
        stats["skipped"] += len(units) - len(todo)
        desc = f"{name}{label}"
        with tqdm(
            total=len(units),
            initial=len(units) - len(todo),
            desc=desc,
            unit="job",
            disable=not self.progress,
            leave=True,
        ) as bar:
            parallel = [u for u in todo if u.parallel] if self.config.jobs > 1 else []
            if len(parallel) > 1:
                self._run_parallel(parallel, bar, stats)
            for unit in todo:
                if unit in parallel and len(parallel) > 1:
                    continue
                bar.set_postfix_str(unit.key.split("/", 1)[-1][:60], refresh=True)
                t0, c0 = time.perf_counter(), time.process_time()
                try:
                    info = unit.run()
                except Exception as err:  # noqa: BLE001 - recorded, reported, the run goes on
                    self._failed(unit, err)
                else:
                    info = {"cpu_seconds": round(time.process_time() - c0, 3)} | (info or {})
                    self.state.mark(unit.key, time.perf_counter() - t0, **info)
                    stats["units"] += 1
                bar.update()
        stats["seconds"] += time.perf_counter() - start

    def _failed(self, unit: Unit, err: Exception) -> None:
        """Record a failed unit: it is not marked done (a rerun retries it); the report lists it."""
        text = f"{type(err).__name__}: {err}".strip()
        self.failures.append({"unit": unit.key, "error": text[:2000]})
        self.log(
            f"dprm reproduce: WARNING: {unit.key} failed ({text.splitlines()[0][:300]}); continuing without it"
        )

    def _run_parallel(self, units: list[Unit], bar, stats: dict) -> None:
        """Run picklable units in ``jobs`` spawned worker processes; record each as it finishes."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            max_workers=min(self.config.jobs, len(units)), mp_context=ctx
        ) as pool:
            started = {pool.submit(u.run): (u, time.perf_counter()) for u in units}
            for future in as_completed(started):
                unit, t0 = started[future]
                try:
                    info = future.result()
                except Exception as err:  # noqa: BLE001
                    self._failed(unit, err)
                else:
                    info = info or {}
                    self.state.mark(
                        unit.key, info.pop("wall_seconds", time.perf_counter() - t0), **info
                    )
                    stats["units"] += 1
                bar.set_postfix_str(unit.key.split("/", 1)[-1][:60], refresh=False)
                bar.update()


def reproduce(
    out: str | Path,
    config: RunConfig,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> Path:
    """Run (or resume) the whole reproduction; returns the path of ``report.md``."""
    from dprm.report import stages
    from dprm.report.document import write_outputs

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    pipe = Pipeline(out, config, progress, log)
    previous = read_json(out / "run.json") if (out / "run.json").exists() else None
    worlds = config.worlds
    batches = [worlds] if config.keep_worlds else [[w] for w in worlds]
    for i, batch in enumerate(batches):
        label = "" if len(batches) == 1 else f" [{i + 1}/{len(batches)} {batch[0]}]"
        for name, make in stages.WORLD_STAGES:
            units = [u for w in batch for u in make(pipe, w)]
            needed = {
                u.world for u in units if u.needs_world and not pipe.state.done(u.key, u.outputs)
            }
            if name != "synth":
                for w in sorted(needed - {None}):
                    stages.ensure_world(pipe, w)
            pipe.run_stage(name, units, label)
        if not config.keep_worlds:
            for w in batch:
                shutil.rmtree(pipe.world_dir(w), ignore_errors=True)
    # the report stage: skipped when no unit changed since the last complete report
    done = {
        k: v.get("at") for k, v in pipe.state.data["done"].items() if not k.startswith("report/")
    }
    key = "report/" + _hash([config_dict(config), sorted(done.items())])
    report = out / "report.md"
    if not pipe.failures and pipe.state.done(key, [report, out / "results.json", out / "run.json"]):
        pipe.timing["report"] = {"seconds": 0.0, "units": 0, "skipped": 1}
        run = read_json(out / "run.json")
        run.update(
            resumed=True,
            last_invocation_s=round(time.perf_counter() - started, 2),
            last_stage_timing=pipe.timing,
        )
        write_json(out / "run.json", run, allow_nan=False)
    else:
        t0 = time.perf_counter()
        report = write_outputs(pipe, started_at=started, previous_run=previous)
        pipe.state.data["done"] = {
            k: v for k, v in pipe.state.data["done"].items() if not k.startswith("report/")
        }
        pipe.state.mark(key, time.perf_counter() - t0)
    summary = ", ".join(f"{k} {v['seconds']:.1f}s" for k, v in pipe.timing.items())
    log(f"dprm reproduce: wall time {time.perf_counter() - started:.1f}s ({summary})")
    log(f"report: {report}")
    return report


def config_dict(config: RunConfig) -> dict[str, Any]:
    return asdict(config) | {"worlds": config.worlds}
