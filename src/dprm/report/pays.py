"""Rendering of the "does it pay?" table (``pays.csv``, :func:`dprm.ias.pays.pays_table`) and the
uniform / oracle reference lines of IAS figures.

New functions only: the report's own tables and figures are untouched; a caller passes an axis
(or a concatenation of ``pays.csv`` files with ``world`` / ``split`` / ``seed`` columns).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

KIND_ORDER = {"uniform": 0, "C": 1, "auto": 2, "oracle-p": 3, "oracle": 4}


def pays_summary(pays: pd.DataFrame) -> pd.DataFrame:
    """Mean and spread over seeds of a concatenation of ``pays.csv`` files.

    Args:
        pays: rows of :func:`dprm.ias.pays.pays_table` plus any of ``world``, ``split``,
            ``seed``.

    Returns:
        one row per (world, split, rule, method, kind, cost) with ``accuracy``, ``accuracy_sd``
        (across seeds), ``gain``, ``gain_sd``, ``headroom``, ``share`` (mean gain / mean
        headroom), ``seeds``.
    """
    keys = [k for k in ("world", "split") if k in pays.columns]
    keys += ["rule", "method", "kind", "cost"]
    grouped = pays.groupby(keys, sort=False, dropna=False)
    out = grouped.agg(
        accuracy=("accuracy", "mean"),
        accuracy_sd=("accuracy", "std"),
        gain=("gain", "mean"),
        gain_sd=("gain", "std"),
        headroom=("headroom", "mean"),
        seeds=("accuracy", "count"),
    ).reset_index()
    out["share"] = np.where(out["headroom"] > 1e-9, out["gain"] / out["headroom"], np.nan)
    return out


def _cell(acc: float, sd: float, share: float) -> str:
    if not np.isfinite(acc):
        return "--"
    text = f"{acc:.3f}"
    if np.isfinite(sd) and sd > 0:
        text += f" ± {sd:.3f}"
    if np.isfinite(share):
        text += f" ({share:+.0%})"
    return text


def pays_markdown(pays: pd.DataFrame, rule: str = "highest-last") -> str:
    """A markdown "does it pay?" table for one selection rule: rows (world, split, method),
    columns the costs; cells ``accuracy ± sd over seeds (share of headroom)``.

    Args:
        pays: ``pays.csv`` rows (one or more files concatenated; seeds averaged).
        rule: the selection rule; the C rule's rows (``kind = C``) use the contract rule.
    """
    summary = pays_summary(pays)
    summary = summary[(summary["rule"] == rule) | (summary["kind"] == "C")]
    costs = sorted(summary["cost"].unique())
    keys = [k for k in ("world", "split") if k in summary.columns]
    header = keys + ["method", "kind"] + [f"cost {c:g}" for c in costs]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    summary = summary.assign(_order=summary["kind"].map(KIND_ORDER))
    for key, grp in summary.groupby(keys + ["kind", "method"], sort=False):
        key = key if isinstance(key, tuple) else (key,)
        cells = []
        for cost in costs:
            row = grp[np.isclose(grp["cost"], cost)]
            if row.empty:
                cells.append("--")
                continue
            r = row.iloc[0]
            share = r["share"] if r["kind"] in ("auto", "C", "oracle-p") else np.nan
            cells.append(_cell(r["accuracy"], r["accuracy_sd"], share))
        kind, method = key[-2], key[-1]
        lines.append("| " + " | ".join([*map(str, key[:-2]), method, kind, *cells]) + " |")
    return "\n".join(lines)


def reference_lines(ax, rows: pd.DataFrame, rule: str = "highest-last") -> None:
    """Draw uniform (dashed) and oracle (dotted) accuracy-vs-cost lines of one rule on an IAS
    axis, from ``ias_full.csv`` rows (``sweep`` uniform / oracle)."""
    for sweep, style in (("uniform", "--"), ("oracle", ":")):
        sub = rows[(rows["sweep"] == sweep) & (rows.get("rule", rule) == rule)]
        if sub.empty:
            continue
        mean = sub.groupby("level", sort=True)[["cost", "accuracy"]].mean()
        ax.plot(mean["cost"], mean["accuracy"], style, color="0.35", lw=1.2, label=sweep)
