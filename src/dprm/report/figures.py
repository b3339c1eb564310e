"""The paper's figures (matplotlib; PNG + PDF), each returning its files and a caption.

Every function takes tidy frames (one row per point), so it works for any grid and any set of
methods: Base / OT / QR keep the paper's colours (grey / blue / orange), further calibrators get
the next colours, and the synthetic truth oracle (if present) is a thin green dashed reference.

* :func:`flexibility_figure` -- one record: OT's Q(tau | h) at 100 levels vs QR's 11 points,
  crossings marked (paper Fig. 1).
* :func:`frontier_figure` -- IAS cost-accuracy frontiers from the C sweep, a panel per
  (generator, dataset) (paper Fig. 2, appendix grids).
* :func:`beta_figure` -- beta-threshold early stopping curves at C = 0.9 (paper Fig. 3).
* :func:`tau_figure` -- accuracy and cost against the quantile level tau at C = 0.99 (Fig. 4).
* :func:`coverage_figure` -- quantile calibration curves P(y <= Q(tau | h)) against tau.
* :func:`reliability_figure` -- reliability diagram of the point estimates on the 12 ECE bins.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dprm.report.tables import DATASET_LABELS, display, method_order

COLORS = {
    "base": "0.35",
    "ot": "#1f77b4",
    "qr": "#ff7f0e",
    "truth": "#2ca02c",
    # beyond the paper: fixed colours so a method looks the same in every figure
    "mono": "#8c564b",
    "binomial": "#9467bd",
    "isotonic": "#e377c2",
    "platt": "#17becf",
    "conformal": "#bcbd22",
}
EXTRA_COLORS = ["#d62728", "#7f7f7f", "#393b79", "#637939", "#8c6d31", "#843c39"]
PAPER_METHODS = ("base", "ot", "qr")


def _plt():
    """matplotlib.pyplot with the Agg backend, or a clear error if the extra is missing."""
    try:
        import matplotlib
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "figures need matplotlib: install the 'plots' extra (pip install 'dprm[plots]')"
        ) from err
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def color(method: str, methods: list[str] | None = None) -> str:
    """A method's colour: fixed for known methods, a stable hash-picked one otherwise."""
    if method in COLORS:
        return COLORS[method]
    import zlib

    return EXTRA_COLORS[zlib.crc32(method.encode()) % len(EXTRA_COLORS)]


def _style(method: str) -> dict:
    """Paper methods bold, other calibrators thin, the truth oracle dashed."""
    if method == "truth":
        return {"linestyle": "--", "linewidth": 1.2, "alpha": 0.8}
    if method in PAPER_METHODS:
        return {"linewidth": 2.0, "zorder": 3}
    return {"linewidth": 1.0, "alpha": 0.75}


def _legend(fig, axes) -> None:
    """One legend for the whole figure, below the panels (never over the data)."""
    handles, labels = {}, {}
    for ax in axes.ravel():
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles[lab], labels[lab] = h, lab
    fig.legend(
        list(handles.values()),
        list(labels),
        loc="lower center",
        ncol=min(len(labels), 5),
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, 0.0),
    )


def _finish(fig, axes, title: str) -> None:
    fig.suptitle(title, fontsize=11)
    bottom = min(0.15, 0.5 / fig.get_figheight())  # room for the legend row(s)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    _legend(fig, axes)


def save(fig, stem: str | Path) -> list[Path]:
    """Write ``stem.png`` (150 dpi) and ``stem.pdf`` atomically; close the figure."""
    from dprm.io import atomic_path

    stem = Path(stem)
    paths = []
    for ext, kw in (("png", {"dpi": 150}), ("pdf", {})):
        final = stem.parent / f"{stem.name}.{ext}"  # names may contain dots (qwen-2.5-7b)
        with atomic_path(final) as tmp:
            fig.savefig(tmp, format=ext, bbox_inches="tight", **kw)
        paths.append(final)
    _plt().close(fig)
    return paths


