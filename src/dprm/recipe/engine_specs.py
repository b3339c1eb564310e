"""The ``[[generators]]`` and ``[[prms]]`` tables of a recipe: which model, and how one engine of
it runs (backend, GPUs, precision, context). The settings that only place an engine
(:data:`dprm.recipe.fingerprints.PLACEMENT`) do not change what it outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

from dprm.config import in_range


@dataclass(frozen=True)
class GeneratorSpec:
    """One generator (policy) and how one engine of it runs.

    Attributes:
        name: short name used in world names (``{name}__{prm}``).
        model: hub id or local directory (unused with ``data.source = "park"``).
        backend: ``vllm`` or ``transformers`` (in-process), or ``openai``: a generator served
            behind an OpenAI-compatible API at ``base_url`` under the name ``model``.
        template: chat format (``""``: from the model name).
        park_name: its folder in Park's released labels (``""``: ``name``).
        gpus: GPUs per engine (Ray actor / SLURM task); 0 on CPU.
        tensor_parallel_size: vLLM GPUs per model replica.
        max_model_len: vLLM's prompt + completion token limit (None: from the model, the
            reference's 4096 or the config's ``max_position_embeddings`` when smaller, as
            ``dprm generate --max-model-len``; :func:`dprm.llm.generate.default_context_limit`).
            The transformers backend always uses the model's own limit; ``openai`` the
            server's.
        base_url: ``openai`` only: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        api_key_env: ``openai`` only: the environment variable holding the API key.
        max_in_flight: ``openai`` only: requests open at a time per engine.
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
    max_model_len: int | None = in_range(None, ge=1)
    gpu_memory_utilization: float = in_range(0.9, gt=0, le=1)
    base_url: str = ""
    api_key_env: str = ""
    max_in_flight: int = in_range(16, ge=1)


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
