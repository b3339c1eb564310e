"""The real-data pipeline: questions -> trajectories -> rollout labels -> PRM scores and states.

Modules (each imports transformers / vLLM / math-verify only inside the functions that need
them, so ``import dprm`` stays light):

- :mod:`dprm.llm.questions`: load and normalise MATH-500, MATH (Park's every-10th), AIME 24/25
  (packaged in ``question_sets/``, offline) and Park's ``math500train`` (hub).
- :mod:`dprm.llm.prompts`: Park et al.'s prompt templates and ``"\\n\\n"`` step splitting.
- :mod:`dprm.llm.generate`: ``load_generator("transformers" | "vllm", model)``.
- :mod:`dprm.llm.grading`: ``grade_many`` / ``GradingPool`` (math-verify, hard timeouts).
- :mod:`dprm.llm.rollout`: trajectories and Monte Carlo labels with counts.
- :mod:`dprm.llm.prm`: ``load_prm`` and the PRM wrappers (one-pass scores + hidden states).
  (:mod:`dprm.llm.prm_interface`: the one-pass PRM interface and device-map sharding;
  :mod:`dprm.llm.prm_models`: checkpoint classes; :mod:`dprm.llm.park_adapter`: Park et al.'s
  calibrated LoRA adapters.)
- :mod:`dprm.llm.embed`: labels -> calibration set, best-of-N pools -> BoN set.
- :mod:`dprm.llm.shard`: ``--shard i/n``, resumable parts, merge.
- :mod:`dprm.llm.doctor`: the real checkpoints against published values (``dprm doctor``;
  Park et al.'s demo values in ``golden/``).
"""
