"""Does adaptive compute pay? Uniform best-of-n per rule, the oracle's headroom, and ``auto``.

At a target cost c (mean draws per question / N_max), on one BoN set and one selection rule:

* **uniform**: every question gets round(c N_max) draws (to the draw: the total round(c N_max Q)
  spread as evenly as possible);
* **oracle**: the best allocation of the same total knowing every question's true accuracy
  curve under the rule (:func:`dprm.ias.allocation.concave_hull_greedy`); ``oracle`` is the
  accuracy it reaches, ``oracle_bound`` its concave-hull upper bound (equal when the curves are
  concave); headroom = oracle - uniform;
* **auto** (per calibrator): the allocation of :mod:`dprm.ias.allocation` on curves predicted
  from the calibrated distribution, with the selection-accuracy model and the uniform floor
  share learnt on a *training* BoN set only;
* **oracle-pop** (twin test sets): the oracle's allocation on each question's *population*
  accuracy curve under the rule, the expectation over fresh pools drawn for that question from
  the twin's generative model (its latents fixed; :func:`population_curves`, Monte Carlo over
  ``POP_POOLS`` pools with a standard error), evaluated on the realised pools like every other
  method. ``oracle`` knows the realised pool (pool luck: at n = 64 it knows the answer);
  ``oracle-pop`` knows every question's true accuracy-vs-n curve, which is the issue's oracle.
  Both headrooms are reported (``headroom``: oracle - uniform; ``headroom_pop``: oracle-pop -
  uniform);
* **auto-seq** (per calibrator with candidate estimates, every rule, with
  ``sequential=True``): :mod:`dprm.ias.sequential`, which also reads the drawn candidates'
  calibrated estimates and (contract v2) final answers, from a floor share chosen on the
  training pools, uniform under a detected shift; a Monte Carlo over draw orders
  (``accuracy_se``), with its paired difference to ``auto`` on the same orders (``minus_auto``,
  ``minus_auto_se``);
* **oracle-p** (synthetic sets): ``auto``'s allocation on each question's *true* success
  probability (not its pool): what question-level knowledge can reach;
* **C rule** (per calibrator): the paper's C sweep, its accuracy linearly interpolated along its
  (cost, accuracy) points at c (a mixture of the two neighbouring C allocations reaches it in
  expectation); empty where c lies outside the sweep's cost range.

``share`` = (method - uniform) / headroom, where headroom > 0; ``share_pop`` likewise on
``headroom_pop``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pandas as pd

from dprm.ias.allocation import (
    REPORT_COSTS,
    SHIFT_AUC,
    SelectionModel,
    auto_budgets,
    choose_floor_share,
    concave_hull_greedy,
    shift_auc,
    uniform_budgets,
)
from dprm.ias.constants import N_MAX
from dprm.ias.estimates import Estimate, estimate_samples
from dprm.ias.rules import (
    CONTRACT_RULE,
    DEFAULT_TRIALS,
    Candidates,
    RuleTable,
    parse_rule,
    rule_table,
    uses_answers,
)
from dprm.ias.sequential import (
    SequentialAuto,
    draw_orders,
    order_outcomes,
    outcome_accuracy,
    vote_order_outcomes,
)

#: target costs of the uniform / oracle / auto rows of ias.csv (curves for the figures)
COST_GRID = (0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5)
PAYS_COLUMNS = ["rule", "method", "kind", "cost", "accuracy", "accuracy_se"]
#: fresh pools per question of the population oracle (its curves' Monte Carlo)
POP_POOLS = 16
#: draw orders per question of the ``auto-seq`` Monte Carlo
SEQ_TRIALS = 32
#: the uniform floor shares ``auto-seq`` chooses from, per rule and target cost, on the
#: training pools (:func:`sequential_floor_shares`; 1: uniform)
SEQ_FLOOR_SHARES = (0.0, 0.25, 0.5, 1.0)
#: draw orders per training question of that choice
SEQ_TRAIN_TRIALS = 8


def _mean_budget(cost: float, n_max: int) -> float:
    return float(np.clip(cost * n_max, 1.0, n_max))


def reference_rows(
    table: RuleTable, costs: Sequence[float] = COST_GRID, n_max: int = N_MAX
) -> pd.DataFrame:
    """Uniform and oracle rows of one rule at each target cost.

    Returns:
        columns ``rule, method (uniform | oracle), sweep (= method), cost, level (target cost),
        accuracy, accuracy_se, oracle_bound`` (the hull bound; oracle rows only).
    """
    rows = []
    q = table.mean.shape[0]
    for cost in costs:
        mb = _mean_budget(cost, n_max)
        uni = uniform_budgets(q, mb, n_max)
        acc, se = table.accuracy(uni)
        rows.append(("uniform", cost, uni.mean() / n_max, acc, se, np.nan))
        orc, bound = concave_hull_greedy(table.mean, mb, spend_all=False)
        acc, se = table.accuracy(orc)
        rows.append(("oracle", cost, orc.mean() / n_max, acc, se, bound))
    frame = pd.DataFrame(
        rows, columns=["method", "level", "cost", "accuracy", "accuracy_se", "oracle_bound"]
    )
    frame.insert(0, "rule", table.rule)
    frame.insert(2, "sweep", frame["method"])
    return frame


class AutoAllocator:
    """``auto`` for one rule: fitted on a training BoN set, applied to any estimate.

    Args:
        train_table: the rule's true accuracy curves on the training pools [Q_train, n_max].
        train_share: [Q_train] the training pools' share of correct candidates.
    """

    def __init__(self, train_table: RuleTable, train_share: np.ndarray):
        self.curves = np.asarray(train_table.mean, dtype=np.float64)
        self.share = np.asarray(train_share, dtype=np.float64)
        self.model = SelectionModel.fit(self.share, self.curves)

    def floor_share(self, train_estimate: Estimate, seed: int = 0) -> tuple[float, dict]:
        """The uniform floor share for a calibrator, by cross-fitting on the training pools."""
        return choose_floor_share(
            self.share, self.curves, estimate_samples(train_estimate), seed=seed
        )

    def predicted(self, estimate: Estimate) -> np.ndarray:
        """Predicted accuracy-vs-n curves of the selected answer [Q, n_max] for an estimate."""
        return self.model.expected_curve(estimate_samples(estimate))

    def budgets(
        self,
        estimate: Estimate,
        cost: float,
        floor_share: float,
        n_max: int = N_MAX,
        predicted: np.ndarray | None = None,
    ):
        """The ``auto`` budgets [Q] of a test estimate at a target cost (``predicted``: the
        curves of :meth:`predicted`, if the caller already has them)."""
        predicted = self.predicted(estimate) if predicted is None else predicted
        return auto_budgets(predicted[:, :n_max], _mean_budget(cost, n_max), floor_share)


def auto_rows(
    table: RuleTable,
    estimates: Sequence[Estimate],
    train_estimates: Mapping[str, Estimate],
    allocator: AutoAllocator,
    costs: Sequence[float] = COST_GRID,
    n_max: int = N_MAX,
    seed: int = 0,
    shifted: bool = False,
) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """``sweep = auto`` rows of every estimate at each target cost (one rule).

    With ``shifted`` (:func:`dprm.ias.allocation.shift_auc` above its threshold) every estimate
    falls back to uniform (floor share 1).

    Returns:
        (columns ``rule, method, sweep, level, cost, accuracy, accuracy_se, floor_share``;
        method -> budgets [len(costs), Q]).
    """
    rows, budgets = [], {}
    for est in estimates:
        share, _ = allocator.floor_share(train_estimates[est.method], seed=seed)
        if shifted:  # the selection model was learnt on unlike questions: do not adapt
            share = 1.0
        per_cost = []
        predicted = allocator.predicted(est)
        for cost in costs:
            b = allocator.budgets(est, cost, share, n_max, predicted)
            acc, se = table.accuracy(b)
            rows.append((est.method, cost, b.mean() / n_max, acc, se, share))
            per_cost.append(b)
        budgets[est.method] = np.stack(per_cost)
    frame = pd.DataFrame(
        rows, columns=["method", "level", "cost", "accuracy", "accuracy_se", "floor_share"]
    )
    frame.insert(0, "rule", table.rule)
    frame.insert(2, "sweep", "auto")
    return frame, budgets


def rule_outcomes(
    cands: Candidates, weight: np.ndarray, orders: np.ndarray, vote: bool, seed: int
) -> np.ndarray:
    """The rule's pick correctness after each n draws of each order [T, Q, K]: an answer-level
    vote (``vote``) or the ``highest`` pick by ``weight`` [Q, K]."""
    if vote:
        votes = np.where(np.isfinite(weight), weight, 0.0)
        group_correct = cands.answer_correct()
        return vote_order_outcomes(cands.answer, votes, group_correct, cands.size, orders, seed)
    return order_outcomes(weight, cands.correct, orders)


def sequential_floor_shares(
    seq: SequentialAuto,
    train_cands: Candidates,
    train_est: Estimate,
    train_weight: np.ndarray,
    costs: Sequence[float],
    *,
    vote: bool = False,
    majority: bool = False,
    n_max: int = N_MAX,
    trials: int = SEQ_TRAIN_TRIALS,
    seed: int = 0,
    replay: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[list[float], np.ndarray]:
    """The floor share of ``auto-seq`` at each target cost, chosen on the training pools.

    The policy runs on the training questions (their calibrated priors, candidate estimates
    and, when ``seq`` reads answers, answers) over ``trials`` draw orders, once per share of
    :data:`SEQ_FLOOR_SHARES`, and the share of the highest accuracy under the rule wins (ties:
    the larger share, nearer uniform). Where the policy does not pay on the training pools
    (a weak calibrator, a rule whose curves it models poorly) this sends it to uniform.

    Args:
        seq: the fitted policy; train_cands, train_est (``candidate`` set): the training pools
            and the calibrator's estimate on them; train_weight: the rule's candidate weights
            on them [Q, K].
        majority: the rule is a majority vote (with answers: the race index,
            :meth:`dprm.ias.sequential.SequentialPolicy.race_wins`).
        replay: the training pools' draw orders and the rule's outcomes on them
            (:func:`training_replay`), when the caller has them (they do not depend on the
            calibrator).

    Returns:
        (share per cost, training accuracy [len(costs), len(SEQ_FLOOR_SHARES)]).
    """
    orders, outcomes = replay or training_replay(train_cands, train_weight, vote, trials, seed)
    mean_budgets = [_mean_budget(c, n_max) for c in costs]
    answers = train_cands.answer if seq.answers is not None else None
    pairs = [(mb, share) for share in SEQ_FLOOR_SHARES for mb in mean_budgets]
    budgets = seq.budgets(
        estimate_samples(train_est), train_cands.gather(train_est.candidate, 0.5),
        train_cands.size, orders, [mb for mb, _ in pairs], [sh for _, sh in pairs], n_max,
        answer=answers, majority=majority and answers is not None,
    )  # fmt: skip
    acc = np.array([outcome_accuracy(outcomes, b)[0] for b in budgets])
    acc = acc.reshape(len(SEQ_FLOOR_SHARES), len(costs)).T  # [cost, share]
    best = [SEQ_FLOOR_SHARES[int(np.flatnonzero(row >= row.max() - 1e-12).max())] for row in acc]
    return best, acc


def training_replay(
    train_cands: Candidates, train_weight: np.ndarray, vote: bool, trials: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Draw orders of the training pools (not the test set's: seed + 1) and the rule's outcomes
    on them, for :func:`sequential_floor_shares`."""
    orders = draw_orders(train_cands.size, trials, seed + 1)
    return orders, rule_outcomes(train_cands, train_weight, orders, vote, seed + 1)


