"""Figures of instance-adaptive best-of-N: frontiers (Fig. 2), beta (Fig. 3), tau (Fig. 4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dprm.ias.selection.rules import CONTRACT_RULE
from dprm.report.figures.style import (
    COLORS,
    _datasets,
    _finish,
    _generators,
    _grid,
    _mean_over_seeds,
    _method_curve,
    _panel_grid,
    _plt,
    _seed_band,
    _select,
    color,
    panel_title,
    save_data,
)
from dprm.report.pays import reference_lines
from dprm.report.tables import dataset_label, display, method_order


def frontier_figure(
    ias: pd.DataFrame, stem: str | Path, uniform: pd.DataFrame | None = None, title: str = ""
) -> tuple[list[Path], str]:
    """IAS accuracy vs normalised cost from the C sweep; rows = generators, columns = datasets.

    Args:
        ias: rows of ``dprm ias`` (allocation "C" used) plus ``dataset``, ``generator`` (and
            ``seed``, averaged).
        stem: output path without suffix (``.png`` and ``.pdf`` are written).
        uniform: optional ``dataset, generator, n, cost, accuracy`` rows of plain best-of-n.
        title: figure title (default: a generic one).

    Returns:
        (the written files, the caption).
    """
    df = _seed_band(
        ias[ias["allocation"] == "C"], ["dataset", "generator", "method", "C"], ["cost", "accuracy"]
    )
    banded = bool((df["n_seeds"] > 1).any())
    # the IAS stage's uniform / oracle rows of the contract rule (the "does it pay?" lines)
    refs = ias[ias["allocation"].isin(["uniform", "oracle"])]
    has_oracle = bool((refs["allocation"] == "oracle").any())

    def reference(ax, gen: str, dataset: str) -> None:
        if uniform is not None:
            u = uniform[(uniform["dataset"] == dataset) & (uniform["generator"] == gen)]
            u = _mean_over_seeds(u, ["n"], ["cost", "accuracy"])
            ax.plot(
                u["cost"],
                u["accuracy"],
                color="0.75",
                linewidth=1.2,
                label="uniform: same n for all (no IAS)",
            )
        sel = refs[(refs["dataset"] == dataset) & (refs["generator"] == gen)]
        reference_lines(ax, sel, CONTRACT_RULE, ("oracle",) if uniform is not None else None)

    def draw(ax, m: str, sel: pd.DataFrame, methods: list[str]) -> None:
        _method_curve(ax, m, methods, sel["cost"], sel["accuracy"], marker="o", markersize=3.5)
        if (sel["n_seeds"] > 1).any():  # min-max over training seeds, both axes
            ax.errorbar(
                sel["cost"],
                sel["accuracy"],
                # clipped at 0: a mean of equal values can round a hair outside [min, max]
                xerr=[
                    (sel["cost"] - sel["cost_min"]).clip(lower=0),
                    (sel["cost_max"] - sel["cost"]).clip(lower=0),
                ],
                yerr=[
                    (sel["accuracy"] - sel["accuracy_min"]).clip(lower=0),
                    (sel["accuracy_max"] - sel["accuracy"]).clip(lower=0),
                ],
                fmt="none",
                ecolor=color(m, methods),
                elinewidth=0.8,
                alpha=0.6,
            )

    fig, axes = _panel_grid(
        df,
        draw,
        xlabel="normalised cost  mean N / N_max",
        ylabel="accuracy (exact expectation)",
        xlim=(0, 1.02),
        reference=None if uniform is None and refs.empty else reference,
    )
    caption = (
        "IAS best-of-N: accuracy against normalised cost mean N_i / 64 as the target C sweeps "
        "{0.5, …, 0.999} (one marker per C). Each method allocates per-question budgets from its "
        "own success estimate (Base: the raw PRM score; QR: Q(0.1 | h); distributional methods: "
        "the mixture over 100 quantile levels); the answer is always the candidate with the "
        "highest raw PRM score. A wider horizontal span means the method's budgets respond to C; "
        "grey: the same n for every question, for reference."
        + (
            " Dotted: the oracle allocation of the same mean cost, which knows every question's "
            "true accuracy-vs-n curve on its pool (the ceiling of any allocation; oracle − "
            "uniform is the headroom of the report's 'Does adaptive compute pay?' table)."
            if has_oracle
            else ""
        )
        + (
            " Markers are seed means; bars span the min–max over training seeds (cost and "
            "accuracy); the plotted numbers are in the CSV beside the figure."
            if banded
            else ""
        )
    )
    title = title or "Instance-adaptive best-of-N: cost–accuracy frontier over C ∈ [0.5, 0.999]"
    files, caption = _finish(fig, axes, stem, title, caption)
    return [*files, save_data(df, stem)], caption


def beta_figure(
    ias: pd.DataFrame, stem: str | Path, methods: list[str] | None = None, title: str = ""
) -> tuple[list[Path], str]:
    """beta-threshold early stopping (C = 0.9): accuracy vs cost per generator, beta annotated.

    Args:
        ias: rows of ``dprm ias`` (allocation "beta" used) plus ``dataset``, ``generator``.
        stem: output path without suffix.
        methods: methods to draw (default: all but the truth oracle).
        title: figure title.

    Returns:
        (the written files, the caption).
    """
    df = _mean_over_seeds(
        ias[ias["allocation"] == "beta"],
        ["dataset", "generator", "method", "level"],
        ["cost", "accuracy"],
    )
    methods = methods or [m for m in method_order(df["method"]) if m != "truth"]
    df = df[df["method"].isin(methods)]
    refs = ias[ias["allocation"].isin(["uniform", "oracle"])]
    datasets, generators = _datasets(df), _generators(df)
    fig, axes = _grid(1, len(datasets), width=5.2, height=4.0)
    plt = _plt()
    from matplotlib.ticker import MaxNLocator

    gen_colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, max(len(generators), 1)))
    for c, dataset in enumerate(datasets):
        ax = axes[0, c]
        for g, gen in enumerate(generators):
            # uniform / oracle of the contract rule over the β curves' own cost range
            drawn = df[(df["dataset"] == dataset) & (df["generator"] == gen)]
            if not drawn.empty and not refs.empty:
                sel = refs[(refs["dataset"] == dataset) & (refs["generator"] == gen)]
                reference_lines(
                    ax,
                    sel,
                    CONTRACT_RULE,
                    xrange=(drawn["cost"].min(), drawn["cost"].max()),
                    color=gen_colors[g],
                    label=g == 0,
                )
            for k, m in enumerate(methods):
                sel = _select(df, dataset, gen, m, "level")
                if sel.empty:
                    continue
                ls = ["-", "--", ":", "-."][k % 4]
                ax.plot(
                    sel["cost"],
                    sel["accuracy"],
                    ls,
                    marker="o",
                    markersize=3,
                    color=gen_colors[g],
                    label=f"{gen} ({display(m)})",
                )
                for end in (sel.iloc[0], sel.iloc[-1]):
                    ax.annotate(
                        f"β={end['level']:g}",
                        (end["cost"], end["accuracy"]),
                        fontsize=6,
                        xytext=(3, -8),
                        textcoords="offset points",
                    )
        ax.set_title(panel_title(dataset_label(dataset)), fontsize=10)
        # few ticks and no offset text: narrow cost ranges (0.0172 ... 0.0198) otherwise crowd
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(MaxNLocator(nbins=5))
            axis.get_major_formatter().set_useOffset(False)
        ax.tick_params(axis="x", labelrotation=30)
        ax.set_xlabel("normalised cost  mean draws / N_max")
        ax.set_ylabel("accuracy (exact expectation)")
        ax.grid(alpha=0.3)
    caption = (
        "Calibrated best-of-N with β-threshold early stopping: the cap N_i comes from the mixture "
        "rule at C = 0.9; candidates are drawn one at a time and sampling stops at the first whose "
        "raw PRM score reaches Q(β | h_i), or at N_i. Each curve sweeps β from 0 (stop early, low "
        "cost) to 1 (stop late); cost and accuracy are exact expectations over the random order."
        + (
            " Dashed and dotted lines in each generator's colour: uniform best-of-n and the "
            "oracle allocation at the same mean cost (highest-last selection), over the range "
            "of costs the β curves span (from 0.02, the lowest cost those rows are computed at)."
            if not refs.empty
            else ""
        )
    )
    title = title or "β-threshold early stopping at C = 0.9 (β = 0, 0.1, …, 1)"
    return _finish(fig, axes, stem, title, caption)


def tau_figure(ias: pd.DataFrame, stem: str | Path, title: str = "") -> tuple[list[Path], str]:
    """Accuracy (top) and cost (bottom) against tau at C = 0.99; Base as a flat reference.

    Args:
        ias: rows of ``dprm ias`` of one generator (sweeps "tau" and "C" used).
        stem: output path without suffix.
        title: figure title.

    Returns:
        (the written files, the caption).
    """
    tau = _mean_over_seeds(
        ias[ias["allocation"] == "tau"], ["dataset", "method", "level"], ["cost", "accuracy"]
    )
    base = ias[(ias["allocation"] == "C") & (ias["method"] == "base") & np.isclose(ias["C"], 0.99)]
    base = _mean_over_seeds(base, ["dataset"], ["cost", "accuracy"])
    datasets = _datasets(pd.concat([tau[["dataset"]], base[["dataset"]]]))
    methods = method_order(tau["method"])
    fig, axes = _grid(2, len(datasets), width=5.0, height=3.2)
    for c, dataset in enumerate(datasets):
        for r, value in enumerate(("accuracy", "cost")):
            ax = axes[r, c]
            for m in methods:
                sel = tau[(tau["dataset"] == dataset) & (tau["method"] == m)].sort_values("level")
                if sel.empty:
                    continue
                _method_curve(
                    ax,
                    m,
                    methods,
                    sel["level"],
                    sel[value],
                    label=f"{display(m)} ({len(sel)} levels)",
                    marker="o" if len(sel) <= 20 else None,
                    markersize=5,
                )
            b = base[base["dataset"] == dataset]
            if not b.empty:
                ax.axhline(
                    b[value].iloc[0],
                    color=COLORS["base"],
                    linestyle=":",
                    linewidth=1.2,
                    label="Base (no τ)",
                )
            ax.set_xlim(0, 1)
            ax.set_xlabel("quantile level τ used for the budget")
            ax.set_ylabel("accuracy (exact)" if value == "accuracy" else "cost  mean N / N_max")
            ax.grid(alpha=0.3)
            if r == 0:
                ax.set_title(panel_title(dataset_label(dataset)), fontsize=10)
    caption = (
        "Accuracy (top) and cost (bottom) when the per-question budget is N(Q(τ | h_i), 0.99) for "
        "each quantile level τ. Continuous calibrators can be queried at 100 levels; QR only at its "
        "11 trained levels. Low τ is pessimistic (large budgets), high τ optimistic (small "
        "budgets); Base ignores τ (dotted line)."
    )
    title = title or "IAS at C = 0.99 with the budget set from Q(τ | h)"
    return _finish(fig, axes, stem, title, caption)


def budget_figure(
    budgets: pd.DataFrame, stem: str | Path, n_max: int, c: float, title: str = ""
) -> tuple[list[Path], str]:
    """How many candidates each question gets at one C: a histogram per method and panel.

    Args:
        budgets: rows ``dataset, generator, method, question_id, n`` (and ``seed``, pooled) of
            the C sweep at the target ``c``.
        stem: output path without suffix.
        n_max: the pool size (largest budget).
        c: the target C the budgets were set for (named in the caption).
        title: figure title.

    Returns:
        (the written files, the caption).
    """
    edges = np.unique(np.round(np.geomspace(1, n_max + 1, 13)))
    df = budgets.copy()
    # every (method, seed) run counts once: a question's weight is 1 / (questions x seeds)
    size = df.groupby(["dataset", "generator", "method"], sort=False)["n"].transform("size")
    df["weight"] = 1.0 / size

    log_edges = np.log2(edges)

    def draw(ax, m: str, sel: pd.DataFrame, methods: list[str]) -> None:
        # grouped bars: each bin is split (in log space) into one slot per method, so methods
        # that pile into the same bin (often all at N_max) stay side by side, never hidden
        share, _ = np.histogram(sel["n"], bins=edges, weights=sel["weight"])
        slot = (log_edges[1:] - log_edges[:-1]) / len(methods)
        left = log_edges[:-1] + slot * methods.index(m)
        ax.bar(
            2.0**left,
            share,
            width=2.0 ** (left + slot) - 2.0**left,
            align="edge",
            color=color(m, methods),
            alpha=0.55 if m == "truth" else 0.9,
            label=display(m),
        )
        ax.set_xscale("log", base=2)

    fig, axes = _panel_grid(
        df,
        draw,
        xlabel="budget n_i (candidates for the question; log scale)",
        ylabel="share of questions",
        xlim=(1, n_max + 1),
    )
    caption = (
        f"Per-question budgets at C = {c:g}: the share of questions that get n_i candidates "
        f"(n_i from 1 to N_max = {n_max}, log-spaced bins), one bar per method, training "
        "seeds pooled. A calibrator whose estimates separate easy from hard questions spreads "
        "its budgets; one that cannot piles them at a single n. Within a bin the methods' bars "
        "stand side by side, in legend order. Per-question budgets of every "
        "C, τ and β are in `ias/**/budgets.parquet`."
    )
    title = title or f"Per-question budgets at C = {c:g}"
    files, caption = _finish(fig, axes, stem, title, caption)
    summary = (
        df.groupby(["dataset", "generator", "method"], sort=False)["n"]
        .describe()
        .reset_index()
        .assign(C=c)
    )
    return [*files, save_data(summary, stem)], caption