def _mean_over_seeds(df: pd.DataFrame, keys: list[str], values: list[str]) -> pd.DataFrame:
    keys = [k for k in keys if k in df.columns]
    return df.groupby(keys, sort=False, dropna=False)[values].mean().reset_index()


def _datasets(df: pd.DataFrame) -> list[str]:
    found = list(dict.fromkeys(df["dataset"]))
    return sorted(
        found, key=lambda d: (list(DATASET_LABELS).index(d) if d in DATASET_LABELS else 99, d)
    )


def _grid(n_rows: int, n_cols: int, width: float = 4.6, height: float = 3.3):
    plt = _plt()
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(width * n_cols, height * n_rows), squeeze=False
    )
    return fig, axes


# ----------------------------------------------------------------------------- Fig. 1
def flexibility_figure(
    stem: str | Path,
    ot_levels: np.ndarray,
    ot_values: np.ndarray,
    qr_levels: np.ndarray,
    qr_values: np.ndarray,
    truth_values: np.ndarray | None = None,
    title: str = "",
) -> tuple[list[Path], str]:
    """OT's quantile curve (many levels) vs QR's fixed levels for one record; crossings in red."""
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
    ax.legend(loc="upper left", fontsize=8)
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


# ----------------------------------------------------------------------------- Fig. 2
def frontier_figure(
    ias: pd.DataFrame, stem: str | Path, uniform: pd.DataFrame | None = None, title: str = ""
) -> tuple[list[Path], str]:
    """IAS accuracy vs normalised cost from the C sweep; rows = generators, columns = datasets.

    Args:
        ias: rows of ``dprm ias`` (sweep "C" used) plus ``dataset``, ``generator`` (and
            ``seed``, averaged).
        uniform: optional ``dataset, generator, n, cost, accuracy`` rows of plain best-of-n.
    """
    df = _mean_over_seeds(
        ias[ias["sweep"] == "C"], ["dataset", "generator", "method", "C"], ["cost", "accuracy"]
    )
    datasets, generators = _datasets(df), list(dict.fromkeys(df["generator"]))
    methods = method_order(df["method"])
    fig, axes = _grid(len(generators), len(datasets))
    for r, gen in enumerate(generators):
        for c, dataset in enumerate(datasets):
            ax = axes[r, c]
            if uniform is not None:
                u = uniform[(uniform["dataset"] == dataset) & (uniform["generator"] == gen)]
                u = _mean_over_seeds(u, ["n"], ["cost", "accuracy"])
                ax.plot(
                    u["cost"],
                    u["accuracy"],
                    color="0.75",
                    linewidth=1.2,
                    label="same n for all (no IAS)",
                )
            for m in methods:
                sel = df[
                    (df["dataset"] == dataset) & (df["generator"] == gen) & (df["method"] == m)
                ]
                if sel.empty:
                    continue
                ax.plot(
                    sel["cost"],
                    sel["accuracy"],
                    marker="o",
                    markersize=3.5,
                    color=color(m, methods),
                    label=display(m),
                    **_style(m),
                )
            ax.set_xlim(0, 1.02)
            ax.set_title(f"{gen} · {DATASET_LABELS.get(dataset, dataset)}", fontsize=9)
            ax.set_xlabel("normalised cost  mean N / N_max")
            ax.set_ylabel("accuracy (exact expectation)")
            ax.grid(alpha=0.3)
    _finish(
        fig,
        axes,
        title or "Instance-adaptive best-of-N: cost–accuracy frontier over C ∈ [0.5, 0.999]",
    )
    cap = (
        "IAS best-of-N: accuracy against normalised cost mean N_i / 64 as the target C sweeps "
        "{0.5, …, 0.999} (one marker per C). Each method allocates per-question budgets from its "
        "own success estimate (Base: the raw PRM score; QR: Q(0.1 | h); distributional methods: "
        "the mixture over 100 quantile levels); the answer is always the candidate with the "
        "highest raw PRM score. A wider horizontal span means the method's budgets respond to C; "
        "grey: the same n for every question, for reference."
    )
    return save(fig, stem), cap


