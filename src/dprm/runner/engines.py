"""One loaded model engine per worker process (a generator or a PRM), kept between units.

A GPU stage is cut into shards; the executor sends them to long-lived workers (this process,
a local worker pinned to one GPU, a Ray actor, a SLURM task). Loading a 7B model takes longer
than a small shard, so each process keeps the last engine it loaded and reuses it while the
next unit asks for the same one (same spec); asking for another engine frees the first.
"""

from __future__ import annotations

import gc
import json
from typing import Any

_LOADED: dict[str, Any] = {}


def _key(kind: str, spec: dict[str, Any]) -> str:
    return json.dumps([kind, spec], sort_keys=True)


def _get(kind: str, spec: dict[str, Any], load) -> Any:
    key = _key(kind, spec)
    if key not in _LOADED:
        release()
        _LOADED[key] = load()
    return _LOADED[key]


def release() -> None:
    """Drop the loaded engine (frees its GPU memory)."""
    _LOADED.clear()
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover - torch is a core dependency
        pass


def _vllm_options(spec: dict[str, Any]) -> dict[str, Any]:
    return dict(
        tensor_parallel_size=spec["tensor_parallel_size"],
        enable_prefix_caching=True,
        seed=spec.get("seed", 42),
        max_model_len=spec["max_model_len"],
        dtype=spec["dtype"] or "auto",
        gpu_memory_utilization=spec["gpu_memory_utilization"],
    )


def _transformers_options(spec: dict[str, Any]) -> dict[str, Any]:
    # max_model_len: vLLM's; transformers needs none
    return dict(device=spec["device"] or None, dtype=spec["dtype"] or None)


def _openai_options(spec: dict[str, Any]) -> dict[str, Any]:
    return dict(
        base_url=spec["base_url"],
        api_key_env=spec.get("api_key_env") or None,
        max_in_flight=spec.get("max_in_flight", 16),
        max_model_len=spec["max_model_len"],
    )


#: a ``[[generators]]`` table's backend -> its engine's options
GENERATOR_OPTIONS = {
    "vllm": _vllm_options,
    "transformers": _transformers_options,
    "openai": _openai_options,
}


def generator(spec: dict[str, Any]):
    """The generator of a ``[[generators]]`` table (a :class:`dprm.llm.generate.Generator`)."""
    from dprm.llm.generate import load_generator

    def load():
        options = GENERATOR_OPTIONS[spec["backend"]](spec)
        return load_generator(spec["backend"], spec["model"], **options)

    return _get("generator", spec, load)


def prm(spec: dict[str, Any]):
    """The PRM wrapper of a ``[[prms]]`` table (a :class:`dprm.llm.prm_interface.PRM`)."""
    from dprm.llm.prm import load_prm

    def load():
        options: dict[str, Any] = {}
        if spec["prompt"] != "park":
            options["prompt"] = spec["prompt"]
        if spec.get("device_map"):  # a PRM sharded over the worker's GPUs
            from dprm.llm.prm_interface import parse_max_memory

            options["device_map"] = spec["device_map"]
            options["max_memory"] = parse_max_memory(spec.get("max_memory") or None)
        return load_prm(
            spec["model"],
            spec["kind"] or None,
            device=spec["device"] or None,
            dtype=spec["dtype"] or None,
            max_tokens=spec["max_tokens"],
            batch_tokens=spec["batch_tokens"],
            **options,
        )

    return _get("prm", spec, load)
