"""Allocations learnt on a training BoN set, every budget fixed before drawing.

* :mod:`~dprm.ias.learnt.inputs` -- :class:`~dprm.ias.learnt.inputs.CalibratorInput`, one
  calibrator's estimates on the test and training sets;
* :mod:`~dprm.ias.learnt.allocation` -- concave-hull greedy (the oracle), the selection-accuracy
  model, ``auto`` budgets with a cross-fitted uniform floor, the label-free shift check;
* :mod:`~dprm.ias.learnt.auto` -- ``auto`` (:class:`~dprm.ias.learnt.auto.AutoAllocator`).

The allocation that also reads the draws as they arrive (``auto-seq``) is
:mod:`dprm.ias.sequential`.
"""
