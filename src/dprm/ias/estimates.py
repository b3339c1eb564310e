"""Moved to :mod:`dprm.ias.paper.estimates`; this module keeps the old import path working."""

from dprm.ias.paper.estimates import (  # noqa: F401 (re-exported)
    Estimate,
    candidate_estimates,
    estimate_from_model,
    estimate_samples,
    truth_estimate,
)

__all__ = [
    "Estimate",
    "candidate_estimates",
    "estimate_from_model",
    "estimate_samples",
    "truth_estimate",
]
