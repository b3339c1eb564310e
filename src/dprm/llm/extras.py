"""The optional extras dprm's stages need, and whether this installation has them.

One table for ``dprm doctor`` (which lists them) and for the preflight of ``dprm run`` (which
names the missing ones a recipe needs before any unit runs). Versions are read from the
installed distributions' metadata: nothing is imported, so checking is instant.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Extra:
    """An optional package: its import name, distribution, pip extra and what needs it."""

    module: str
    distribution: str
    extra: str
    needed_for: str

    @property
    def install(self) -> str:
        """How to get it."""
        return f"pip install 'dprm[{self.extra}]'"


#: every optional package a stage may need, by name (``dprm doctor`` lists them in this order)
EXTRAS: dict[str, Extra] = {
    "transformers": Extra("transformers", "transformers", "llm", "PRMs and generation"),
    "math_verify": Extra("math_verify", "math-verify", "llm", "grading answers"),
    "datasets": Extra("datasets", "datasets", "llm", "hub question sets (math500train)"),
    "peft": Extra("peft", "peft", "llm", "Park et al.'s adapters"),
    "vllm": Extra("vllm", "vllm", "vllm", "the vllm backend (CUDA GPU)"),
    "httpx": Extra("httpx", "httpx", "llm", "the openai backend (a served generator)"),
    "optuna": Extra("optuna", "optuna", "tune", "dprm tune, --method best-tuned, tune_trials"),
    "ray": Extra("ray", "ray", "ray", "--executor ray"),
    "submitit": Extra("submitit", "submitit", "slurm", "--executor slurm"),
}


def installed_version(name: str) -> str | None:
    """The installed version of extra ``name`` (a key of :data:`EXTRAS`), None if missing."""
    extra = EXTRAS[name]
    try:
        if importlib.util.find_spec(extra.module) is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        return importlib.metadata.version(extra.distribution)
    except importlib.metadata.PackageNotFoundError:
        return "installed"


def extras_status() -> dict[str, str | None]:
    """Every extra -> its installed version, or None when it is missing."""
    return {name: installed_version(name) for name in EXTRAS}