def sequential_rows(
    cands: Candidates,
    table: RuleTable,
    weight: np.ndarray,
    estimates: Sequence[Estimate],
    train_cands: Candidates,
    train_estimates: Mapping[str, Estimate],
    allocator: AutoAllocator,
    costs: Sequence[float] = REPORT_COSTS,
    n_max: int = N_MAX,
    trials: int = SEQ_TRIALS,
    seed: int = 0,
    shifted: bool = False,
    vote: bool = False,
    train_weight: np.ndarray | None = None,
) -> pd.DataFrame:
    """``sweep = auto-seq`` rows (:mod:`dprm.ias.sequential`) of every estimate that has
    candidate estimates on both sets, for one rule (``vote``: an answer-level vote,
    ``weighted-*`` or ``majority``; else ``highest-*``).

    When both sets carry final answers (BoN contract v2) the policy also reads each draw's
    answer. Its floor share is chosen per cost on the training pools
    (:func:`sequential_floor_shares`; ``train_weight``: the rule's weights there, default the
    last score). When ``shifted`` its budgets are uniform best-of-N's, and ``accuracy`` is the
    uniform row's. The
    policy is scored by a Monte Carlo over ``trials`` draw orders per question (raw:
    ``accuracy_orders``, ``accuracy_orders_se``); ``auto`` is scored on the same orders, and the
    reported ``accuracy`` is auto's exact accuracy plus the paired difference ``minus_auto``
    (a control variate: unbiased, with the far smaller standard error of the difference,
    ``accuracy_se`` = ``minus_auto_se``).

    Args:
        cands, table, weight: the test pools, the rule's exact table on them, and the rule's
            candidate weights [Q, K].
        estimates: test estimates (``candidate`` [R] set); train_estimates: the same methods on
            the training set (``candidate`` set).
        allocator: ``auto``'s allocator for the rule (its selection model g).

    Returns:
        columns ``rule, method, sweep, level, cost, accuracy, accuracy_se, floor_share,
        minus_auto, minus_auto_se, accuracy_orders, accuracy_orders_se, seq_trials,
        seq_answers`` (whether the policy read the draws' final answers: both sets contract v2).
    """
    orders = draw_orders(cands.size, trials, seed)
    outcomes = rule_outcomes(cands, weight, orders, vote, seed)
    train_weight = train_cands.weights["last"] if train_weight is None else train_weight
    mean_budgets = [_mean_budget(c, n_max) for c in costs]
    answers = cands.answer is not None and train_cands.answer is not None
    majority = answers and table.rule == "majority"  # the race index of the vote
    replay = None  # the training pools' orders and outcomes, shared by every estimate
    rows = []
    for est in estimates:
        train_est = train_estimates.get(est.method)
        if est.candidate is None or train_est is None or train_est.candidate is None:
            continue
        if shifted:  # the models were learnt on unlike questions: exactly uniform best-of-N
            shares, auto_share = [1.0] * len(costs), 1.0
            uniform = [uniform_budgets(len(cands), mb, n_max) for mb in mean_budgets]
            budgets = np.stack([np.broadcast_to(u, (len(orders), len(u))) for u in uniform])
        else:
            auto_share, _ = allocator.floor_share(train_est, seed=seed)
            seq = SequentialAuto.fit(
                allocator.model,
                estimate_samples(train_est),
                train_cands.gather(train_est.candidate, 0.5),
                train_cands.correct,
                train_cands.row >= 0,
                train_cands.answer if answers else None,
            )
            replay = replay or training_replay(
                train_cands, train_weight, vote, SEQ_TRAIN_TRIALS, seed
            )
            shares, _ = sequential_floor_shares(
                seq, train_cands, train_est, train_weight, costs, vote=vote, majority=majority,
                n_max=n_max, seed=seed, replay=replay,
            )  # fmt: skip
            budgets = seq.budgets(
                estimate_samples(est), cands.gather(est.candidate, 0.5), cands.size, orders,
                mean_budgets, shares, n_max, answer=cands.answer if answers else None,
                majority=majority,
            )  # fmt: skip
        predicted = allocator.predicted(est)
        for j, cost in enumerate(costs):
            share = shares[j]
            raw, raw_se, per = outcome_accuracy(outcomes, budgets[j])
            fixed = allocator.budgets(est, cost, auto_share, n_max, predicted)
            _, _, per_auto = outcome_accuracy(outcomes, fixed)
            diff = per - per_auto
            diff_se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else np.nan
            # control variate: auto's exact accuracy + the paired difference on common orders
            # (unbiased, as the orders' mean of auto is unbiased for its exact accuracy)
            acc, acc_se = table.accuracy(fixed)[0] + diff.mean(), diff_se
            if shifted:  # uniform: its exact (or the table's Monte Carlo) accuracy
                acc, acc_se = table.accuracy(budgets[j, 0])
            rows.append((est.method, cost, budgets[j].mean() / n_max, acc, acc_se, share,
                         diff.mean(), diff_se, raw, raw_se))  # fmt: skip
    frame = pd.DataFrame(
        rows,
        columns=["method", "level", "cost", "accuracy", "accuracy_se", "floor_share",
                 "minus_auto", "minus_auto_se", "accuracy_orders", "accuracy_orders_se"],
    )  # fmt: skip
    frame.insert(0, "rule", table.rule)
    frame.insert(2, "sweep", "auto-seq")
    return frame.assign(seq_trials=trials, seq_answers=answers)


