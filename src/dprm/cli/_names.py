"""Names that ``--help`` pages list, written out so that printing help imports no library.

The calibrator registry (:data:`dprm.models.REGISTRY`) loads torch and the synthetic worlds'
module loads pandas; a parser must not. tests/cli/test_help.py checks that each tuple here is
exactly the library's list, so a new method, preset or size fails a test until it is added.
"""

from __future__ import annotations

#: ``dprm.models.REGISTRY``'s names, sorted (``dprm train --method``)
METHODS = (
    "base",
    "binomial",
    "conformal",
    "isotonic",
    "mono",
    "ot",
    "park-qr",
    "platt",
    "qr",
)

#: ``dprm.llm.generate.GENERATORS``'s names, in their order (``--backend`` of generate, rollout,
#: solve)
GENERATION_BACKENDS = ("transformers", "vllm", "openai")

#: ``dprm.data.synth.GENERATORS`` and ``PRMS``, in their order (``dprm synth --preset``)
SYNTH_GENERATORS = (
    "llama-3.2-1b",
    "llama-3.1-8b",
    "qwen-2.5-1.5b",
    "qwen-2.5-7b",
    "r1-llama-8b",
    "r1-qwen-7b",
)
SYNTH_PRMS = ("qwen-prm", "reasoneval", "shepherd")
#: ``dprm.data.synth.fitted_presets.fitted_preset_names()``: the best-of-N twin fitted to
#: published best-of-N numbers (``dprm synth --preset``)
SYNTH_FITTED = (
    "qwen2.5-math-7b-instruct__qwen2.5-math-prm-7b",
    "qwen2.5-math-7b-instruct__rlhflow-prm-deepseek-8b",
)
#: ``dprm.data.synth.SIZES``, sorted (``dprm synth --size``)
SYNTH_SIZES = ("demo", "paper", "tiny")


def synth_presets() -> list[str]:
    """``dprm.data.synth.preset_names()``: ``demo`` and every ``GENERATOR__PRM``."""
    return ["demo"] + [f"{g}__{p}" for p in SYNTH_PRMS for g in SYNTH_GENERATORS]


def synth_fitted_presets() -> list[str]:
    """``dprm.data.synth.fitted_presets.fitted_preset_names()``."""
    return list(SYNTH_FITTED)
