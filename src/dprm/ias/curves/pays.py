"""Does adaptive compute pay? The table of every method against uniform and the oracle's
headroom at equal cost, on one BoN set (:func:`run_pays`, :func:`pays_table`).

The rows come from :mod:`dprm.ias.curves.equal_cost` (uniform, oracle, ``auto``, ``auto-seq``,
oracle-p) and :mod:`dprm.ias.curves.population` (``oracle-pop``, twin test sets), plus the C rule of
the sweeps (per calibrator: the paper's C sweep, its accuracy linearly interpolated along its
(cost, accuracy) points at c; empty where c lies outside the sweep's cost range). ``oracle``
knows the realised pool (pool luck: at n = 64 it knows the answer); ``oracle-pop`` knows every
question's true accuracy-vs-n curve. Both headrooms are reported (``headroom``: oracle -
uniform; ``headroom_pop``: oracle-pop - uniform); ``share`` = (method - uniform) / headroom,
where headroom > 0; ``share_pop`` likewise on ``headroom_pop``. Under a detected shift
``auto-seq`` falls back to the best calibrator-free peer chosen on the training pools; its
cells say so (``falls_back_to``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import pandas as pd

from dprm.data.synth.population import twin_questions
from dprm.ias.constants import COST_GRID, N_MAX
from dprm.ias.curves.equal_cost import (
    SEQ_TRIALS,
    auto_rows,
    p_oracle_rows,
    reference_rows,
    sequential_rows,
)
from dprm.ias.curves.population import POP_POOLS, population_curves, population_oracle_rows
from dprm.ias.learnt.allocation import REPORT_COSTS, SHIFT_AUC, shift_auc
from dprm.ias.learnt.auto import AutoAllocator, pool_share
from dprm.ias.learnt.inputs import CalibratorInput
from dprm.ias.selection.draws import table_weight
from dprm.ias.selection.rules import (
    CONTRACT_RULE,
    DEFAULT_TRIALS,
    Candidates,
    rule_table,
    uses_answers,
)

PAYS_COLUMNS = ["rule", "method", "allocation", "cost", "accuracy", "accuracy_se"]


def pays_table(
    rows: pd.DataFrame, costs: Sequence[float] = REPORT_COSTS, *, c_rule: str = CONTRACT_RULE
) -> pd.DataFrame:
    """The "does it pay?" table from IAS rows (``ias_full.csv`` of one world and split, methods
    concatenated): uniform and oracle per rule, auto per (rule, calibrator), the C rule per
    calibrator (selection ``c_rule``), each at every cost in ``costs``.

    Returns:
        columns ``rule, method, allocation (uniform | oracle | oracle-pop | oracle-p | auto | auto-seq
        | C), cost,
        accuracy, accuracy_se, headroom, gain (over uniform, same rule), share (gain /
        headroom)``, then ``headroom_pop`` (oracle-pop - uniform) and ``share_pop`` (gain /
        headroom_pop) where the set has oracle-pop rows (twin test sets), else NaN, and
        ``falls_back_to``: the calibrator-free peer ``auto-seq`` fell back to under a detected
        shift ("" elsewhere).
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
            np.isclose(rows["target_cost"].astype(float), cost)
            & rows["allocation"].isin(
                ["uniform", "oracle", "oracle-pop", "oracle-p", "auto", "auto-seq"]
            )
        ]
        for _, r in at.iterrows():
            peer = r.get("falls_back_to")
            peer = peer if isinstance(peer, str) else ""
            out.append((r["rule"], r["method"], r["allocation"], cost, r["accuracy"], r["accuracy_se"],
                        peer))  # fmt: skip
        c_rows = rows[rows["allocation"] == "C"]
        for method, grp in c_rows.groupby("method", sort=False):
            grp = grp.sort_values("cost")
            x, y = grp["cost"].to_numpy(float), grp["accuracy"].to_numpy(float)
            acc = float(np.interp(cost, x, y)) if x.min() <= cost <= x.max() else np.nan
            out.append((c_rule, method, "C", cost, acc, np.nan, ""))
    table = pd.DataFrame(out, columns=[*PAYS_COLUMNS, "falls_back_to"])
    ref = table[table["allocation"].isin(["uniform", "oracle", "oracle-pop"])].pivot_table(
        index=["rule", "cost"], columns="allocation", values="accuracy"
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
    merged = merged.drop(columns=["oracle", "uniform", "oracle-pop"])
    # last: the peer auto-seq fell back to under a detected shift ("" where it ran)
    return merged[[c for c in merged.columns if c != "falls_back_to"] + ["falls_back_to"]]


def run_pays(
    bon,
    inputs: Sequence[CalibratorInput],
    *,
    rules: Sequence[str] = (CONTRACT_RULE,),
    train_bon=None,
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
        inputs: the calibrators (:class:`dprm.ias.learnt.inputs.CalibratorInput`): ``auto`` rows for
            each with a ``train`` estimate; a ``*-calibrated`` rule runs once per calibrator
            with test candidate estimates, named ``rule[label]`` (with a ``train_bon``, its
            ``auto`` rows need its training candidate estimates too).
        rules: selection rules (:data:`dprm.ias.selection.rules.RULES`).
        train_bon: the training BoN set ``auto`` learns on; None: no auto rows.
        costs: target costs.
        trials: Monte Carlo orders of the voting rules; seed: their seed.
        population_pools: fresh pools per question of the population oracle (``oracle-pop``
            rows, twin test sets only; 0: none).
        sequential: add ``auto-seq`` rows (True: of every calibrator, a collection of labels:
            of those only, as it is slow; every rule; calibrators with candidate estimates on
            both sets), at :data:`REPORT_COSTS` within ``costs``; seq_trials: its draw orders
            per question.
        references: False: only the calibrators' own rows (``auto``, ``auto-seq``, and every
            row of a ``*-calibrated`` rule weighted by their estimates), without the rows that
            do not depend on them (uniform, oracle, oracle-pop and oracle-p of the other rules),
            which a caller computing them once per set skips here.

    Returns:
        rows with ``rule, method, allocation, level, cost, accuracy, accuracy_se, oracle_bound,
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
    seq_labels = None if sequential is True else set(sequential or ())
    seq_inputs = [i for i in inputs if seq_labels is None or i.label in seq_labels]
    for rule in rules:
        variants: list[tuple[str, CalibratorInput | None]] = [(rule, None)]
        if rule.endswith("-calibrated"):
            variants = [(f"{rule}[{i.label}]", i) for i in inputs if i.test_candidates is not None]
        for label, weighted_by in variants:
            kw = dict(n_max=n_max, trials=trials, seed=seed)
            weights = None if weighted_by is None else cands.gather(weighted_by.test_candidates)
            table = rule_table(cands, rule, calibrated=weights, **kw)
            table.rule = label
            own = references or weighted_by is not None  # a calibrated rule's rows are its own
            if own:
                frames.append(reference_rows(table, costs, n_max))
            if label in pop:
                frames.append(population_oracle_rows(table, pop[label], costs, n_max))
            if train_cands is None:
                continue
            tw = None
            if weighted_by is not None:
                if weighted_by.train_candidates is None:  # nothing to weight the training pools
                    continue
                tw = train_cands.gather(weighted_by.train_candidates)
            train_table = rule_table(train_cands, rule, calibrated=tw, **kw)
            allocator = AutoAllocator(train_table, pool_share(train_cands))
            frame, _ = auto_rows(
                table, inputs, allocator, costs, n_max, seed, shifted=auc > SHIFT_AUC
            )
            frames.append(frame.assign(shift_auc=auc))
            if sequential:
                seq_costs = [c for c in costs if any(np.isclose(c, REPORT_COSTS))] or list(costs)
                weight = table_weight(cands, rule, weights)
                frames.append(
                    sequential_rows(
                        cands, table, weight, seq_inputs, train_cands, allocator, seq_costs,
                        n_max, seq_trials, seed, shifted=auc > SHIFT_AUC,
                        vote=uses_answers(rule), train_weight=table_weight(train_cands, rule, tw),
                    ).assign(shift_auc=auc)
                )  # fmt: skip
            if own and "true_p" in bon.questions.columns:  # synthetic sets: the p-oracle
                frames.append(p_oracle_rows(table, bon, allocator, costs, n_max))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
