"""One IAS run on a BoN set: the paper's sweeps (:mod:`dprm.ias.paper.sweeps`) and, given
selection rules and a training set, the equal-cost rows of every method
(:func:`dprm.ias.curves.pays.run_pays`) in one summary (:func:`run_ias`, read by ``dprm ias``
and ``dprm reproduce``)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import pandas as pd

from dprm.ias.constants import CONTRACT_RULE, DEFAULT_BETA, MC_TRIALS, N_MAX
from dprm.ias.paper.estimates import Estimate
from dprm.ias.paper.pools import Pools
from dprm.ias.paper.sweeps import run_sweeps
from dprm.threads import torch_threads


def run_ias(
    bon,
    models: dict | None = None,
    *,
    beta: float = DEFAULT_BETA,
    n_max: int = N_MAX,
    mc_trials: int = MC_TRIALS,
    seed: int = 0,
    include_base: bool = True,
    greedy: bool = False,
    rules: Sequence[str] = (),
    train_bon=None,
    extra_estimates: Sequence[Estimate] = (),
    vote_trials: int | None = None,
    sequential: bool | Collection[str] = False,
    threads: int | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Base (unless ``include_base`` is False) and every named calibrator on a BoN set.

    Args:
        bon: a :class:`dprm.data.contract.BonSet`.
        models: display name -> calibrator.
        beta: the level of the point rule for ``levels`` calibrators.
        n_max: the largest budget.
        mc_trials: Monte Carlo trials (0 skips it).
        seed: seed of the Monte Carlo.
        include_base: prepend the Base calibrator (raw PRM score) unless ``models`` has "base".
        greedy: add the ``greedy`` sweep (see :func:`sweep_rows`).
        rules: selection rules (:data:`dprm.ias.selection.rules.RULES`) whose uniform and oracle rows
            (and, with ``train_bon``, ``auto`` rows) are added; empty: none.
        train_bon: a training BoN set: adds ``allocation = auto`` rows for every calibrator and rule
            (the contract rule when ``rules`` is empty).
        extra_estimates: further estimates (e.g. the synthetic truth) swept like the models.
        vote_trials: Monte Carlo orders of the voting rules (default ``max(mc_trials, 64)``).
        sequential: with ``train_bon`` (contract v2 sets), add ``allocation = auto-seq`` rows
            (:mod:`dprm.ias.sequential`) for every calibrator with candidate estimates (or,
            given a collection of method names, for those only: it is slow).
        threads: torch threads for this call only (default: the CLI's ``--threads`` policy,
            :mod:`dprm.threads`; the calibrators' quantiles are the torch work).

    Returns:
        (summary, budgets) as :func:`run_sweeps`; the summary's ``rule`` column names the
        selection rule (the contract sweeps: ``highest-last``), and rules' rows add
        ``accuracy_se``, ``oracle_bound`` and ``floor_share``.
    """
    with torch_threads(threads):
        return _run_ias(
            bon, models, beta=beta, n_max=n_max, mc_trials=mc_trials, seed=seed,
            include_base=include_base, greedy=greedy, rules=rules, train_bon=train_bon,
            extra_estimates=extra_estimates, vote_trials=vote_trials, sequential=sequential,
        )  # fmt: skip


def _run_ias(
    bon, models, *, beta, n_max, mc_trials, seed, include_base, greedy, rules, train_bon,
    extra_estimates, vote_trials, sequential,
) -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    """:func:`run_ias` under its thread setting."""
    from dprm.ias.curves.pays import run_pays
    from dprm.ias.learnt.inputs import CalibratorInput, calibrator_input, reads_states
    from dprm.ias.paper.estimates import truth_estimate
    from dprm.models.raw_score import RawScoreCalibrator

    named = dict(models or {})
    if include_base and "base" not in named:
        named = {"base": RawScoreCalibrator(bon.hidden_dim), **named}
    rules = tuple(rules) or ((CONTRACT_RULE,) if train_bon is not None else ())
    calibrated_rules = any(r.endswith("-calibrated") for r in rules)
    inputs = []
    for name, model in named.items():
        test_candidates = reads_states(model, bon)
        # the training candidates: a *-calibrated rule weights the training pools with them,
        # auto-seq reads them
        train_candidates = train_bon is not None and (
            (calibrated_rules and test_candidates)
            or (bool(sequential) and reads_states(model, train_bon))
        )
        inputs.append(
            calibrator_input(
                model,
                bon,
                name,
                train_bon=train_bon,
                beta=beta,
                test_candidates=test_candidates,
                train_candidates=train_candidates,
            )  # fmt: skip
        )
    for est in extra_estimates:  # e.g. the synthetic truth, on the training set too
        train = None
        if train_bon is not None and est.method == "truth":
            train = truth_estimate(train_bon)
        inputs.append(CalibratorInput(est.method, est, train))
    pools = Pools.from_bon(bon)
    summary, budgets = run_sweeps(
        pools, [i.test for i in inputs], n_max=n_max, mc_trials=mc_trials, seed=seed, greedy=greedy
    )
    if rules:
        extra = run_pays(
            bon,
            inputs,
            rules=rules,
            train_bon=train_bon,
            n_max=n_max,
            trials=vote_trials or max(mc_trials, 64),
            seed=seed,
            sequential=sequential,
        )
        extra["C"] = np.nan
        extra["accuracy_mc"] = np.nan
        extra["n_questions"] = len(pools)
        summary = pd.concat([summary, extra], ignore_index=True)
    return summary, budgets
