"""Equal-cost rows of one rule on one BoN set: uniform, the oracle, ``auto``, ``auto-seq`` and
the p-oracle, each at target costs c (mean draws per question / N_max).

* **uniform**: every question gets round(c N_max) draws (to the draw: the total round(c N_max Q)
  spread as evenly as possible);
* **oracle**: the best allocation of the same total knowing every question's true accuracy
  curve under the rule (:func:`dprm.ias.learnt.allocation.concave_hull_greedy`); ``oracle`` is the
  accuracy it reaches, ``oracle_bound`` its concave-hull upper bound;
* **auto** (per calibrator): :class:`dprm.ias.learnt.auto.AutoAllocator`, learnt on a training set;
* **auto-seq** (per calibrator with candidate estimates): :mod:`dprm.ias.sequential`, scored by
  a Monte Carlo over draw orders (:mod:`dprm.ias.selection.draws`); under a detected shift, the best
  calibrator-free peer chosen on the training pools (:func:`shift_fallback_rows`);
* **oracle-p** (synthetic sets): ``auto``'s allocation on each question's *true* p.

The population oracle (``oracle-pop``) is :mod:`dprm.ias.curves.population`; the table built from all
of them is :func:`dprm.ias.curves.pays.pays_table`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dprm.ias.constants import COST_GRID, N_MAX
from dprm.ias.learnt.allocation import (
    REPORT_COSTS,
    auto_budgets,
    concave_hull_greedy,
    uniform_budgets,
)
from dprm.ias.learnt.auto import AutoAllocator, mean_budget
from dprm.ias.learnt.inputs import CalibratorInput
from dprm.ias.paper.estimates import estimate_samples
from dprm.ias.peers.curves import Curve, choose_fallback, peer_curve, training_scores
from dprm.ias.peers.methods import DrawView
from dprm.ias.selection.draws import draw_orders, outcome_accuracy, rule_outcomes
from dprm.ias.selection.rules import Candidates, RuleTable, rule_of_label
from dprm.ias.sequential.floor import SEQ_TRAIN_TRIALS, fit_sequential, training_replay

#: draw orders per question of the ``auto-seq`` Monte Carlo
SEQ_TRIALS = 32


def reference_rows(
    table: RuleTable, costs: Sequence[float] = COST_GRID, n_max: int = N_MAX
) -> pd.DataFrame:
    """Uniform and oracle rows of one rule at each target cost.

    Returns:
        columns ``rule, method (uniform | oracle), allocation (= method), target_cost, cost,
        accuracy, accuracy_se, oracle_bound`` (the hull bound; oracle rows only).
    """
    rows = []
    q = table.mean.shape[0]
    for cost in costs:
        mb = mean_budget(cost, n_max)
        uni = uniform_budgets(q, mb, n_max)
        acc, se = table.accuracy(uni)
        rows.append(("uniform", cost, uni.mean() / n_max, acc, se, np.nan))
        orc, bound = concave_hull_greedy(table.mean, mb, spend_all=False)
        acc, se = table.accuracy(orc)
        rows.append(("oracle", cost, orc.mean() / n_max, acc, se, bound))
    frame = pd.DataFrame(
        rows, columns=["method", "target_cost", "cost", "accuracy", "accuracy_se", "oracle_bound"]
    )
    frame.insert(0, "rule", table.rule)
    frame.insert(2, "allocation", frame["method"])
    return frame


def auto_rows(
    table: RuleTable,
    inputs: Sequence[CalibratorInput],
    allocator: AutoAllocator,
    costs: Sequence[float] = COST_GRID,
    n_max: int = N_MAX,
    seed: int = 0,
    shifted: bool = False,
) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """``allocation = auto`` rows of every calibrator with a training estimate at each target
    cost (one rule): its floor share is chosen on ``train``, its budgets read ``test``.

    With ``shifted`` (:func:`dprm.ias.learnt.allocation.shift_auc` above its threshold) every estimate
    falls back to uniform (floor share 1).

    Returns:
        (columns ``rule, method, allocation, target_cost, cost, accuracy, accuracy_se, floor_share``;
        label -> budgets [len(costs), Q]).
    """
    rows, budgets = [], {}
    for inp in inputs:
        if inp.train is None:
            continue
        share, _ = allocator.floor_share(inp.train, seed=seed)
        if shifted:  # the selection model was learnt on unlike questions: do not adapt
            share = 1.0
        per_cost = []
        predicted = allocator.predicted(inp.test)
        for cost in costs:
            b = allocator.budgets(inp.test, cost, share, n_max, predicted)
            acc, se = table.accuracy(b)
            rows.append((inp.label, cost, b.mean() / n_max, acc, se, share))
            per_cost.append(b)
        budgets[inp.label] = np.stack(per_cost)
    frame = pd.DataFrame(
        rows, columns=["method", "target_cost", "cost", "accuracy", "accuracy_se", "floor_share"]
    )
    frame.insert(0, "rule", table.rule)
    frame.insert(2, "allocation", "auto")
    return frame, budgets


def sequential_rows(
    cands: Candidates,
    table: RuleTable,
    weight: np.ndarray,
    inputs: Sequence[CalibratorInput],
    train_cands: Candidates,
    allocator: AutoAllocator,
    costs: Sequence[float] = REPORT_COSTS,
    n_max: int = N_MAX,
    trials: int = SEQ_TRIALS,
    seed: int = 0,
    shifted: bool = False,
    vote: bool = False,
    train_weight: np.ndarray | None = None,
) -> pd.DataFrame:
    """``allocation = auto-seq`` rows (:mod:`dprm.ias.sequential`) of every calibrator that has
    candidate estimates on both sets (:attr:`CalibratorInput.reads_candidates`), for one rule (``vote``: an answer-level vote,
    ``weighted-*`` or ``majority``; else ``highest-*``).

    When both sets carry final answers (BoN contract v2) the policy also reads each draw's
    answer. Its floor share is chosen per cost on the training pools
    (:func:`dprm.ias.sequential.floor.fit_sequential`; ``train_weight``: the rule's weights
    there, default the last score). The policy is scored by a Monte Carlo over ``trials`` draw
    orders per question (raw: ``accuracy_orders``, ``accuracy_orders_se``); ``auto`` is scored
    on the same orders, and the reported ``accuracy`` is auto's exact accuracy plus the paired
    difference ``minus_auto`` (a control variate: unbiased, with the far smaller standard error
    of the difference, ``accuracy_se`` = ``minus_auto_se``).

    When ``shifted`` the models were learnt on unlike questions and the policy does not run: it
    falls back to the best calibrator-free peer for the rule, chosen on the training pools
    (:func:`shift_fallback_rows`, the choice of ``dprm ias --peers``); ``falls_back_to`` names
    it (empty where the policy ran).

    Args:
        cands, table, weight: the test pools, the rule's exact table on them, and the rule's
            candidate weights [Q, K].
        inputs: the calibrators (those without candidate estimates on both sets are skipped).
        train_cands: the training pools.
        allocator: ``auto``'s allocator for the rule (its selection model g).

    Returns:
        columns ``rule, method, allocation, target_cost, cost, accuracy, accuracy_se, floor_share,
        minus_auto, minus_auto_se, accuracy_orders, accuracy_orders_se, falls_back_to,
        seq_trials, seq_answers`` (whether the policy read the draws' final answers: both sets
        contract v2).
    """
    orders = draw_orders(cands.size, trials, seed)
    outcomes = rule_outcomes(cands, weight, orders, vote, seed)
    train_weight = train_cands.weights["last"] if train_weight is None else train_weight
    mean_budgets = [mean_budget(c, n_max) for c in costs]
    answers = cands.answer is not None and train_cands.answer is not None
    replay = None  # the training pools' orders and outcomes, shared by every estimate
    rows = []
    fallback = None  # (peer, its rows per cost), shared by every estimate
    for inp in inputs:
        if not inp.reads_candidates:
            continue
        est, train_est = inp.test, inp.train
        predicted = allocator.predicted(est)
        if shifted:  # the models were learnt on unlike questions: the calibrator-free fallback
            if fallback is None:
                replay = replay or training_replay(
                    train_cands, train_weight, vote, SEQ_TRAIN_TRIALS, seed
                )
                fallback = shift_fallback_rows(
                    cands, train_cands, train_weight, rule_of_label(table.rule), orders, outcomes, costs,
                    n_max, seed, replay,
                )  # fmt: skip
            peer, at_cost = fallback
            for cost, (acc, se, spent) in zip(costs, at_cost, strict=True):
                auto_acc = table.accuracy(allocator.budgets(est, cost, 1.0, n_max, predicted))[0]
                rows.append((inp.label, cost, spent, acc, se, np.nan, acc - auto_acc, np.nan,
                             acc, se, peer))  # fmt: skip
            continue
        auto_share, _ = allocator.floor_share(train_est, seed=seed)
        replay = replay or training_replay(train_cands, train_weight, vote, SEQ_TRAIN_TRIALS, seed)
        fit = fit_sequential(
            allocator.model, train_cands, train_est, train_weight, costs, rule_of_label(table.rule),
            read_answers=answers, n_max=n_max, seed=seed, replay=replay,
        )  # fmt: skip
        budgets = fit.seq.budgets(
            estimate_samples(est), cands.gather(est.candidate, 0.5), cands.size, orders,
            mean_budgets, fit.floor_shares, n_max, answer=cands.answer if answers else None,
            majority=fit.majority, score=weight if fit.seq.pick is not None else None,
        )  # fmt: skip
        for j, cost in enumerate(costs):
            raw, raw_se, per = outcome_accuracy(outcomes, budgets[j])
            fixed = allocator.budgets(est, cost, auto_share, n_max, predicted)
            _, _, per_auto = outcome_accuracy(outcomes, fixed)
            diff = per - per_auto
            diff_se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else np.nan
            # control variate: auto's exact accuracy + the paired difference on common orders
            # (unbiased, as the orders' mean of auto is unbiased for its exact accuracy)
            acc, acc_se = table.accuracy(fixed)[0] + diff.mean(), diff_se
            rows.append((inp.label, cost, budgets[j].mean() / n_max, acc, acc_se,
                         fit.floor_shares[j], diff.mean(), diff_se, raw, raw_se, ""))  # fmt: skip
    frame = pd.DataFrame(
        rows,
        columns=["method", "target_cost", "cost", "accuracy", "accuracy_se", "floor_share",
                 "minus_auto", "minus_auto_se", "accuracy_orders", "accuracy_orders_se",
                 "falls_back_to"],
    )  # fmt: skip
    frame.insert(0, "rule", table.rule)
    frame.insert(2, "allocation", "auto-seq")
    return frame.assign(seq_trials=trials, seq_answers=answers)


def shift_fallback_rows(
    cands: Candidates,
    train_cands: Candidates,
    train_weight: np.ndarray,
    rule: str,
    orders: np.ndarray,
    outcomes: np.ndarray,
    costs: Sequence[float],
    n_max: int,
    seed: int,
    replay: tuple[np.ndarray, np.ndarray],
) -> tuple[str, list[tuple[float, float, float]]]:
    """What ``auto-seq`` does under a detected shift: the best calibrator-free peer for the
    rule, chosen on the training pools (:func:`dprm.ias.peers.curves.choose_fallback`, as
    ``dprm ias --peers`` chooses it), run on the test pools' draw orders.

    At each target cost the peer's curve is read at mean draws = the cost's mean budget: a
    mixture of its two neighbouring levels (linear in each question's accuracy), NaN outside
    the curve's range. Sets without final answers (BoN contract v1) fall back to ``uniform``.

    Returns:
        (the peer's name, per cost (accuracy, its standard error over questions, cost spent)).
    """
    if cands.answer is None or train_cands.answer is None:
        out = []
        for cost in costs:
            uni = uniform_budgets(len(cands), mean_budget(cost, n_max), n_max)
            acc, se, _ = outcome_accuracy(outcomes, uni)
            out.append((acc, se, uni.mean() / n_max))
        return "uniform", out
    scores = training_scores(train_cands, None)
    peer, _ = choose_fallback(
        train_cands, train_weight, rule, scores, SEQ_TRAIN_TRIALS, seed, n_max, replay
    )
    view = DrawView.from_pools(cands.answer, cands.weights["last"], cands.size, orders, n_max=n_max)
    curve = peer_curve(peer, view, outcomes, scores)
    return peer, [curve_mixture(curve, mean_budget(cost, n_max), n_max) for cost in costs]


def curve_mixture(curve: Curve, target_draws: float, n_max: int) -> tuple[float, float, float]:
    """A curve read at mean draws ``target_draws``: the mixture of its two neighbouring levels
    that spends them in expectation. Returns (accuracy, its standard error over questions,
    cost spent = mean draws / n_max); NaN outside the curve's range."""
    draws = curve.draws.mean(axis=1)
    order = np.argsort(draws, kind="stable")
    x, acc = draws[order], curve.accuracy[order]
    if target_draws < x[0] - 1e-9 or target_draws > x[-1] + 1e-9:
        return float("nan"), float("nan"), float("nan")
    j = int(np.clip(np.searchsorted(x, target_draws), 1, len(x) - 1))
    span = x[j] - x[j - 1]
    w = 0.0 if span <= 0 else float(np.clip((target_draws - x[j - 1]) / span, 0.0, 1.0))
    per = (1 - w) * acc[j - 1] + w * acc[j]  # [Q]
    se = float(per.std(ddof=1) / np.sqrt(len(per))) if len(per) > 1 else float("nan")
    return float(per.mean()), se, float(((1 - w) * x[j - 1] + w * x[j]) / n_max)


def p_oracle_rows(
    table: RuleTable, bon, allocator: AutoAllocator, costs: Sequence[float], n_max: int = N_MAX
) -> pd.DataFrame:
    """``allocation = oracle-p`` rows (synthetic sets): the allocation of ``auto`` (no floor) on
    g_n(true p_q), i.e. knowing each question's true success probability but not its pool.

    The gap between it and the oracle is pool luck (which candidates a pool happens to hold),
    out of reach of any allocation made before drawing; the gap between ``auto`` and it is
    what the calibrated estimate does not know about p.
    """
    predicted = allocator.model.expected_curve(bon.questions["true_p"].to_numpy(np.float64))
    rows = []
    for cost in costs:
        b = auto_budgets(predicted[:, :n_max], mean_budget(cost, n_max), 0.0)
        acc, se = table.accuracy(b)
        rows.append(("oracle-p", cost, b.mean() / n_max, acc, se))
    frame = pd.DataFrame(rows, columns=["method", "target_cost", "cost", "accuracy", "accuracy_se"])
    frame.insert(0, "rule", table.rule)
    frame.insert(2, "allocation", "oracle-p")
    return frame