def p_oracle_rows(
    table: RuleTable, bon, allocator: AutoAllocator, costs: Sequence[float], n_max: int = N_MAX
) -> pd.DataFrame:
    """``sweep = oracle-p`` rows (synthetic sets): the allocation of ``auto`` (no floor) on
    g_n(true p_q), i.e. knowing each question's true success probability but not its pool.

    The gap between it and the oracle is pool luck (which candidates a pool happens to hold),
    out of reach of any allocation made before drawing; the gap between ``auto`` and it is
    what the calibrated estimate does not know about p.
    """
    predicted = allocator.model.expected_curve(bon.questions["true_p"].to_numpy(np.float64))
    rows = []
    for cost in costs:
        b = auto_budgets(predicted[:, :n_max], _mean_budget(cost, n_max), 0.0)
        acc, se = table.accuracy(b)
        rows.append(("oracle-p", cost, b.mean() / n_max, acc, se))
    frame = pd.DataFrame(rows, columns=["method", "level", "cost", "accuracy", "accuracy_se"])
    frame.insert(0, "rule", table.rule)
    frame.insert(2, "sweep", "oracle-p")
    return frame


@dataclass
class PopulationCurves:
    """Population accuracy-vs-n curves of one rule: E over fresh pools of the pool's exact
    (or Monte Carlo) curve. ``mean`` [Q, n_max]; ``se`` [Q, n_max] its Monte Carlo standard
    error (the spread over ``pools`` pools / sqrt(pools))."""

    rule: str
    mean: np.ndarray
    se: np.ndarray
    pools: int


