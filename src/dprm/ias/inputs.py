"""Moved to :mod:`dprm.ias.learnt.inputs`; this module keeps the old import path working."""

from dprm.ias.learnt.inputs import (  # noqa: F401 (re-exported)
    CalibratorInput,
    calibrator_input,
    reads_states,
)

__all__ = [
    "CalibratorInput",
    "calibrator_input",
    "reads_states",
]
