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
* **oracle-p** (synthetic sets): ``auto``'s allocation on each question's *true* success
  probability (not its pool): what question-level knowledge can reach;
* **C rule** (per calibrator): the paper's C sweep, its accuracy linearly interpolated along its
  (cost, accuracy) points at c (a mixture of the two neighbouring C allocations reaches it in
  expectation); empty where c lies outside the sweep's cost range.

``share`` = (method - uniform) / headroom, where headroom > 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
from dprm.ias.rules import CONTRACT_RULE, DEFAULT_TRIALS, Candidates, RuleTable, rule_table

#: target costs of the uniform / oracle / auto rows of ias.csv (curves for the figures)
COST_GRID = (0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5)
PAYS_COLUMNS = ["rule", "method", "kind", "cost", "accuracy", "accuracy_se"]


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
        columns ``rule, method, kind (uniform | oracle | oracle-p | auto | C), cost, accuracy, accuracy_se,
        headroom, gain (over uniform, same rule), share (gain / headroom)``.
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
            & rows["sweep"].isin(["uniform", "oracle", "oracle-p", "auto"])
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
    ref = table[table["kind"].isin(["uniform", "oracle"])].pivot_table(
        index=["rule", "cost"], columns="kind", values="accuracy"
    )
    merged = table.join(ref, on=["rule", "cost"])
    merged["headroom"] = merged["oracle"] - merged["uniform"]
    merged["gain"] = merged["accuracy"] - merged["uniform"]
    merged["share"] = np.where(
        merged["headroom"] > 1e-9,
        merged["gain"] / merged["headroom"].where(merged["headroom"] > 1e-9),
        np.nan,
    )
    return merged.drop(columns=["oracle", "uniform"])


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

    Returns:
        rows with ``rule, method, sweep, level, cost, accuracy, accuracy_se, oracle_bound,
        floor_share``.
    """
    cands = Candidates.from_bon(bon)
    train_cands = Candidates.from_bon(train_bon) if train_bon is not None else None
    frames = []
    auc = np.nan
    if train_bon is not None:
        auc = shift_auc(train_bon.hidden, bon.hidden, seed)
    for rule in rules:
        variants = [(rule, None)]
        if rule.endswith("-calibrated"):
            variants = [(f"{rule}[{m}]", m) for m in (calibrated or {}) if ":" not in m]
        for label, method in variants:
            kw = dict(n_max=n_max, trials=trials, seed=seed)
            weights = None if method is None else cands.gather(calibrated[method])
            table = rule_table(cands, rule, calibrated=weights, **kw)
            table.rule = label
            frames.append(reference_rows(table, costs, n_max))
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
            if "true_p" in bon.questions.columns:  # synthetic sets: the p-oracle
                frames.append(p_oracle_rows(table, bon, allocator, costs, n_max))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