def twin_questions(bon):
    """The replayed question model of a twin *test* BoN set, or None for any other set.

    A set written by :func:`dprm.data.synth.write_world` names its preset, size, seed and split
    in ``meta``; the replay is checked against the set's ``true_p`` (a mismatch, e.g. a world
    written by another version of the twin, gives None rather than a wrong oracle).
    """
    meta = getattr(bon, "meta", None) or {}
    if meta.get("source") != "dprm synth" or "true_p" not in bon.questions.columns:
        return None
    from dprm.data.synth import SIZES, replay_bon_questions

    size, split = meta.get("size"), meta.get("split")
    if size not in SIZES or split not in [s.name for s in SIZES[size].splits]:
        return None
    if SIZES[size].splits[[s.name for s in SIZES[size].splits].index(split)].n_bon_questions == 0:
        return None  # a training split's pools come from other streams
    bq = replay_bon_questions(meta["preset"], split, size, int(meta["seed"]))
    stored = bon.questions["true_p"].to_numpy(np.float32)
    if len(stored) != len(bq.rec.true_p) or not np.array_equal(
        stored, bq.rec.true_p.astype(np.float32)
    ):
        return None
    return bq


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
        bq: :class:`dprm.data.synth.BonQuestions` (:func:`twin_questions`).
        rules: selection rules.
        pools: fresh pools per question.
        trials: Monte Carlo orders of the voting rules per pool: ``max(4, trials // pools)``
            (the pools average them further).
        seed: the voting rules' order seed.

    Returns:
        rule -> :class:`PopulationCurves` (rules that need no candidate states).
    """
    from dprm.data.synth.bon import draw_fresh_pool, highest_last_population_curve

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
    """``sweep = oracle-pop`` rows: :func:`concave_hull_greedy` on the population curves
    (budget a flat curve cannot use is left unspent, as the oracle's), evaluated on the realised
    pools (``table``).

    Returns:
        columns ``rule, method, sweep, level, cost, accuracy, accuracy_se, oracle_bound`` (the
        population hull value of the allocation), ``pop_curve_se`` (the mean Monte Carlo
        standard error of the population curves at the allocated n), ``pop_pools``.
    """
    rows = []
    q = pop.mean.shape[0]
    for cost in costs:
        b, bound = concave_hull_greedy(pop.mean[:, :n_max], _mean_budget(cost, n_max),
                                       spend_all=False)  # fmt: skip
        acc, se = table.accuracy(b)
        curve_se = float(pop.se[np.arange(q), b - 1].mean())
        rows.append(("oracle-pop", cost, b.mean() / n_max, acc, se, bound, curve_se))
    frame = pd.DataFrame(
        rows,
        columns=["method", "level", "cost", "accuracy", "accuracy_se", "oracle_bound",
                 "pop_curve_se"],
    )  # fmt: skip
    frame.insert(0, "rule", table.rule)
    frame.insert(2, "sweep", "oracle-pop")
    return frame.assign(pop_pools=pop.pools)


def table_weight(cands: Candidates, rule: str, calibrated: np.ndarray | None) -> np.ndarray:
    """The candidate weights [Q, K] a rule ranks (``highest-*``) or votes (``weighted-*``:
    the weight; ``majority``: 1) by, -inf padding."""
    weight_name = parse_rule(rule)[1]
    if weight_name == "calibrated":
        return np.where(cands.row >= 0, calibrated, -np.inf)
    if weight_name == "one":
        return np.where(cands.row >= 0, 1.0, -np.inf)
    return cands.weights[weight_name]


def pool_share(cands: Candidates) -> np.ndarray:
    """[Q] share of correct candidates in each pool."""
    return cands.correct.sum(axis=1) / cands.size


def pays_table(
    rows: pd.DataFrame, costs: Sequence[float] = REPORT_COSTS, *, c_rule: str = CONTRACT_RULE
) -> pd.DataFrame:
    """The "does it pay?" table from IAS rows (``ias_full.csv`` of one world and split, methods
    concatenated): uniform and oracle per rule, auto per (rule, calibrator), the C rule per
    calibrator (selection ``c_rule``), each at every cost in ``costs``.

    Returns:
        columns ``rule, method, kind (uniform | oracle | oracle-pop | oracle-p | auto | auto-seq
        | C), cost,
        accuracy, accuracy_se, headroom, gain (over uniform, same rule), share (gain /
        headroom)``, then ``headroom_pop`` (oracle-pop - uniform) and ``share_pop`` (gain /
        headroom_pop) where the set has oracle-pop rows (twin test sets), else NaN.
    """
    rows = rows.copy()
    if "rule" not in rows.columns:
        rows["rule"] = c_rule
    rows["rule"] = rows["rule"].fillna(c_rule)
    if "accuracy_se" not in rows.columns:
        rows["accuracy_se"] = np.nan
    out = []
    for cost in costs:
        at = rows[
            np.isclose(rows["level"].astype(float), cost)
            & rows["sweep"].isin(
                ["uniform", "oracle", "oracle-pop", "oracle-p", "auto", "auto-seq"]
            )
        ]
        for _, r in at.iterrows():
            out.append((r["rule"], r["method"], r["sweep"], cost, r["accuracy"], r["accuracy_se"]))
        c_rows = rows[rows["sweep"] == "C"]
        for method, grp in c_rows.groupby("method", sort=False):
            grp = grp.sort_values("cost")
            x, y = grp["cost"].to_numpy(float), grp["accuracy"].to_numpy(float)
            acc = float(np.interp(cost, x, y)) if x.min() <= cost <= x.max() else np.nan
            out.append((c_rule, method, "C", cost, acc, np.nan))
    table = pd.DataFrame(out, columns=PAYS_COLUMNS)
    ref = table[table["kind"].isin(["uniform", "oracle", "oracle-pop"])].pivot_table(
        index=["rule", "cost"], columns="kind", values="accuracy"
    )
    if "oracle-pop" not in ref.columns:
        ref["oracle-pop"] = np.nan
    merged = table.join(ref, on=["rule", "cost"])
    merged["headroom"] = merged["oracle"] - merged["uniform"]
    merged["gain"] = merged["accuracy"] - merged["uniform"]

    def share_of(headroom: pd.Series) -> np.ndarray:
        return np.where(headroom > 1e-9, merged["gain"] / headroom.where(headroom > 1e-9), np.nan)

    merged["share"] = share_of(merged["headroom"])
    merged["headroom_pop"] = merged["oracle-pop"] - merged["uniform"]
    merged["share_pop"] = share_of(merged["headroom_pop"])
    return merged.drop(columns=["oracle", "uniform", "oracle-pop"])


def run_pays(
    bon,
    estimates: Sequence[Estimate],
    *,
    rules: Sequence[str] = (CONTRACT_RULE,),
    train_bon=None,
    train_estimates: Mapping[str, Estimate] | None = None,
    calibrated: Mapping[str, np.ndarray] | None = None,
    costs: Sequence[float] = COST_GRID,
    n_max: int = N_MAX,
    trials: int = DEFAULT_TRIALS,
    seed: int = 0,
    population_pools: int = POP_POOLS,
    sequential: bool | Collection[str] = False,
    seq_trials: int = SEQ_TRIALS,
    references: bool = True,
) -> pd.DataFrame:
    """Uniform, oracle and (with a training set) ``auto`` rows of every rule on one BoN set.

    Args:
        bon: the test BoN set.
        estimates: the calibrators' question estimates on ``bon`` (for ``auto``).
        rules: selection rules (:data:`dprm.ias.rules.RULES`); a ``*-calibrated`` rule runs
            once per entry of ``calibrated``, named ``rule[method]``.
        train_bon: the training BoN set ``auto`` learns on; None: no auto rows.
        train_estimates: method -> estimate on ``train_bon`` (required with ``train_bon``).
        calibrated: method -> candidate estimates [R] on ``bon`` (``*-calibrated`` rules), and
            with a ``train_bon``, method -> on ``train_bon`` under key ``"train:" + method``.
        costs: target costs.
        trials: Monte Carlo orders of the voting rules; seed: their seed.
        population_pools: fresh pools per question of the population oracle (``oracle-pop``
            rows, twin test sets only; 0: none).
        sequential: add ``auto-seq`` rows (True: of every estimate, a collection of methods:
            of those only, as it is slow; every rule; estimates whose ``candidate`` is set,
            here and in ``train_estimates``), at :data:`REPORT_COSTS` within ``costs``;
            seq_trials: its draw orders per question.
        references: False: only the calibrators' own rows (``auto``, ``auto-seq``, and every
            row of a ``*-calibrated`` rule weighted by their estimates), without the rows that
            do not depend on them (uniform, oracle, oracle-pop and oracle-p of the other rules),
            which a caller computing them once per set skips here.

    Returns:
        rows with ``rule, method, sweep, level, cost, accuracy, accuracy_se, oracle_bound,
        floor_share`` (and ``pop_curve_se``, ``pop_pools`` on oracle-pop rows).
    """
    cands = Candidates.from_bon(bon)
    train_cands = Candidates.from_bon(train_bon) if train_bon is not None else None
    frames = []
    pop = {}
    bq = twin_questions(bon) if population_pools > 0 and references else None
    if bq is not None:
        pop = population_curves(
            bq, rules, pools=population_pools, n_max=n_max, trials=trials, seed=seed
        )
    auc = np.nan
    if train_bon is not None:
        auc = shift_auc(train_bon.hidden, bon.hidden, seed)
    seq_methods = None if sequential is True else set(sequential or ())
    seq_estimates = [e for e in estimates if seq_methods is None or e.method in seq_methods]
    for rule in rules:
        variants = [(rule, None)]
        if rule.endswith("-calibrated"):
            variants = [(f"{rule}[{m}]", m) for m in (calibrated or {}) if ":" not in m]
        for label, method in variants:
            kw = dict(n_max=n_max, trials=trials, seed=seed)
            weights = None if method is None else cands.gather(calibrated[method])
            table = rule_table(cands, rule, calibrated=weights, **kw)
            table.rule = label
            own = references or method is not None  # a calibrated rule's rows are its own
            if own:
                frames.append(reference_rows(table, costs, n_max))
            if label in pop:
                frames.append(population_oracle_rows(table, pop[label], costs, n_max))
            if train_cands is None:
                continue
            tw = None
            if method is not None:
                tw = train_cands.gather(calibrated[f"train:{method}"])
            train_table = rule_table(train_cands, rule, calibrated=tw, **kw)
            allocator = AutoAllocator(train_table, pool_share(train_cands))
            frame, _ = auto_rows(
                table, estimates, train_estimates or {}, allocator, costs, n_max, seed,
                shifted=auc > SHIFT_AUC,
            )  # fmt: skip
            frames.append(frame.assign(shift_auc=auc))
            if sequential:
                seq_costs = [c for c in costs if any(np.isclose(c, REPORT_COSTS))] or list(costs)
                weight = table_weight(cands, rule, weights)
                frames.append(
                    sequential_rows(
                        cands, table, weight, seq_estimates, train_cands, train_estimates or {},
                        allocator, seq_costs, n_max, seq_trials, seed, shifted=auc > SHIFT_AUC,
                        vote=uses_answers(rule), train_weight=table_weight(train_cands, rule, tw),
                    ).assign(shift_auc=auc)
                )  # fmt: skip
            if own and "true_p" in bon.questions.columns:  # synthetic sets: the p-oracle
                frames.append(p_oracle_rows(table, bon, allocator, costs, n_max))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