# ----------------------------------------------------------------------------- Fig. 3
def beta_figure(
    ias: pd.DataFrame, stem: str | Path, methods: list[str] | None = None, title: str = ""
) -> tuple[list[Path], str]:
    """beta-threshold early stopping (C = 0.9): accuracy vs cost per generator, beta annotated."""
    df = _mean_over_seeds(
        ias[ias["sweep"] == "beta"],
        ["dataset", "generator", "method", "level"],
        ["cost", "accuracy"],
    )
    methods = methods or [m for m in method_order(df["method"]) if m != "truth"]
    df = df[df["method"].isin(methods)]
    datasets, generators = _datasets(df), list(dict.fromkeys(df["generator"]))
    fig, axes = _grid(1, len(datasets), width=5.2, height=4.0)
    plt = _plt()
    gen_colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, max(len(generators), 1)))
    for c, dataset in enumerate(datasets):
        ax = axes[0, c]
        for g, gen in enumerate(generators):
            for k, m in enumerate(methods):
                sel = df[
                    (df["dataset"] == dataset) & (df["generator"] == gen) & (df["method"] == m)
                ].sort_values("level")
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
        ax.set_title(DATASET_LABELS.get(dataset, dataset), fontsize=10)
        ax.set_xlabel("normalised cost  mean draws / N_max")
        ax.set_ylabel("accuracy (exact expectation)")
        ax.grid(alpha=0.3)
    _finish(fig, axes, title or "β-threshold early stopping at C = 0.9 (β = 0, 0.1, …, 1)")
    cap = (
        "Calibrated best-of-N with β-threshold early stopping: the cap N_i comes from the mixture "
        "rule at C = 0.9; candidates are drawn one at a time and sampling stops at the first whose "
        "raw PRM score reaches Q(β | h_i), or at N_i. Each curve sweeps β from 0 (stop early, low "
        "cost) to 1 (stop late); cost and accuracy are exact expectations over the random order."
    )
    return save(fig, stem), cap


# ----------------------------------------------------------------------------- Fig. 4
def tau_figure(ias: pd.DataFrame, stem: str | Path, title: str = "") -> tuple[list[Path], str]:
    """Accuracy (top) and cost (bottom) against tau at C = 0.99; Base as a flat reference."""
    tau = _mean_over_seeds(
        ias[ias["sweep"] == "tau"], ["dataset", "method", "level"], ["cost", "accuracy"]
    )
    base = ias[(ias["sweep"] == "C") & (ias["method"] == "base") & np.isclose(ias["C"], 0.99)]
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
                few = len(sel) <= 20
                ax.plot(
                    sel["level"],
                    sel[value],
                    marker="o" if few else None,
                    markersize=5,
                    color=color(m, methods),
                    label=f"{display(m)} ({len(sel)} levels)",
                    **_style(m),
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
                ax.set_title(DATASET_LABELS.get(dataset, dataset), fontsize=10)
    _finish(fig, axes, title or "IAS at C = 0.99 with the budget set from Q(τ | h)")
    cap = (
        "Accuracy (top) and cost (bottom) when the per-question budget is N(Q(τ | h_i), 0.99) for "
        "each quantile level τ. Continuous calibrators can be queried at 100 levels; QR only at its "
        "11 trained levels. Low τ is pessimistic (large budgets), high τ optimistic (small "
        "budgets); Base ignores τ (dotted line)."
    )
    return save(fig, stem), cap


# ----------------------------------------------------------------------------- calibration
def coverage_figure(
    curves: pd.DataFrame, stem: str | Path, title: str = ""
) -> tuple[list[Path], str]:
    """Quantile calibration curves; ``curves`` rows: dataset, generator, method, level, coverage."""
    df = _mean_over_seeds(curves, ["dataset", "generator", "method", "level"], ["coverage"])
    datasets, generators = _datasets(df), list(dict.fromkeys(df["generator"]))
    methods = method_order(df["method"])
    fig, axes = _grid(len(generators), len(datasets), width=4.2, height=3.6)
    for r, gen in enumerate(generators):
        for c, dataset in enumerate(datasets):
            ax = axes[r, c]
            ax.plot([0, 1], [0, 1], color="k", linewidth=0.8, linestyle="--", label="ideal")
            for m in methods:
                sel = df[
                    (df["dataset"] == dataset) & (df["generator"] == gen) & (df["method"] == m)
                ].sort_values("level")
                if not sel.empty:
                    ax.plot(
                        sel["level"],
                        sel["coverage"],
                        marker="o" if len(sel) <= 20 else None,
                        markersize=3,
                        color=color(m, methods),
                        label=display(m),
                        **_style(m),
                    )
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1.02)
            ax.set_title(f"{gen} · {DATASET_LABELS.get(dataset, dataset)}", fontsize=9)
            ax.set_xlabel("nominal level τ")
            ax.set_ylabel("coverage  P(y ≤ Q(τ | h))")
            ax.grid(alpha=0.3)
    _finish(fig, axes, title or "Quantile calibration curves")
    cap = (
        "Quantile calibration: the share of records whose observed success rate y lies at or "
        "below the predicted τ-quantile, against τ. A calibrated quantile function follows the "
        "diagonal; above it the quantiles are too high (optimistic), below too low. The mean "
        "absolute gap over the 11 levels is the calibration area used for early stopping."
    )
    return save(fig, stem), cap


