"""The report's "Does adaptive compute pay?" section: the table of accuracy at equal cost
(``pays.csv`` rows, :func:`dprm.ias.curves.pays.pays_table`), a reading generated from its numbers,
and the uniform / oracle reference lines of the IAS figures.

Rows come from the IAS stage's units (:mod:`dprm.orchestrate.ias_units`): the reference unit of each
(world, split) holds uniform, oracle and (synthetic sets) ``oracle-p`` per selection rule, plus
Base's and the truth's ``auto`` and C rows; each calibrator's unit holds its own ``auto`` and C
rows (and ``auto-seq`` rows with ``RunConfig.ias_sequential``). :func:`pays_rows` joins the
reference with each training seed's calibrator rows and evaluates them at the report costs;
:func:`pays_markdown` renders whatever ``allocation`` and ``method`` values are present (a new
allocation appears without a change here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

#: row order inside one (split, rule) block; an allocation not listed comes after ``auto``
ALLOCATION_ORDER = {
    "uniform": 0,
    "C": 1,
    "auto": 2,
    "auto-seq": 3,
    "oracle-p": 7,
    "oracle-pop": 8,
    "oracle": 9,
}
#: a gain over uniform within this band counts as level (the issue's tolerance)
LEVEL = 0.005
#: the synthetic truth's method name (a reference, counted apart from the calibrators)
TRUTH = "truth"


def pays_rows(
    reference: pd.DataFrame,
    calibrators: Mapping[int, pd.DataFrame],
    costs: Sequence[float] | None = None,
) -> pd.DataFrame:
    """The "does it pay?" rows of one (world, split): the reference unit's rows with each
    training seed's calibrator rows, at each report cost.

    Args:
        reference: ``ias_full.csv`` rows of the reference unit (uniform, oracle, ...; Base).
        calibrators: training seed -> the ``ias_full.csv`` rows of every calibrator of that
            seed, concatenated (empty mapping: the reference alone, as seed 0).
        costs: target costs (default :data:`dprm.ias.learnt.allocation.REPORT_COSTS`).

    Returns:
        :func:`dprm.ias.curves.pays.pays_table`'s columns plus ``seed``; empty when the reference has
        no uniform / oracle rows (an IAS stage that did not compute them).
    """
    from dprm.ias.curves.pays import pays_table
    from dprm.ias.learnt.allocation import REPORT_COSTS

    if reference.empty or "allocation" not in reference.columns:
        return pd.DataFrame()
    if not {"uniform", "oracle"} <= set(reference["allocation"]):
        return pd.DataFrame()
    costs = REPORT_COSTS if costs is None else costs
    out = []
    for seed, rows in (calibrators or {0: reference.iloc[:0]}).items():
        frame = pd.concat([reference, rows], ignore_index=True)
        out.append(pays_table(frame, costs).assign(seed=seed))
    return pd.concat(out, ignore_index=True)


def pays_summary(pays: pd.DataFrame) -> pd.DataFrame:
    """Mean and spread over seeds of a concatenation of ``pays.csv`` files.

    Args:
        pays: rows of :func:`dprm.ias.curves.pays.pays_table` plus any of ``world``, ``split``,
            ``seed``.

    Returns:
        one row per (world, split, rule, method, allocation, cost) with ``accuracy``, ``accuracy_sd``
        (across seeds), ``gain``, ``gain_sd``, ``headroom``, ``share`` (mean gain / mean
        headroom), ``share_sd`` (of the per-seed shares), ``seeds``, ``falls_back_to`` (the peers
        ``auto-seq`` fell back to under a shift; "" where it ran).
    """
    from dprm.ias.outputs import RENAMED_PAYS_COLUMNS

    pays = pays.rename(columns={k: v for k, v in RENAMED_PAYS_COLUMNS.items() if v not in pays})
    keys = [k for k in ("world", "split") if k in pays.columns]
    keys += ["rule", "method", "allocation", "cost"]
    pays = pays.assign(
        _share=np.where(
            pays["headroom"] > 1e-9,
            pays["gain"] / pays["headroom"].where(pays["headroom"] > 1e-9),
            np.nan,
        )
    )
    if "headroom_pop" not in pays.columns:  # sets without oracle-pop rows (real data, v1)
        pays = pays.assign(headroom_pop=np.nan)
    if "falls_back_to" not in pays.columns:  # pays.csv files written before the fallback
        pays = pays.assign(falls_back_to="")
    grouped = pays.groupby(keys, sort=False, dropna=False)
    out = grouped.agg(
        accuracy=("accuracy", "mean"),
        accuracy_sd=("accuracy", "std"),
        gain=("gain", "mean"),
        gain_sd=("gain", "std"),
        headroom=("headroom", "mean"),
        headroom_pop=("headroom_pop", "mean"),
        share_sd=("_share", "std"),
        seeds=("accuracy", "count"),
        falls_back_to=("falls_back_to", _peers),
    ).reset_index()
    out["share"] = np.where(
        out["headroom"] > 1e-9, out["gain"] / out["headroom"].where(out["headroom"] > 1e-9), np.nan
    )
    # against the population oracle (twin test sets): the headroom of a question's true curve
    pop = out["headroom_pop"]
    out["share_pop"] = np.where(pop > 1e-9, out["gain"] / pop.where(pop > 1e-9), np.nan)
    return out


def _peers(values: pd.Series) -> str:
    """The peers ``auto-seq`` fell back to across seeds ("" where it always ran)."""
    return ", ".join(sorted({v for v in values if isinstance(v, str) and v}))


def _fmt(value: float, sd: float, spec: str, unit: str = "") -> str:
    text = format(value, spec)
    if np.isfinite(sd) and sd > 0:
        text += f" ± {format(sd, spec.lstrip('+'))}"
    return text + unit


def _cell(r: pd.Series) -> str:
    """``accuracy ± sd`` and, in brackets, the share of the headroom (oracle: the headroom)."""
    if not np.isfinite(r["accuracy"]):
        return "--"
    text = _fmt(r["accuracy"], r["accuracy_sd"], ".3f")
    if r["allocation"] == "oracle":
        if np.isfinite(r["headroom"]):
            text += f" (+{r['headroom']:.3f})"
    elif r["allocation"] == "oracle-pop":  # its gain is the population headroom
        if np.isfinite(r["gain"]):
            text += f" ({r['gain']:+.3f})"
    elif r["allocation"] != "uniform" and np.isfinite(r["share"]):
        text += f" ({_fmt(100 * r['share'], 100 * r['share_sd'], '+.0f', '%')}"
        if np.isfinite(r.get("share_pop", np.nan)):
            text += f"; {100 * r['share_pop']:+.0f}% pop."
        text += ")"
    if isinstance(r.get("falls_back_to"), str) and r["falls_back_to"]:
        text += f" falls back to {r['falls_back_to']}"
    return text


def _label(allocation: str, method: str) -> str:
    from dprm.report.tables import display

    if allocation == "C":
        return f"C rule, {display(method)}"
    if allocation == method:
        return {
            "oracle": "oracle (headroom)",
            "oracle-p": "oracle-p (true p, no pool)",
            "oracle-pop": "oracle-pop (true curve, no pool)",
        }.get(allocation, allocation)
    return f"{allocation}, {display(method)}"


def _order(summary: pd.DataFrame) -> pd.DataFrame:
    from dprm.report.tables import dataset_order, method_order

    methods = method_order(summary["method"])
    rules = list(dict.fromkeys(summary["rule"]))
    return summary.assign(
        _split=summary["split"].map(lambda s: dataset_order(str(s))),
        _rule=summary["rule"].map(rules.index),
        _allocation=summary["allocation"].map(lambda k: ALLOCATION_ORDER.get(k, 5)),
        _method=summary["method"].map(methods.index),
    ).sort_values(["_split", "_rule", "_allocation", "_method", "cost"], kind="stable")


def pays_markdown(pays: pd.DataFrame, world: str | None = None) -> str:
    """The "does it pay?" table of one world: rows (split, rule, allocation), columns the costs;
    cells ``accuracy ± sd over seeds (share of the headroom ± sd)``; the oracle row gives the
    headroom (oracle − uniform) instead. ``--``: the C sweep does not reach that cost.

    Args:
        pays: rows of :func:`pays_rows` (one or more worlds; ``world``, ``split``, ``seed``).
        world: the world to render (default: all rows, which must then be one world).
    """
    from dprm.report.tables import dataset_label

    if world is not None and "world" in pays.columns:
        pays = pays[pays["world"] == world]
    if "split" not in pays.columns:
        pays = pays.assign(split="")
    summary = _order(pays_summary(pays))
    costs = sorted(summary["cost"].unique())
    header = ["split", "selection rule", "allocation", *(f"cost {c:g}" for c in costs)]
    lines = ["| " + " | ".join(header) + " |", "|---|---|---|" + "---:|" * len(costs)]
    last = (None, None)
    for (split, rule, allocation, method), grp in summary.groupby(
        ["split", "rule", "allocation", "method"], sort=False
    ):
        cells = []
        for cost in costs:
            row = grp[np.isclose(grp["cost"], cost)]
            cells.append("--" if row.empty else _cell(row.iloc[0]))
        shown_split = dataset_label(str(split)) if split != last[0] else ""
        shown_rule = str(rule) if (split, rule) != last else ""
        last = (split, rule)
        lines.append(
            "| " + " | ".join([shown_split, shown_rule, _label(allocation, method), *cells]) + " |"
        )
    return "\n".join(lines) + "\n"


def _cells_text(sub: pd.DataFrame) -> str:
    """``above / level / below`` counts of (method, cost) cells, the gain range and the worst."""
    from dprm.report.tables import display

    g = sub["gain"]
    above, below = int((g > LEVEL).sum()), int((g < -LEVEL).sum())
    level = len(sub) - above - below
    cells = "(calibrator, cost) cells" if sub["method"].nunique() > 1 else "costs"
    worst, best = sub.loc[g.idxmin()], sub.loc[g.idxmax()]
    who = f"{display(worst['method'])} at {worst['cost']:g}" if cells != "costs" else ""
    low, high = f"{worst['gain']:+.3f}", f"{best['gain']:+.3f}"
    return (
        f"above uniform in {above} of {len(sub)} {cells}, level in {level}, below in {below}; "
        + f"gain {low if low == high else f'{low} to {high}'}"
        + (f" (lowest: {who})" if who else "")
    )


def pays_reading(pays: pd.DataFrame) -> list[str]:
    """Bullets generated from the numbers: per world, split and rule, the headroom and, for each
    allocation, in how many (method, cost) cells it is above uniform, level or below.

    Gains are seed means; "above" / "below" mean by more than :data:`LEVEL`, "level" within
    it, against uniform best-of-n at the same mean cost and selection rule.
    """
    from dprm.report.tables import dataset_label

    if "world" not in pays.columns:
        pays = pays.assign(world="")
    if "split" not in pays.columns:
        pays = pays.assign(split="")
    summary = _order(pays_summary(pays))
    lines = []
    for (world, split, rule), block in summary.groupby(["world", "split", "rule"], sort=False):
        oracle = block[block["allocation"] == "oracle"]
        if oracle.empty:
            continue
        low, high = f"{oracle['headroom'].min():+.3f}", f"{oracle['headroom'].max():+.3f}"
        text = (
            f"- **{world}, {dataset_label(str(split))}, {rule}**: headroom (oracle − uniform) "
            + (low if low == high else f"{low} to {high}")
        )
        for allocation, every in block.groupby("allocation", sort=False):
            if allocation in ("uniform", "oracle"):
                continue
            # the synthetic truth is a reference, not a calibrator: counted apart
            truth = every[every["method"] == TRUTH]
            sub = every if len(truth) == len(every) else every[every["method"] != TRUTH]
            reached = sub[np.isfinite(sub["accuracy"])]
            word = "The C rule" if allocation == "C" else f"`{allocation}`"
            if reached.empty:
                text += f". {word} does not reach these costs"
                continue
            text += f". {word}: {_cells_text(reached)}"
            share = reached["share"].dropna()
            if not share.empty:
                text += f"; mean share of the headroom {share.mean():+.0%}"
            if len(reached) < len(sub):
                text += f"; {len(sub) - len(reached)} cell(s) outside its sweep's cost range"
            truth = truth[np.isfinite(truth["accuracy"])] if sub is not truth else truth.iloc[:0]
            if not truth.empty:
                low, high = f"{truth['gain'].min():+.3f}", f"{truth['gain'].max():+.3f}"
                text += "; with the true distribution of p given h (truth) the gain is " + (
                    low if low == high else f"{low} to {high}"
                )
        lines.append(text + ".")
    return lines


def reference_lines(
    ax,
    rows: pd.DataFrame,
    rule: str = "highest-last",
    allocations: Sequence[str] | None = None,
    *,
    xrange: tuple[float, float] | None = None,
    color: str | Sequence[float] = "0.25",
    label: bool = True,
) -> None:
    """Draw uniform (dashed) and oracle (dotted) accuracy-vs-cost lines of one rule on an IAS
    axis, from ``ias_full.csv`` rows (``allocation`` uniform / oracle; seeds averaged).

    Args:
        ax: a matplotlib axis.
        rows: IAS rows of one panel (any allocations; rows without a ``rule`` count as the contract
            rule's).
        rule: the selection rule whose lines are drawn.
        allocations: which of the two lines to draw (default both).
        xrange: draw only this cost range (the lines interpolated linearly between their
            points), so a panel's narrow cost range is not widened to the lines' own.
        color: line colour.
        label: give the lines legend labels.
    """
    styles = {"uniform": ("--", "uniform best-of-n"), "oracle": (":", "oracle (same mean cost)")}
    rule_of = rows["rule"].fillna(rule) if "rule" in rows.columns else pd.Series(rule, rows.index)
    for allocation in allocations or ("uniform", "oracle"):
        sub = rows[(rows["allocation"] == allocation) & (rule_of == rule)]
        if sub.empty:
            continue
        style, name = styles[allocation]
        mean = sub.groupby("target_cost", sort=True)[["cost", "accuracy"]].mean()
        mean = mean.sort_values("cost")
        x, y = mean["cost"].to_numpy(float), mean["accuracy"].to_numpy(float)
        if xrange is not None:
            lo, hi = max(xrange[0], x.min()), min(xrange[1], x.max())
            if lo >= hi:
                continue
            grid = np.linspace(lo, hi, 50)
            x, y = grid, np.interp(grid, x, y)
        ax.plot(x, y, style, color=color, lw=1.2, label=name if label else "_nolegend_")
