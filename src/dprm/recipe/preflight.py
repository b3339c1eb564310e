"""Before any unit of ``dprm run``: the plan, and every requirement the recipe's stages have.

:func:`plan_lines` is what ``dprm run --dry-run`` prints (stages, units, engines, devices);
:func:`missing_requirements` checks, without running or writing anything:

* the optional extras the stages import (transformers and math-verify to generate, roll out and
  grade; vllm for a ``backend = "vllm"`` generator; datasets for a hub question set; optuna for
  ``tune_trials``; ray / submitit for their executors);
* a CUDA GPU where an engine needs one (vllm, or ``gpus`` > 0 without a CPU ``device``) when
  units run on this machine (``--executor local``);
* every model, question file and Park label source: a local path must exist, a hub id must be
  in the local hub cache or the hub must answer (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``
  count as no hub; the check is one TCP connection with a short timeout, never a download);
* free disk space for the planned hidden states under the run directory.

``dprm run`` prints every missing requirement in one block with how to get it and exits 2
before any unit runs (``--no-preflight`` skips the check, e.g. to resume a run whose GPU stages
finished elsewhere).
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dprm.llm.extras import EXTRAS, installed_version
from dprm.llm.questions import NAMED_SETS
from dprm.recipe.plan import planned_stages, resolved_shards, split_questions
from dprm.recipe.spec import SPLITS, Recipe

#: hub probe timeout (seconds): one TCP connection to the hub's endpoint
HUB_TIMEOUT_S = 3.0
#: hidden size assumed for a PRM whose config is not readable here (Qwen2.5-Math-PRM-7B: 3584)
DEFAULT_HIDDEN_SIZE = 4096
#: prefixes per response assumed for the disk estimate (Park's rollouts stop at k = 19)
PREFIXES_PER_RESPONSE = 10
#: bytes per stored hidden-state value (the recipe's default hidden_dtype float16)
BYTES_PER_VALUE = 2
#: named sets read from the hub (the others are packaged with dprm)
HUB_SETS = ("math500train",)


@dataclass(frozen=True)
class Missing:
    """One unmet requirement: what, who needs it, and how to get it."""

    what: str
    needed_by: str
    how: str

    def line(self) -> str:
        return f"  - {self.what} (needed by {self.needed_by}): {self.how}"


# ----------------------------------------------------------------------------- the plan
def _engine_device(spec: Any, backend: str | None) -> str:
    if backend == "openai":
        return f"served at {spec.base_url}"
    if backend == "vllm":
        tp = getattr(spec, "tensor_parallel_size", 1)
        return f"cuda via vLLM ({spec.gpus:g} GPU per engine, tensor parallel {tp})"
    if spec.device:
        return f"{spec.device} ({spec.gpus:g} GPU per engine)" if spec.gpus else spec.device
    if spec.gpus:
        mapped = f", device_map {spec.device_map}" if getattr(spec, "device_map", "") else ""
        return f"cuda ({spec.gpus:g} GPU per engine{mapped})"
    return "cpu"


def plan_lines(recipe: Recipe, executor: str, out: Path, shards: int | None = None) -> list[str]:
    """The run as ``dprm run --dry-run`` prints it: stages, units, engines and devices.

    Args:
        recipe: the loaded recipe.
        executor: ``local``, ``ray`` or ``slurm``.
        out: the run directory.
        shards: shards per GPU stage and split (default: ``[run] shards``, or when it is 0
            the executor's default: :func:`dprm.recipe.plan.resolved_shards`).
    """
    r = recipe
    shards = shards or resolved_shards(r, executor)
    generate = r.data.source == "generate"
    lines = [
        f"plan of recipe {r.run.name!r}: executor {executor}, run directory {out}",
        f"  worlds ({len(r.worlds)}): {', '.join(r.worlds)}",
        f"  shards per GPU stage and split: {shards}"
        + ("" if r.run.shards else f" (run.shards = 0: the {executor} executor's default)"),
        "  engines:",
    ]
    if generate or r.bon.n > 0:
        for g in r.generators:
            lines.append(
                f"    generator {g.name}: {g.model or '(no model)'}, backend {g.backend}, "
                f"{_engine_device(g, g.backend)}"
            )
    for p in r.prms:
        lines.append(f"    prm {p.name}: {p.model}, {_engine_device(p, None)}")
    stages = planned_stages(r, shards)
    width = max(len(s.label) for s in stages)
    lines.append(f"  {'stage':<{width}}  {'units':>5}  runs on")
    lines += [f"  {s.label:<{width}}  {s.units:>5}  {s.runs_on}" for s in stages]
    lines.append(
        f"  {sum(s.units for s in stages)} units in all (a training that fails has no evaluate "
        "or IAS units)"
    )
    return lines


# ----------------------------------------------------------------------------- requirements
def _extra(name: str, needed_by: str, instead: str = "") -> Missing | None:
    if installed_version(name) is not None:
        return None
    extra = EXTRAS[name]
    return Missing(f"the {extra.distribution} package", needed_by, extra.install + instead)


def needs_gpu(spec: Any, backend: str | None = None) -> bool:
    """Whether an engine spec runs on a GPU: vLLM always, else ``gpus`` > 0 unless its
    ``device`` is the CPU."""
    if backend == "vllm":
        return True
    if backend == "openai":  # the server holds the model
        return False
    return spec.gpus > 0 and not str(spec.device).startswith("cpu")


def gpu_available() -> bool:
    """Whether torch sees a CUDA GPU here."""
    import torch

    return bool(torch.cuda.is_available())


def hub_offline_reason() -> str | None:
    """Why the Hugging Face hub cannot be reached from here (None: it answered).

    Offline mode (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``) says so without a probe; else
    one TCP connection to the endpoint with a :data:`HUB_TIMEOUT_S` timeout (in a thread, so a
    hanging name lookup cannot stall the preflight).
    """
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "0") not in ("", "0", "false", "False"):
            return f"offline mode ({var}={os.environ[var]})"
    from dprm.llm.doctor import hub_reachable

    answer: list[bool] = []
    probe = threading.Thread(
        target=lambda: answer.append(hub_reachable(HUB_TIMEOUT_S)), daemon=True
    )
    probe.start()
    probe.join(HUB_TIMEOUT_S + 1.0)
    return None if answer and answer[0] else "no network connection to the hub"


def hub_cached(repo_id: str, repo_type: str = "model") -> bool:
    """Whether a hub repository is in the local hub cache (no network)."""
    try:
        from huggingface_hub import scan_cache_dir
    except ImportError:
        return False
    try:
        cache = scan_cache_dir()
    except Exception:  # noqa: BLE001 - no cache folder yet, unreadable cache
        return False
    return any(r.repo_id == repo_id and r.repo_type == repo_type for r in cache.repos)


def _is_hub_id(value: str) -> bool:
    """``org/name`` (one slash, no path prefix) that is not a folder here."""
    parts = value.split("/")
    return len(parts) == 2 and all(parts) and not value.startswith((".", "~"))


def _sources(recipe: Recipe) -> list[tuple[str, str, str]]:
    """Every model, question set and label source the recipe reads: (value, kind, who)."""
    r = recipe
    out: list[tuple[str, str, str]] = []
    generate = r.data.source == "generate"
    if generate or r.bon.n > 0:
        out += [
            (g.model, "model", f"generator {g.name}")
            for g in r.generators
            if g.model and g.backend != "openai"  # a served model's name is the server's
        ]
    out += [(p.model, "model", f"prm {p.name}") for p in r.prms]
    if r.data.source == "park":
        out.append((r.data.park, "dataset", "[data] park (Park et al.'s labels)"))
    for split in SPLITS:
        if not generate and not (r.bon.n > 0 and split != "train"):
            continue
        for name in getattr(r.questions, split):
            if name not in NAMED_SETS:
                out.append((name, "file", f"[questions] {split}"))
    return out


def _hidden_size(model: str) -> int:
    """A PRM's hidden size from a local ``config.json``, else :data:`DEFAULT_HIDDEN_SIZE`."""
    import json

    try:
        config = json.loads((Path(model) / "config.json").read_text())
        return int(config.get("hidden_size") or DEFAULT_HIDDEN_SIZE)
    except (OSError, ValueError, TypeError):
        return DEFAULT_HIDDEN_SIZE


def planned_bytes(recipe: Recipe) -> int:
    """A coarse estimate of the hidden states the run will store (the bulk of its outputs):
    calibration prefixes of every split and the BoN candidates of id / ood, per world."""
    r = recipe
    prefixes = sum(split_questions(r, s) for s in SPLITS) * r.sampling.n * PREFIXES_PER_RESPONSE
    candidates = sum(split_questions(r, s) for s in ("id", "ood")) * r.bon.n
    rows = prefixes + candidates
    return sum(rows * _hidden_size(p.model) * BYTES_PER_VALUE for p in r.prms) * len(r.generators)


def _free_bytes(out: Path) -> int:
    probe = Path(out).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def missing_requirements(
    recipe: Recipe,
    executor: str,
    out: Path,
    *,
    hub_reason=hub_offline_reason,
    executor_options: dict[str, Any] | None = None,
) -> list[Missing]:
    """Every requirement of the recipe's stages this machine lacks (empty: ready to run).

    Args:
        recipe: the loaded recipe.
        executor: ``local``, ``ray`` or ``slurm`` (GPUs are checked for ``local`` only: the
            others run GPU units on their cluster's machines).
        out: the run directory (its file system's free space is checked).
        hub_reason: how to learn whether the hub is reachable (tests pass a stub; the default
            never downloads anything).
        executor_options: the command line's executor options (``address``, ``cluster``).
    """
    r = recipe
    missing: list[Missing | None] = []
    generate = r.data.source == "generate"
    generators = r.generators if (generate or r.bon.n > 0) else ()
    engines = ", ".join(
        [f"generator {g.name}" for g in generators] + [f"prm {p.name}" for p in r.prms]
    )
    missing.append(_extra("transformers", engines))
    if generators:
        missing.append(_extra("math_verify", "grading generated answers"))
    vllm = [g.name for g in generators if g.backend == "vllm"]
    if vllm:
        instead = ' (Linux with a CUDA GPU), or backend = "transformers" in the recipe'
        missing.append(_extra("vllm", f'backend = "vllm" of {", ".join(vllm)}', instead))
    served = [g.name for g in generators if g.backend == "openai"]
    if served:
        missing.append(_extra("httpx", f'backend = "openai" of {", ".join(served)}'))
    hub_sets = sorted({n for s in SPLITS for n in getattr(r.questions, s) if n in HUB_SETS})
    if hub_sets and generate:
        missing.append(_extra("datasets", f"[questions] {', '.join(hub_sets)} (from the hub)"))
    if r.calibrators.tune_trials:
        missing.append(_extra("optuna", f"[calibrators] tune_trials = {r.calibrators.tune_trials}"))
    missing += _executor_requirements(r, executor, executor_options or {})
    if executor == "local":
        on_gpu = [f"generator {g.name}" for g in generators if needs_gpu(g, g.backend)]
        on_gpu += [f"prm {p.name}" for p in r.prms if needs_gpu(p)]
        if on_gpu and not gpu_available():
            missing.append(
                Missing(
                    "a CUDA GPU (torch sees none)",
                    ", ".join(on_gpu),
                    "run on a GPU machine, or send the GPU stages to one with --executor ray / "
                    'slurm; for a CPU-only try set gpus = 0, device = "cpu" and backend = '
                    '"transformers" (slow)',
                )
            )
    hub_ids = []
    for value, kind, who in _sources(r):
        if Path(value).exists():
            continue
        repo_type = "dataset" if kind == "dataset" else "model"
        if kind != "file" and _is_hub_id(value):
            if not hub_cached(value, repo_type):
                hub_ids.append((value, who))
            continue
        missing.append(Missing(f"{value} (not found)", who, "fix the path in the recipe"))
    if hub_sets and generate:
        hub_ids += [(name, "[questions]") for name in hub_sets]
    if hub_ids:
        reason = hub_reason()
        if reason is not None:
            names = ", ".join(f"{v} ({who})" for v, who in hub_ids)
            missing.append(
                Missing(
                    f"the Hugging Face hub: {reason}",
                    names,
                    "run where the hub is reachable, or download them on such a machine "
                    "(`huggingface-cli download ID`, `dprm questions NAME --out FILE`) and put "
                    "local paths in the recipe",
                )
            )
    need, free = planned_bytes(r), _free_bytes(out)
    if need > free:
        missing.append(
            Missing(
                f"disk space: about {need / 1e9:.1f} GB of hidden states planned, "
                f"{free / 1e9:.1f} GB free",
                f"the run directory {out}",
                "free space there or pass --out on a larger disk",
            )
        )
    return [m for m in missing if m is not None]


def _executor_requirements(recipe: Recipe, executor: str, options: dict) -> list[Missing | None]:
    """What the executor itself needs here: its extra, and SLURM's commands (unless submitit's
    local mode is asked for) or the Ray cluster an address names."""
    from dprm.runner.executors import ray_address, ray_unreachable, slurm_missing

    if executor == "ray":
        address = ray_address(recipe, options.get("address"))
        reason = ray_unreachable(address)
        unreachable = Missing(
            f"the Ray cluster {address!r}: {reason}",
            "--executor ray",
            "start it (`ray start --head`), or fix --address / [executor.ray] address",
        )
        return [_extra("ray", "--executor ray"), unreachable if reason else None]
    if executor == "slurm":
        cluster = options.get("cluster") or recipe.executor.slurm.cluster or "slurm"
        absent = slurm_missing() if cluster == "slurm" else []
        scheduler = Missing(
            f"a SLURM scheduler ({' and '.join(absent)} not on PATH)",
            "--executor slurm",
            "run the driver on a SLURM login node, or --slurm-cluster local (submitit's local "
            "mode: every task a process on this machine)",
        )
        return [_extra("submitit", "--executor slurm"), scheduler if absent else None]
    return []


def missing_block(recipe_path: str, missing: list[Missing]) -> str:
    """The one block ``dprm run`` prints when requirements are missing."""
    return "\n".join(
        [
            f"dprm run: {recipe_path} cannot run on this machine; nothing was started or written. "
            f"Missing ({len(missing)}):",
            *(m.line() for m in missing),
            "(dprm doctor lists the extras; --dry-run prints the plan; --no-preflight skips "
            "this check)",
        ]
    )
