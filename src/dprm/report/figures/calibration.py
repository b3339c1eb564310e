"""Figures of the calibrators themselves: a quantile curve (Fig. 1), coverage, reliability."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from dprm.report.figures.style import (
    COLORS,
    _finish,
    _mean_over_seeds,
    _method_curve,
    _panel_grid,
    _plt,
    color,
    save,
)
from dprm.report.tables import display


def flexibility_figure(
    stem: str | Path,
    ot_levels: np.ndarray,
    ot_values: np.ndarray,
    qr_levels: np.ndarray,
    qr_values: np.ndarray,
    truth_values: np.ndarray | None = None,
    title: str = "",
) -> tuple[list[Path], str]:
    """OT's quantile curve (many levels) vs QR's fixed levels for one record; crossings in red.

    Args:
        stem: output path without suffix (``.png`` and ``.pdf`` are written).
        ot_levels: [L] levels of OT's curve (also those of ``truth_values``).
        ot_values: [L] OT's quantiles.
        qr_levels: [L_qr] QR's trained levels.
        qr_values: [L_qr] QR's quantiles.
        truth_values: [L] the synthetic truth's quantiles, or None.
        title: figure title.

    Returns:
        (the written files, the caption).
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.0, 4.2))
    if truth_values is not None:
        ax.plot(
            ot_levels,
            truth_values,
            color=COLORS["truth"],
            linestyle="--",
            linewidth=1.2,
            label="true Q(τ | h) (synthetic truth)",
        )
    ax.plot(
        ot_levels,
        ot_values,
        color=COLORS["ot"],
        linewidth=2.2,
        label=f"OT: Q(τ | h) at {len(ot_levels)} levels",
    )
    ax.plot(qr_levels, qr_values, color=COLORS["qr"], linestyle=":", linewidth=1.0)
    ax.plot(
        qr_levels,
        qr_values,
        "o",
        color=COLORS["qr"],
        markersize=6,
        label=f"QR: {len(qr_levels)} trained levels",
    )
    crossing = np.flatnonzero(np.diff(qr_values) < 0)
    for i in crossing:
        ax.plot(qr_levels[i : i + 2], qr_values[i : i + 2], color="red", linewidth=2.5)
    if len(crossing):
        ax.plot(
            [], [], color="red", linewidth=2.5, label=f"QR quantile crossing ({len(crossing)}×)"
        )
    ax.set_xlabel("quantile level τ")
    ax.set_ylabel("success probability p  (Q(τ | h))")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    # below the axes: a curve can pass through any corner of the unit square
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)
    ax.set_title(
        title or "Flexibility: a continuous, monotone quantile function vs fixed levels",
        fontsize=10,
    )
    cap = (
        "Estimated quantile function of the success probability for one record. OT (blue) can be "
        f"queried at any level and is monotone by construction ({len(ot_levels)} levels shown); QR "
        f"(orange) exists only at its {len(qr_levels)} trained levels"
        + (
            f" and crosses itself {len(crossing)} time(s) here (red segments: a higher level predicts a lower p)"
            if len(crossing)
            else " (no crossing on this record)"
        )
        + (
            "; the green dashed line is the synthetic world's true quantile function."
            if truth_values is not None
            else "."
        )
    )
    return save(fig, stem), cap


def _diagonal_panels(
    df: pd.DataFrame,
    draw: Callable[..., None],
    xlabel: str,
    ylabel: str,
    *,
    y_max: float,
    order: str,
):
    """Unit-square panels per (generator, dataset) around the ideal diagonal.

    Args:
        df: tidy rows with ``dataset``, ``generator``, ``method`` columns.
        draw: ``draw(ax, method, rows, methods)``, as for :func:`_panel_grid`.
        xlabel: x-axis label.
        ylabel: y-axis label.
        y_max: upper y limit (x runs over [0, 1], y from 0).
        order: column to sort each method's rows by.

    Returns:
        (figure, axes [n_generators, n_datasets]).
    """
    return _panel_grid(
        df,
        draw,
        xlabel=xlabel,
        ylabel=ylabel,
        xlim=(0, 1),
        ylim=(0, y_max),
        order=order,
        diagonal=True,
        width=4.2,
        height=3.6,
    )


def coverage_figure(
    curves: pd.DataFrame, stem: str | Path, title: str = ""
) -> tuple[list[Path], str]:
    """Quantile calibration curves, a panel per (generator, dataset).

    Args:
        curves: rows ``dataset, generator, method, level, coverage`` (and ``seed``, averaged).
        stem: output path without suffix.
        title: figure title.

    Returns:
        (the written files, the caption).
    """
    df = _mean_over_seeds(curves, ["dataset", "generator", "method", "level"], ["coverage"])

    def draw(ax, m: str, sel: pd.DataFrame, methods: list[str]) -> None:
        marker = "o" if len(sel) <= 20 else None
        _method_curve(ax, m, methods, sel["level"], sel["coverage"], marker=marker, markersize=3)

    fig, axes = _diagonal_panels(
        df, draw, "nominal level τ", "coverage  P(y ≤ Q(τ | h))", y_max=1.02, order="level"
    )
    caption = (
        "Quantile calibration: the share of records whose observed success rate y lies at or "
        "below the predicted τ-quantile, against τ. A calibrated quantile function follows the "
        "diagonal; above it the quantiles are too high (optimistic), below too low. The mean "
        "absolute gap over the 11 levels is the calibration area used for early stopping."
    )
    return _finish(fig, axes, stem, title or "Quantile calibration curves", caption)


def reliability_figure(
    bins: pd.DataFrame, stem: str | Path, title: str = ""
) -> tuple[list[Path], str]:
    """Reliability diagram of the point estimates, a panel per (generator, dataset).

    Args:
        bins: rows ``dataset, generator, method, bin, p_mean, y_mean, count`` (and ``seed``).
        stem: output path without suffix.
        title: figure title.

    Returns:
        (the written files, the caption).
    """
    df = bins[bins["count"] > 0]
    df = _mean_over_seeds(
        df, ["dataset", "generator", "method", "bin"], ["p_mean", "y_mean", "count"]
    )

    def draw(ax, m: str, sel: pd.DataFrame, methods: list[str]) -> None:
        share = sel["count"] / sel["count"].sum()
        kw = {"color": color(m, methods)}
        ax.plot(sel["p_mean"], sel["y_mean"], linewidth=1.2, alpha=0.9, label=display(m), **kw)
        ax.scatter(sel["p_mean"], sel["y_mean"], s=8 + 150 * share, alpha=0.8, **kw)

    fig, axes = _diagonal_panels(
        df, draw, "mean predicted p̂ in bin", "mean observed success rate y", y_max=1, order="bin"
    )
    caption = (
        "Reliability of the point estimates p̂ (Base: the raw PRM score; calibrators with a "
        "quantile function: the mean of Q; with fixed levels: the median; point calibrators: "
        "their estimate) on the 12 ECE bins: mean observed success "
        "rate against mean prediction, marker area proportional to the bin's share of records. "
        "Points below the diagonal are over-confident; ECE is the count-weighted mean vertical gap."
    )
    title = title or "Reliability diagram (12 equal-width ECE bins)"
    return _finish(fig, axes, stem, title, caption)
