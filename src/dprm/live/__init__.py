"""Live inference: a calibrated distributional PRM driving adaptive best-of-N and beam search.

- :class:`CalibratedPRM`: PRM wrapper + calibrator; per-step quantiles, mean p and IAS budget.
- :func:`run_bon`: adaptive best-of-N (``dprm solve --mode bon``) with a fixed-N baseline.
- :func:`run_beam`: beam search with IAS-of-K / IAS-of-M (``dprm solve --mode beam``) with a
  fixed-width baseline.

Heavy dependencies (transformers, vLLM, math-verify) are imported only when a run starts.
"""

from dprm.live.beam import determine_k, determine_m
from dprm.live.beam_run import run_beam
from dprm.live.bon import run_bon
from dprm.live.calibrated_prm import CalibratedPRM, States, StepAssessment
from dprm.live.run import SolveConfig

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