def reliability_figure(
    bins: pd.DataFrame, stem: str | Path, title: str = ""
) -> tuple[list[Path], str]:
    """Reliability diagram; ``bins`` rows: dataset, generator, method, bin, p_mean, y_mean, count."""
    df = bins[bins["count"] > 0]
    df = _mean_over_seeds(
        df, ["dataset", "generator", "method", "bin"], ["p_mean", "y_mean", "count"]
    )
    datasets, generators = _datasets(df), list(dict.fromkeys(df["generator"]))
    methods = method_order(df["method"])
    fig, axes = _grid(len(generators), len(datasets), width=4.2, height=3.6)
    for r, gen in enumerate(generators):
        for c, dataset in enumerate(datasets):
            ax = axes[r, c]
            ax.plot([0, 1], [0, 1], color="k", linewidth=0.8, linestyle="--", label="ideal")
            for m in methods:
                sel = df[
                    (df["dataset"] == dataset) & (df["generator"] == gen) & (df["method"] == m)
                ].sort_values("bin")
                if sel.empty:
                    continue
                share = sel["count"] / sel["count"].sum()
                ax.plot(
                    sel["p_mean"],
                    sel["y_mean"],
                    color=color(m, methods),
                    linewidth=1.2,
                    alpha=0.9,
                    label=display(m),
                )
                ax.scatter(
                    sel["p_mean"],
                    sel["y_mean"],
                    s=8 + 150 * share,
                    color=color(m, methods),
                    alpha=0.8,
                )
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_title(f"{gen} · {DATASET_LABELS.get(dataset, dataset)}", fontsize=9)
            ax.set_xlabel("mean predicted p̂ in bin")
            ax.set_ylabel("mean observed success rate y")
            ax.grid(alpha=0.3)
    _finish(fig, axes, title or "Reliability diagram (12 equal-width ECE bins)")
    cap = (
        "Reliability of the point estimates p̂ (Base: the raw PRM score; OT and other "
        "distributions: the mean of Q; QR: its median) on the 12 ECE bins: mean observed success "
        "rate against mean prediction, marker area proportional to the bin's share of records. "
        "Points below the diagonal are over-confident; ECE is the count-weighted mean vertical gap."
    )
    return save(fig, stem), cap
