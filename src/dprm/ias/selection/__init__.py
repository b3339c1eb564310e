"""Which of the drawn candidates is the answer: the selection rules and draw orders.

* :mod:`~dprm.ias.selection.rules` -- highest / weighted / majority x last / min / product /
  calibrated weights, and each rule's accuracy for every n;
* :mod:`~dprm.ias.selection.draws` -- seeded draw orders (the same for every method) and what a
  rule picks along them.
"""
