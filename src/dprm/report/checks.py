"""Checks of the paper's claims on a reproduction's tidy results (written to results.json).

* :func:`frontier_checks` -- does a method's IAS frontier span more cost than Base's and rise?
* :func:`table_checks` -- is a method ahead of Base on Brier and ECE (Table 1)?
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

RISE_TOL = 0.005  # a frontier "rises" if no step drops accuracy by more than this


def frontier_checks(
    ias: pd.DataFrame, method: str = "ot", uniform: pd.DataFrame | None = None
) -> list[dict[str, Any]]:
    """Per (world, dataset): ``method``'s C-sweep frontier against Base's.

    Args:
        ias: rows of ``dprm ias`` with ``world``, ``dataset`` (allocation "C" used; seeds averaged).
        method: the method to check.
        uniform: optional ``world, dataset, cost, accuracy`` rows of plain best-of-n.

    Returns:
        one dict per (world, dataset): cost span of ``method`` vs Base, whether its accuracy
        rises with C, and (with ``uniform``) its mean accuracy minus plain best-of-n's at the
        same cost.
    """
    rows = []
    c = ias[ias["allocation"] == "C"]
    c = (
        c.groupby(["world", "dataset", "method", "C"], sort=False)[["cost", "accuracy"]]
        .mean()
        .reset_index()
    )
    for (world, dataset), grp in c.groupby(["world", "dataset"], sort=False):
        base = grp[grp["method"] == "base"].sort_values("C")
        m = grp[grp["method"] == method].sort_values("C")
        if base.empty or m.empty:
            continue
        acc = m["accuracy"].to_numpy()
        rows.append(
            {
                "world": world,
                "dataset": dataset,
                "method": method,
                "cost_span": float(m["cost"].max() - m["cost"].min()),
                "base_cost_span": float(base["cost"].max() - base["cost"].min()),
                "cost_range": [float(m["cost"].min()), float(m["cost"].max())],
                "base_cost_range": [float(base["cost"].min()), float(base["cost"].max())],
                "accuracy_range": [float(acc[0]), float(acc[-1])],
                "largest_drop": float(max(0.0, -np.diff(acc).min())) if len(acc) > 1 else 0.0,
                "rises": bool(acc[-1] > acc[0] and (np.diff(acc) >= -RISE_TOL).all()),
                "minus_uniform": _minus_uniform(m, uniform, world, dataset),
            }
        )
    for r in rows:
        r["wider_than_base"] = r["cost_span"] > r["base_cost_span"]
    return rows


def _minus_uniform(
    points: pd.DataFrame, uniform: pd.DataFrame | None, world: str, dataset: str
) -> float:
    """Mean over the C points of accuracy - (plain best-of-n accuracy interpolated at its cost)."""
    if uniform is None or uniform.empty:
        return float("nan")
    u = uniform[(uniform["world"] == world) & (uniform["dataset"] == dataset)].sort_values("cost")
    if u.empty:
        return float("nan")
    ref = np.interp(points["cost"], u["cost"], u["accuracy"])
    return float(np.mean(points["accuracy"].to_numpy() - ref))


def greedy_checks(ias: pd.DataFrame, uniform: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """Per (world, dataset, method) with ``greedy`` rows: the cost-aware allocation's gain.

    Args:
        ias: rows with ``world``, ``dataset``, ``method``, ``allocation``, ``C``, ``cost``,
            ``accuracy`` (sweeps "C" and "greedy" used; seeds averaged).
        uniform: optional ``world, dataset, cost, accuracy`` rows of plain best-of-n.

    Returns:
        one dict per (world, dataset, method): mean over the C points of greedy minus C-rule
        accuracy at the same cost, and of each minus plain best-of-n (NaN without ``uniform``).
    """
    if "greedy" not in set(ias["allocation"]):
        return []
    keys = ["world", "dataset", "method", "allocation", "C"]
    mean = ias[ias["allocation"].isin(["C", "greedy"])].groupby(keys, sort=False)[
        ["cost", "accuracy"]
    ]
    wide = (
        mean.mean()
        .reset_index()
        .pivot_table(
            index=["world", "dataset", "method", "C"],
            columns="allocation",
            values=["cost", "accuracy"],
        )
    )
    rows = []
    for (world, dataset, method), grp in wide.groupby(level=[0, 1, 2], sort=False):
        if ("accuracy", "greedy") not in grp or grp[("accuracy", "greedy")].isna().all():
            continue
        grp = grp.dropna()
        rule = grp["accuracy"]["C"].to_numpy()
        best = grp["accuracy"]["greedy"].to_numpy()
        frame = pd.DataFrame({"cost": grp["cost"]["C"].to_numpy(), "accuracy": rule})
        rows.append(
            {
                "world": world,
                "dataset": dataset,
                "method": method,
                "greedy_minus_rule": float(np.mean(best - rule)),
                "rule_minus_uniform": _minus_uniform(frame, uniform, world, dataset),
                "greedy_minus_uniform": _minus_uniform(
                    frame.assign(accuracy=best), uniform, world, dataset
                ),
            }
        )
    return rows


def table_checks(metrics: pd.DataFrame, method: str = "ot") -> list[dict[str, Any]]:
    """Per (prm, dataset): ``method`` vs Base on Brier and ECE (seed means, then generator means).

    Args:
        metrics: one row per (prm, dataset, generator, method, seed) with ``brier``, ``ece``.
        method: the method to check.

    Returns:
        one dict per (prm, dataset) where ``method`` was evaluated.
    """
    rows = []
    mean = metrics.groupby(["prm", "dataset", "generator", "method"], sort=False)[
        ["brier", "ece"]
    ].mean()
    for (prm, dataset), grp in mean.groupby(level=["prm", "dataset"], sort=False):
        g = grp.droplevel(["prm", "dataset"])
        if method not in g.index.get_level_values("method"):
            continue
        b, m = g.xs("base", level="method"), g.xs(method, level="method")
        rows.append(
            {
                "prm": prm,
                "dataset": dataset,
                "method": method,
                "brier": float(m["brier"].mean()),
                "base_brier": float(b["brier"].mean()),
                "ece": float(m["ece"].mean()),
                "base_ece": float(b["ece"].mean()),
                "ahead_on_brier_every_generator": bool(
                    (m["brier"] < b["brier"].reindex(m.index)).all()
                ),
                "ahead_on_ece_every_generator": bool((m["ece"] < b["ece"].reindex(m.index)).all()),
            }
        )
    for r in rows:
        r["ahead_on_brier_and_ece"] = r["brier"] < r["base_brier"] and r["ece"] < r["base_ece"]
    return rows
