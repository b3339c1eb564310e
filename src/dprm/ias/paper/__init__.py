"""The paper's rules (docs/design.md §4): budgets from a calibrated success estimate, exact and
Monte Carlo accuracy of best-of-n, the C / tau / beta sweeps, and their inputs.

* :mod:`~dprm.ias.paper.pools` -- :class:`~dprm.ias.paper.pools.Pools`, a BoN set's candidate
  pools, sorted and padded;
* :mod:`~dprm.ias.paper.estimates` -- :class:`~dprm.ias.paper.estimates.Estimate`, what the
  budget rules read from any calibrator (or the synthetic truth);
* :mod:`~dprm.ias.paper.budgets` -- success curves, the point / mixture budget rules, a greedy
  allocation under a total budget;
* :mod:`~dprm.ias.paper.accuracy` -- exact accuracy tables, exact early stopping, Monte Carlo;
* :mod:`~dprm.ias.paper.sweeps` -- the C / tau / beta / beta-cal sweeps and plain best-of-n
  (:func:`dprm.ias.run.run_ias` runs them with the equal-cost rows).
"""
