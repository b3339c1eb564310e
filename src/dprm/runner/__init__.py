"""The run layer: units of work, their state and fingerprints, and where they run.

Below both :mod:`dprm.report` (which builds the units of ``dprm reproduce`` and renders
documents) and :mod:`dprm.recipe` (a recipe's real-data stages); above the libraries the units
call (:mod:`dprm.ias`, :mod:`dprm.evaluation`, models, llm, data).

* :mod:`dprm.runner.units` -- :class:`Unit`, and the :class:`Executor` protocol;
* :mod:`dprm.runner.fingerprints` -- stable hashes of settings and of file contents;
* :mod:`dprm.runner.state` -- ``state.json``: finished units and their fingerprints;
* :mod:`dprm.runner.layout` -- the on-disk layout of a run directory;
* :mod:`dprm.runner.config` -- :class:`RunConfig`, what decides a run's outputs;
* :mod:`dprm.runner.pipeline` -- :class:`Pipeline`: stage by stage, resumable;
* :mod:`dprm.runner.record` -- ``run.json``;
* :mod:`dprm.runner.engines` -- one loaded model engine per worker process;
* :mod:`dprm.runner.executors` -- ``local``, ``ray`` and ``slurm`` executors (a registry).
"""
