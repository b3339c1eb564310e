"""Live inference: a calibrated distributional PRM driving adaptive best-of-N and beam search.

- :class:`CalibratedPRM`: PRM wrapper + calibrator; per-step quantiles, mean p and IAS budget.
- :func:`run_bon`: adaptive best-of-N (``dprm solve --mode bon``) with a fixed-N baseline.
- :func:`run_beam`: beam search with IAS-of-K / IAS-of-M (``dprm solve --mode beam``) with a
  fixed-width baseline.

Heavy dependencies (transformers, vLLM, math-verify) are imported only when a run starts.

Names are imported from their module on first use (``dprm solve --help`` reads
:mod:`dprm.live.solve_config` alone).
"""

import importlib

#: exported name -> the module that defines it
_EXPORTS = {
    "CalibratedPRM": "dprm.live.calibrated_prm",
    "SolveConfig": "dprm.live.solve_config",
    "States": "dprm.live.calibrated_prm",
    "StepAssessment": "dprm.live.calibrated_prm",
    "determine_k": "dprm.live.beam",
    "determine_m": "dprm.live.beam",
    "run_beam": "dprm.live.beam_run",
    "run_bon": "dprm.live.bon",
}

__all__ = [
    "CalibratedPRM",
    "SolveConfig",
    "StepAssessment",
    "States",
    "determine_k",
    "determine_m",
    "run_beam",
    "run_bon",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
