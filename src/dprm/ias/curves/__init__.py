"""Evaluation at equal cost: every method's accuracy against uniform best-of-n and the oracles.

* :mod:`~dprm.ias.curves.equal_cost` -- uniform / oracle / oracle-p / ``auto`` / ``auto-seq``
  rows at target costs;
* :mod:`~dprm.ias.curves.population` -- the twin's population oracle (``oracle-pop``);
* :mod:`~dprm.ias.curves.pays` -- the "does adaptive compute pay?" table
  (:func:`~dprm.ias.curves.pays.run_pays`).

The peers' and ``auto-seq``'s cost-accuracy curves are :mod:`dprm.ias.peers.curves`.
"""
