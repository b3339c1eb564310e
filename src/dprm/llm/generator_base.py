"""What every generation backend shares: the :class:`Generator` interface and its base class.

A backend subclasses :class:`SamplingBackend` and implements ``_sample(prompts, n, seeds,
options)``; :meth:`SamplingBackend.generate` checks the seeds (one per prompt) first. The
backends and their registry live in :mod:`dprm.llm.generate` (in-process engines) and
:mod:`dprm.llm.openai_engine` (a served generator).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

STOP_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>")


@dataclass(frozen=True)
class Completion:
    """One sampled continuation: its text, how many tokens it used, and why it stopped."""

    text: str
    n_tokens: int
    finish_reason: str  # "stop" (end token or stop string) or "length"
    stop_reason: str | int | None = None  # vLLM's: stop string or stop token id; None for EOS
    #: the sampled tokens' log-probabilities (n_tokens,), from a backend asked for them
    logprobs: tuple[float, ...] | None = None


@runtime_checkable
class Generator(Protocol):
    """What every backend provides."""

    backend: str
    model_name: str

    def generate(
        self,
        prompts: list[str],
        n: int,
        *,
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_new_tokens: int = 2048,
        seeds: list[int] | None = None,
        stop: list[str] | None = None,
        top_k: int = 0,
        repetition_penalty: float = 1.0,
    ) -> list[list[Completion]]:
        """``n`` completions for each prompt, in prompt order."""
        ...


def derive_seed(seed: int, *keys: Any) -> int:
    """A 31-bit seed that depends only on ``seed`` and ``keys`` (stable across runs/machines)."""
    digest = hashlib.blake2b(repr((int(seed), *keys)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


def boxed_first(completions: list[Completion], keep: int) -> list[Completion]:
    """Park's ``prioritize_boxed``: completions with a ``\\boxed{}`` first (stable), keep ``keep``."""
    from dprm.llm.prompts import contains_boxed

    boxed = [c for c in completions if contains_boxed(c.text)]
    rest = [c for c in completions if not contains_boxed(c.text)]
    return (boxed + rest)[:keep]


@dataclass(frozen=True)
class SamplingOptions:
    """The per-call sampling options of :meth:`Generator.generate` (seeds aside)."""

    temperature: float
    top_p: float
    max_new_tokens: int
    stop: list[str] | None
    top_k: int = 0  # 0: off
    repetition_penalty: float = 1.0


class SamplingBackend:
    """What the backends share: one seed per prompt, checked, then the backend's ``_sample``."""

    backend: str
    model_name: str

    def generate(
        self,
        prompts: list[str],
        n: int,
        *,
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_new_tokens: int = 2048,
        seeds: list[int] | None = None,
        stop: list[str] | None = None,
        top_k: int = 0,
        repetition_penalty: float = 1.0,
    ) -> list[list[Completion]]:
        """``n`` completions for each prompt, in prompt order.

        Args:
            prompts: the prompts (already in chat format).
            n: completions per prompt.
            temperature: sampling temperature (0: greedy).
            top_p: nucleus sampling mass (1: off).
            max_new_tokens: completion token limit.
            seeds: one seed per prompt (default: derived from the prompt text).
            stop: stop strings; the text is cut before the first one found.
            top_k: keep the k most likely tokens (0: off).
            repetition_penalty: 1.0 (off) unless asked; never taken from the checkpoint.

        Raises:
            ValueError: ``seeds`` and ``prompts`` differ in length.
        """
        seeds = seeds if seeds is not None else [derive_seed(0, p) for p in prompts]
        if len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        options = SamplingOptions(
            temperature, top_p, int(max_new_tokens), stop, int(top_k), float(repetition_penalty)
        )
        return self._sample(prompts, n, [int(s) for s in seeds], options)

    def _sample(
        self, prompts: list[str], n: int, seeds: list[int], options: SamplingOptions
    ) -> list[list[Completion]]:
        raise NotImplementedError


def cut_at_stop(text: str, stop: list[str] | None) -> tuple[str, str | None]:
    """``text`` cut before the first stop string found, and that string (None if none)."""
    hits = [(i, s) for s in stop or [] if (i := text.find(s)) >= 0]
    if not hits:
        return text, None
    at, string = min(hits, key=lambda h: h[0])
    return text[:at], string


def stop_token_ids(tokenizer: Any) -> list[int]:
    """Ids of the end-of-turn tokens the tokenizer knows, plus its EOS."""
    vocab = tokenizer.get_vocab()
    ids = [vocab[t] for t in STOP_TOKENS if t in vocab]
    eos = tokenizer.eos_token_id
    for value in eos if isinstance(eos, list) else [eos]:
        if value is not None and value not in ids:
            ids.append(int(value))
    return ids


@contextmanager
def request_journal(generator: Any, path: str | os.PathLike) -> Iterator[None]:
    """While open, a generator that pays per request (``use_journal``) records its answered
    requests at ``path`` and reads repeated ones from it; other generators need none."""
    use = getattr(generator, "use_journal", None)
    if use is None:
        yield
        return
    use(path)
    try:
        yield
    finally:
        use(None)
