"""What every figure shares: colours and line styles, panel grids, the legend, saving."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from dprm.report.tables import dataset_label, dataset_order, display, method_order

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


def _method_curve(ax, method: str, methods: list[str], x, y, label: str | None = None, **kw):
    """One method's curve in its colour and line style.

    Args:
        ax: the axes to draw on.
        method: the method drawn.
        methods: all methods of the figure (for :func:`color`).
        x: [P] x values.
        y: [P] y values.
        label: legend label (default: the method's display name).
        kw: further ``ax.plot`` keywords (markers).
    """
    label = display(method) if label is None else label
    ax.plot(x, y, color=color(method, methods), label=label, **kw, **_style(method))


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


def _finish(fig, axes, stem: str | Path, title: str, caption: str) -> tuple[list[Path], str]:
    """Title, layout and the shared legend; then save.

    Returns:
        (the written files, ``caption``).
    """
    fig.suptitle(title, fontsize=11)
    bottom = min(0.15, 0.5 / fig.get_figheight())  # room for the legend row(s)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    _legend(fig, axes)
    return save(fig, stem), caption


def _mean_over_seeds(df: pd.DataFrame, keys: list[str], values: list[str]) -> pd.DataFrame:
    """Mean of ``values`` per ``keys`` (those present), i.e. over seeds and anything else."""
    keys = [k for k in keys if k in df.columns]
    return df.groupby(keys, sort=False, dropna=False)[values].mean().reset_index()


def _seed_band(df: pd.DataFrame, keys: list[str], values: list[str]) -> pd.DataFrame:
    """Per ``keys``: the seed mean of each value, its min and max over seeds, and ``n_seeds``.

    Columns ``{value}`` (mean), ``{value}_min``, ``{value}_max`` and ``n_seeds`` (1 when the
    frame has no ``seed`` column).
    """
    keys = [k for k in keys if k in df.columns]
    grouped = df.groupby(keys, sort=False, dropna=False)
    out = grouped[values].mean()
    for v in values:
        out[f"{v}_min"] = grouped[v].min()
        out[f"{v}_max"] = grouped[v].max()
    out["n_seeds"] = grouped["seed"].nunique() if "seed" in df.columns else 1
    return out.reset_index()


def save_data(frame: pd.DataFrame, stem: str | Path) -> Path:
    """Write a figure's plotted numbers as ``stem.csv`` beside it (atomically)."""
    from dprm.io import atomic_path

    stem = Path(stem)
    path = stem.parent / f"{stem.name}.csv"
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    return path


def panel_title(text: str, width: int = 44) -> str:
    """``text`` wrapped to lines of at most ``width`` characters (titles never run into the
    neighbouring panel: a recipe's set names can be long)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def _datasets(df: pd.DataFrame) -> list[str]:
    """The datasets of ``df`` in table order (train, id, ood), unknown ones last."""
    return sorted(dict.fromkeys(df["dataset"]), key=dataset_order)


def _generators(df: pd.DataFrame) -> list[str]:
    """The generators of ``df`` in order of appearance."""
    return list(dict.fromkeys(df["generator"]))


def _grid(n_rows: int, n_cols: int, width: float = 4.6, height: float = 3.3):
    """A figure with [n_rows, n_cols] axes of ``width`` x ``height`` inches each."""
    plt = _plt()
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(width * n_cols, height * n_rows), squeeze=False
    )
    return fig, axes


def _select(
    df: pd.DataFrame, dataset: str, generator: str, method: str, order: str | None = None
) -> pd.DataFrame:
    """The rows of one (dataset, generator, method), sorted by ``order`` if given."""
    sel = df[(df["dataset"] == dataset) & (df["generator"] == generator) & (df["method"] == method)]
    return sel if order is None else sel.sort_values(order)


def _panel_grid(
    df: pd.DataFrame,
    draw: Callable[..., None],
    *,
    xlabel: str,
    ylabel: str,
    xlim: tuple[float, float],
    ylim: tuple[float, float] | None = None,
    order: str | None = None,
    diagonal: bool = False,
    reference: Callable[..., None] | None = None,
    width: float = 4.6,
    height: float = 3.3,
):
    """A panel per (generator row, dataset column), one curve per method present in it.

    Args:
        df: tidy rows with ``dataset``, ``generator``, ``method`` columns.
        draw: ``draw(ax, method, rows, methods)`` draws one method's (non-empty) rows.
        xlabel: x-axis label of every panel.
        ylabel: y-axis label of every panel.
        xlim: x-axis limits.
        ylim: y-axis limits (None: matplotlib's).
        order: column to sort each method's rows by (None: as they are).
        diagonal: draw the dashed ``ideal`` diagonal first.
        reference: ``reference(ax, generator, dataset)`` draws before the methods, if given.
        width: inches per panel.
        height: inches per panel.

    Returns:
        (figure, axes [n_generators, n_datasets]).
    """
    datasets, generators = _datasets(df), _generators(df)
    methods = method_order(df["method"])
    fig, axes = _grid(len(generators), len(datasets), width=width, height=height)
    for r, gen in enumerate(generators):
        for c, dataset in enumerate(datasets):
            ax = axes[r, c]
            if diagonal:
                ax.plot([0, 1], [0, 1], color="k", linewidth=0.8, linestyle="--", label="ideal")
            if reference is not None:
                reference(ax, gen, dataset)
            for m in methods:
                sel = _select(df, dataset, gen, m, order)
                if not sel.empty:
                    draw(ax, m, sel, methods)
            ax.set_xlim(*xlim)
            if ylim is not None:
                ax.set_ylim(*ylim)
            ax.set_title(panel_title(f"{gen} · {dataset_label(dataset)}"), fontsize=9)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
    return fig, axes
