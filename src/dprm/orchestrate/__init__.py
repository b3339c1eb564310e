"""The experiment runs: what to run, the units of each stage, and ``dprm reproduce``.

* :mod:`dprm.orchestrate.grid` -- the grids (demo, paper, tiny) and the resolved, validated run
  configuration;
* :mod:`dprm.orchestrate.world_units` -- a synthetic world on disk and the fingerprint of a
  world's data (``synth`` units);
* :mod:`dprm.orchestrate.calibrator_units` -- train (optionally after a search) and evaluate units;
* :mod:`dprm.orchestrate.ias_units` -- the IAS sweeps and "does it pay?" rows per calibrator;
* :mod:`dprm.orchestrate.stages` -- the per-world stages in order;
* :mod:`dprm.orchestrate.reproduce` -- ``dprm reproduce``: the stages over batches of worlds, then
  the document (:mod:`dprm.report`).

A recipe (``dprm run``, :mod:`dprm.recipe`) runs its own real-data stages and then the same
train / evaluate / IAS stages and document through :func:`~dprm.orchestrate.reproduce.run_world_stages`
and :func:`~dprm.orchestrate.reproduce.finish_run`. The units are run by :mod:`dprm.runner`.
"""
