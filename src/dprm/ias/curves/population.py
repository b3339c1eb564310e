"""The population oracle (``oracle-pop``, twin test sets): each question's true accuracy-vs-n
curve under a rule, the expectation over fresh pools drawn for that question from the twin's
generative model (:func:`population_curves`), and the oracle's allocation on those curves
evaluated on the realised pools (:func:`population_oracle_rows`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pandas as pd

from dprm.data.synth.bon import draw_fresh_pool, highest_last_population_curve
from dprm.ias.constants import COST_GRID, N_MAX
from dprm.ias.learnt.allocation import concave_hull_greedy
from dprm.ias.learnt.auto import mean_budget
from dprm.ias.selection.rules import DEFAULT_TRIALS, Candidates, RuleTable, parse_rule, rule_table

#: fresh pools per question of the population oracle (its curves' Monte Carlo)
POP_POOLS = 16


@dataclass
class PopulationCurves:
    """Population accuracy-vs-n curves of one rule: E over fresh pools of the pool's exact
    (or Monte Carlo) curve. ``mean`` [Q, n_max]; ``se`` [Q, n_max] its Monte Carlo standard
    error (the spread over ``pools`` pools / sqrt(pools))."""

    rule: str
    mean: np.ndarray
    se: np.ndarray
    pools: int


def population_curves(
    bq,
    rules: Sequence[str],
    *,
    pools: int = POP_POOLS,
    n_max: int = N_MAX,
    trials: int = DEFAULT_TRIALS,
    seed: int = 0,
    exact_highest_last: bool = True,
) -> dict[str, PopulationCurves]:
    """Each question's population accuracy curve under each rule, by fresh pools.

    For n <= K, n draws without replacement from a pool of K i.i.d. candidates are n i.i.d.
    candidates, so the mean over fresh pools of a pool's exact curve is an unbiased estimate of
    the question's true curve (the expectation over pools and draws). ``*-calibrated`` rules
    need candidate hidden states and a calibrator: they are skipped. The contract rule
    ``highest-last`` has a closed form under the twin's score model
    (:func:`dprm.data.synth.bon.highest_last_population_curve`): with ``exact_highest_last`` it
    is used (``se`` 0, ``pools`` 0) instead of the pools.

    Args:
        bq: :class:`dprm.data.synth.BonQuestions` (:func:`dprm.data.synth.population.twin_questions`).
        rules: selection rules.
        pools: fresh pools per question.
        trials: Monte Carlo orders of the voting rules per pool: ``max(4, trials // pools)``
            (the pools average them further).
        seed: the voting rules' order seed.

    Returns:
        rule -> :class:`PopulationCurves` (rules that need no candidate states).
    """
    todo = [r for r in rules if parse_rule(r)[1] != "calibrated"]
    if not todo or pools < 1:
        return {}
    out = {}
    if exact_highest_last and "highest-last" in todo:  # the contract rule: exact, no pools
        sd = float(np.sqrt(1 + bq.cell.score_noise**2))
        mean = highest_last_population_curve(bq.rec.true_p, bq.prm.bon_separation, sd, n_max)
        out["highest-last"] = PopulationCurves("highest-last", mean, np.zeros_like(mean), 0)
        todo = [r for r in todo if r != "highest-last"]
    if not todo:
        return out
    steps = any(parse_rule(r)[1] in ("min", "product") for r in todo)
    total = {r: 0.0 for r in todo}
    total_sq = {r: 0.0 for r in todo}
    per_pool_trials = max(4, trials // pools)
    for k in range(pools):
        questions, responses = draw_fresh_pool(bq, k, step_scores_too=steps)
        cands = Candidates.from_bon(SimpleNamespace(questions=questions, responses=responses,
                                                    path=None))  # fmt: skip
        for r in todo:
            curve = rule_table(
                cands, r, n_max=n_max, trials=per_pool_trials, seed=seed * 7919 + k
            ).mean
            total[r] = total[r] + curve
            total_sq[r] = total_sq[r] + curve**2
    for r in todo:
        mean = total[r] / pools
        var = np.clip(total_sq[r] / pools - mean**2, 0.0, None) * pools / max(pools - 1, 1)
        out[r] = PopulationCurves(r, mean, np.sqrt(var / pools), pools)
    return out


def population_oracle_rows(
    table: RuleTable, pop: PopulationCurves, costs: Sequence[float] = COST_GRID,
    n_max: int = N_MAX,
) -> pd.DataFrame:  # fmt: skip
    """``allocation = oracle-pop`` rows: :func:`concave_hull_greedy` on the population curves
    (budget a flat curve cannot use is left unspent, as the oracle's), evaluated on the realised
    pools (``table``).

    Returns:
        columns ``rule, method, allocation, target_cost, cost, accuracy, accuracy_se, oracle_bound`` (the
        population hull value of the allocation), ``pop_curve_se`` (the mean Monte Carlo
        standard error of the population curves at the allocated n), ``pop_pools``.
    """
    rows = []
    q = pop.mean.shape[0]
    for cost in costs:
        b, bound = concave_hull_greedy(pop.mean[:, :n_max], mean_budget(cost, n_max),
                                       spend_all=False)  # fmt: skip
        acc, se = table.accuracy(b)
        curve_se = float(pop.se[np.arange(q), b - 1].mean())
        rows.append(("oracle-pop", cost, b.mean() / n_max, acc, se, bound, curve_se))
    frame = pd.DataFrame(
        rows,
        columns=["method", "target_cost", "cost", "accuracy", "accuracy_se", "oracle_bound",
                 "pop_curve_se"],
    )  # fmt: skip
    frame.insert(0, "rule", table.rule)
    frame.insert(2, "allocation", "oracle-pop")
    return frame.assign(pop_pools=pop.pools)
