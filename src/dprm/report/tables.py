"""The paper's Table 1 for any grid of (dataset, generator, PRM) and any set of methods.

Input is a tidy metrics frame, one row per (dataset, generator, prm, method[, seed]) with the
columns of ``dprm evaluate`` (``brier``, ``pos_brier``, ``ece``, ``wql``). Seeds are averaged
(the CSV keeps their standard deviation). Per PRM the table has, per dataset, one row per
generator with Brier, PosBrier, ECE and WQL for every method (Base / OT / QR first, then the
others), the best value per (dataset, generator, metric) marked, and one "Avg. % improvement"
row per non-Base method: the mean over generators of 100 (Base - method) / Base, except for WQL
where Base has no quantiles and the reference is QR (the paper's dagger); QR's own WQL
improvement is "--". Lower is better for every metric.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

#: (column, header) of the four metrics of Table 1
METRICS: tuple[tuple[str, str], ...] = (
    ("brier", "Brier"),
    ("pos_brier", "PosBrier"),
    ("ece", "ECE"),
    ("wql", "WQL"),
)
DISPLAY = {"base": "Base", "ot": "OT", "qr": "QR", "mono": "Mono", "truth": "Truth"}
#: dataset labels, each naming its evaluation protocol (order = table order)
DATASET_LABELS = {
    "train": "ID, paper protocol (MATH-train-like; training questions included)",
    "id": "ID, held out (MATH500-like)",
    "ood": "OOD, held out (AIME-like)",
}
#: the labels in use (``dataset_labels`` swaps them for a run of real data, whose sets have the
#: user's names); read through :func:`dataset_label`
_LABELS: ContextVar[Mapping[str, str]] = ContextVar("dataset_labels", default=DATASET_LABELS)


def dataset_label(dataset: str) -> str:
    """The display label of a dataset key (``train`` / ``id`` / ``ood``) in the current context."""
    return _LABELS.get().get(dataset, dataset)


def dataset_order(dataset: str) -> tuple[int, str]:
    """Sort key: ``train``, ``id``, ``ood`` first (table order), unknown keys last."""
    keys = list(DATASET_LABELS)
    return (keys.index(dataset) if dataset in keys else 99, dataset)


@contextlib.contextmanager
def dataset_labels(labels: Mapping[str, str]) -> Iterator[None]:
    """Use ``labels`` (dataset key -> label; missing keys keep the default) inside the block.

    Tables and figures of a recipe's run name the user's sets, not the synthetic grid's.
    """
    token = _LABELS.set({**DATASET_LABELS, **labels})
    try:
        yield
    finally:
        _LABELS.reset(token)


#: the two evaluation protocols: the datasets of their tables. ``held-out``: questions no
#: calibrator trained or early-stopped on (the headline); ``paper``: ID on the training split,
#: as the paper evaluated MATH (for the side-by-side with its tables)
PROTOCOLS = {"held-out": ("id", "ood"), "paper": ("train", "ood")}
#: the reference of the WQL improvement (Base has no WQL)
WQL_REFERENCE = "qr"
TIE_TOL = 1e-12


def display(method: str) -> str:
    """Display name: Base / OT / QR / Mono, others capitalised; a bound is marked ‡."""
    name = DISPLAY.get(method, method[:1].upper() + method[1:])
    return f"{name} ‡" if method in BOUNDS else name


#: calibrators whose output is a bound by design, not an estimate: ``conformal`` lowers its
#: inner calibrator's quantiles to a one-sided finite-sample guarantee, so it is pessimistic on
#: purpose. Tables show it (marked ‡) but never mark it best: a bound is not a winner.
BOUNDS = ("conformal",)
BOUND_NOTE = (
    "‡ Conformal is a one-sided lower bound with a finite-sample coverage guarantee "
    "(pessimistic by design): shown for reference, never marked best; choose among the others."
)


def _best_marks(block: pd.DataFrame) -> pd.DataFrame:
    """Per row, the columns (methods) within TIE_TOL of the lowest value, bounds excluded."""
    methods = block.columns
    estimates = [m for m in methods if m not in BOUNDS]
    low = block[estimates].min(axis=1, skipna=True) if estimates else block.min(axis=1)
    marks = block.le(low + TIE_TOL, axis=0) & block.notna()
    for m in methods:
        if m in BOUNDS:
            marks[m] = False
    return marks


def method_order(methods) -> list[str]:
    """Base, OT, QR first (those present), then the others in sorted order."""
    methods = list(dict.fromkeys(methods))
    head = [m for m in ("base", "ot", "qr") if m in methods]
    return head + sorted(m for m in methods if m not in head)


@dataclass
class CalibrationTable:
    """One PRM's Table 1.

    Attributes:
        prm: PRM name.
        methods: column order.
        mean: index (dataset, generator), columns (metric, method): seed means.
        std: same layout: standard deviation over seeds (NaN with one seed).
        best: same layout, bool: the best (lowest) value of its (row, metric).
        improvement: index (dataset, method), columns metric: average % improvement (NaN = "--").
        n_seeds: seeds averaged per cell (max over cells).
    """

    prm: str
    methods: list[str]
    mean: pd.DataFrame
    std: pd.DataFrame
    best: pd.DataFrame
    improvement: pd.DataFrame
    n_seeds: int


def build_table(metrics: pd.DataFrame, prm: str | None = None) -> CalibrationTable:
    """Assemble Table 1 for one PRM from a tidy metrics frame (see the module docstring)."""
    need = {"dataset", "generator", "method"} | {m for m, _ in METRICS}
    missing = need - set(metrics.columns)
    if missing:
        raise ValueError(f"metrics frame lacks columns {sorted(missing)}")
    df = metrics
    if prm is not None:
        df = df[df["prm"] == prm]
    elif "prm" in df.columns and df["prm"].nunique() > 1:
        raise ValueError("several PRMs in the frame; pass prm=")
    if df.empty:
        raise ValueError(f"no metrics rows for prm={prm!r}")
    methods = method_order(df["method"])
    keys = ["dataset", "generator", "method"]
    cols = [m for m, _ in METRICS]
    grouped = df.groupby(keys, sort=False)[cols]
    mean_long, std_long = grouped.mean(), grouped.std(ddof=1)
    n_seeds = int(grouped.size().max())
    datasets = list(dict.fromkeys(df["dataset"]))
    order = sorted(datasets, key=dataset_order)
    rows = [(d, g) for d in order for g in dict.fromkeys(df.loc[df["dataset"] == d, "generator"])]
    columns = pd.MultiIndex.from_product([cols, methods], names=["metric", "method"])

    def wide(long: pd.DataFrame) -> pd.DataFrame:
        out = pd.DataFrame(
            np.nan,
            index=pd.MultiIndex.from_tuples(rows, names=["dataset", "generator"]),
            columns=columns,
        )
        for (d, g, m), vals in long.iterrows():
            for metric in cols:
                out.loc[(d, g), (metric, m)] = vals[metric]
        return out

    mean, std = wide(mean_long), wide(std_long)
    best = pd.DataFrame(False, index=mean.index, columns=columns)
    for metric in cols:
        best[metric] = _best_marks(mean[metric])
    improvement = _improvements(mean, methods, order)
    name = prm if prm is not None else (str(df["prm"].iloc[0]) if "prm" in df.columns else "")
    return CalibrationTable(name, methods, mean, std, best, improvement, n_seeds)


def subset(table: CalibrationTable, methods: list[str]) -> CalibrationTable:
    """The same table restricted to ``methods`` (best marks recomputed among them)."""
    keep = [m for m in table.methods if m in methods]
    cols = [(metric, m) for metric, _ in METRICS for m in keep]
    mean, std = table.mean[cols], table.std[cols]
    best = pd.DataFrame(False, index=mean.index, columns=mean.columns)
    for metric, _ in METRICS:
        best[metric] = _best_marks(mean[metric])
    datasets = list(dict.fromkeys(mean.index.get_level_values(0)))
    return CalibrationTable(
        table.prm, keep, mean, std, best, _improvements(mean, keep, datasets), table.n_seeds
    )


def _improvements(mean: pd.DataFrame, methods: list[str], datasets: list[str]) -> pd.DataFrame:
    """Average over generators of 100 (reference - method) / reference (see module docstring)."""
    cols = [m for m, _ in METRICS]
    idx = pd.MultiIndex.from_product(
        [datasets, [m for m in methods if m != "base"]], names=["dataset", "method"]
    )
    out = pd.DataFrame(np.nan, index=idx, columns=cols)
    for d in datasets:
        block = mean.loc[d]
        for method in methods:
            if method == "base":
                continue
            for metric in cols:
                ref = WQL_REFERENCE if metric == "wql" else "base"
                if method == ref or ref not in methods:
                    continue
                r, v = block[(metric, ref)].to_numpy(float), block[(metric, method)].to_numpy(float)
                ok = np.isfinite(r) & np.isfinite(v) & (np.abs(r) > 0)
                if ok.any():
                    out.loc[(d, method), metric] = float(np.mean(100.0 * (r[ok] - v[ok]) / r[ok]))
    return out


# ----------------------------------------------------------------------------- rendering
def _improvement_methods(table: CalibrationTable, dataset: str) -> list[str]:
    """Non-Base methods with at least one value in ``dataset`` (others get no improvement row)."""
    block = table.mean.loc[dataset]
    return [
        m
        for m in table.methods
        if m != "base" and np.isfinite(block.xs(m, axis=1, level="method").to_numpy(float)).any()
    ]


def _fmt(v: float) -> str:
    return "--" if not np.isfinite(v) else f"{v:.4f}"


def _pct(v: float) -> str:
    return "--" if not np.isfinite(v) else f"{v:+.1f}%"


def _cell(table: CalibrationTable, row: tuple[str, str], column: tuple[str, str]) -> str:
    """A value cell: the seed mean, with ``± std`` over seeds where the cell has several."""
    text = _fmt(table.mean.loc[row, column])
    std = table.std.loc[row, column]
    return text + (f" ± {std:.4f}" if table.n_seeds > 1 and np.isfinite(std) else "")


def caption(table: CalibrationTable) -> str:
    """A caption that says what the table shows and how to read it."""
    seeds = (
        f"mean ± standard deviation over {table.n_seeds} training seeds (Base has no seeds); "
        if table.n_seeds > 1
        else ""
    )
    return (
        f"Calibration metrics for PRM {table.prm} (all lower is better; {seeds}best per "
        "(dataset, generator, metric) in bold). 'Avg. % improv.' is the mean over generators of "
        "100 (Base - method) / Base; for WQL (marked †) the reference is QR, since Base has no "
        "quantile predictions."
    ) + (f" {BOUND_NOTE}" if any(m in BOUNDS for m in table.methods) else "")


def to_markdown(table: CalibrationTable) -> str:
    """GitHub-flavoured Markdown of the table, best values in bold."""
    names = [display(m) for m in table.methods]
    head = ["Dataset", "Generator"] + [f"{h} {n}" for _, h in METRICS for n in names]
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|",
    ]
    for dataset in dict.fromkeys(table.mean.index.get_level_values(0)):
        label = dataset_label(dataset)
        for gen in table.mean.loc[dataset].index:
            cells = []
            for metric, _ in METRICS:
                for m in table.methods:
                    text = _cell(table, (dataset, gen), (metric, m))
                    cells.append(
                        f"**{text}**" if table.best.loc[(dataset, gen), (metric, m)] else text
                    )
            lines.append(f"| {label} | {gen} | " + " | ".join(cells) + " |")
        for m in _improvement_methods(table, dataset):
            cells = []
            for metric, _ in METRICS:
                for col in table.methods:
                    v = table.improvement.loc[(dataset, m), metric] if col == m else np.nan
                    cells.append(_pct(v) + ("†" if metric == "wql" and np.isfinite(v) else ""))
            lines.append(f"| {label} | *Avg. % improv. {display(m)}* | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _tex(text: str) -> str:
    text = text.replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")
    return text.replace("‡", r"$^\ddagger$")


def to_latex(table: CalibrationTable) -> str:
    """A booktabs LaTeX table in the paper's layout (needs booktabs, multirow, graphicx)."""
    k = len(table.methods)
    names = [_tex(display(m)) for m in table.methods]
    spec = "ll|" + "|".join(["r" * k] * len(METRICS))
    cap = _tex(caption(table)).replace("†", r"$^\dagger$")
    out = [
        r"\begin{table}[h!]",
        r"\centering",
        rf"\caption{{{cap}}}",
        r"\resizebox{\textwidth}{!}{%",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        "Dataset & Model & "
        + " & ".join(rf"\multicolumn{{{k}}}{{c}}{{{h}}}" for _, h in METRICS)
        + r" \\",
        " & & " + " & ".join(names * len(METRICS)) + r" \\",
        r"\midrule",
    ]
    datasets = list(dict.fromkeys(table.mean.index.get_level_values(0)))
    for i, dataset in enumerate(datasets):
        gens = list(table.mean.loc[dataset].index)
        label = _tex(dataset_label(dataset))
        for j, gen in enumerate(gens):
            cells = []
            for metric, _ in METRICS:
                for m in table.methods:
                    text = _cell(table, (dataset, gen), (metric, m)).replace("±", r"$\pm$")
                    cells.append(
                        rf"\textbf{{{text}}}"
                        if table.best.loc[(dataset, gen), (metric, m)]
                        else text
                    )
            first = rf"\multirow{{{len(gens)}}}{{*}}{{{label}}}" if j == 0 else ""
            out.append(f"{first} & {_tex(gen)} & " + " & ".join(cells) + r" \\")
        others = _improvement_methods(table, dataset)
        for j, m in enumerate(others):
            cells = []
            for metric, _ in METRICS:
                for col in table.methods:
                    v = table.improvement.loc[(dataset, m), metric] if col == m else np.nan
                    cell = _tex(_pct(v))
                    cells.append(
                        cell + (r"$^\dagger$" if metric == "wql" and np.isfinite(v) else "")
                    )
            first = (
                rf"\multirow{{{len(others)}}}{{*}}{{\textit{{Avg.\ \%\ improv.}}}}"
                if j == 0
                else ""
            )
            out.append(f"{first} & {display(m)} & " + " & ".join(cells) + r" \\")
        if i < len(datasets) - 1:
            out.append(r"\midrule")
    out += [r"\bottomrule", r"\end{tabular}", "}", r"\end{table}"]
    return "\n".join(out) + "\n"


def to_frame(table: CalibrationTable) -> pd.DataFrame:
    """Tidy CSV rows: value rows (mean, std, best) and improvement rows."""
    rows = []
    for (dataset, gen), _ in table.mean.iterrows():
        for metric, _h in METRICS:
            for m in table.methods:
                rows.append(
                    {
                        "prm": table.prm,
                        "dataset": dataset,
                        "generator": gen,
                        "row": "value",
                        "metric": metric,
                        "method": m,
                        "value": table.mean.loc[(dataset, gen), (metric, m)],
                        "std": table.std.loc[(dataset, gen), (metric, m)],
                        "best": bool(table.best.loc[(dataset, gen), (metric, m)]),
                        "reference": "",
                    }
                )
    for (dataset, m), vals in table.improvement.iterrows():
        for metric, _h in METRICS:
            rows.append(
                {
                    "prm": table.prm,
                    "dataset": dataset,
                    "generator": "",
                    "row": "avg_pct_improvement",
                    "metric": metric,
                    "method": m,
                    "value": vals[metric],
                    "std": np.nan,
                    "best": False,
                    "reference": WQL_REFERENCE if metric == "wql" else "base",
                }
            )
    return pd.DataFrame(rows)


def write_tables(
    metrics: pd.DataFrame, out_dir: str | Path, stem: str = "calibration"
) -> dict[str, CalibrationTable]:
    """Write ``{stem}_{prm}.md|tex|csv`` per PRM in ``out_dir`` (atomically); returns the tables."""
    from dprm.io import atomic_path

    out_dir = Path(out_dir)
    tables = {}
    prms = list(dict.fromkeys(metrics["prm"])) if "prm" in metrics.columns else [""]
    for prm in prms:
        table = build_table(metrics, prm if prm else None)
        name = f"{stem}_{prm}" if prm else stem
        for ext, text in (
            ("md", caption(table) + "\n\n" + to_markdown(table)),
            ("tex", to_latex(table)),
        ):
            with atomic_path(out_dir / f"{name}.{ext}") as tmp:
                tmp.write_text(text)
        with atomic_path(out_dir / f"{name}.csv") as tmp:
            to_frame(table).to_csv(tmp, index=False)
        tables[prm] = table
    return tables


def truth_markdown(metrics: pd.DataFrame, prm: str | None = None) -> str | None:
    """Markdown table of each method's mean absolute error to the true quantile function of p.

    Synthetic worlds only (``quantile_error_true`` from ``dprm evaluate``; None when no row has
    it). Rows (dataset, generator), one column per method (seed mean, ± std with several seeds),
    the best per row in bold, then a "mean" row per dataset. Point calibrators are scored as a
    point mass at their estimate, so their error includes p's spread; the comparison that
    matters for IAS is between distribution methods.
    """
    key = "quantile_error_true"
    if key not in metrics.columns or metrics[key].isna().all():
        return None
    df = metrics if prm is None else metrics[metrics["prm"] == prm]
    df = df[df[key].notna()]
    methods = method_order(df["method"])
    grouped = df.groupby(["dataset", "generator", "method"], sort=False)[key]
    mean, std = grouped.mean(), grouped.std(ddof=1)
    head = ["Dataset", "Generator", *(display(m) for m in methods)]
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * len(methods)) + "|",
    ]
    for dataset in dict.fromkeys(df["dataset"]):
        label = dataset_label(dataset)
        generators = list(dict.fromkeys(df.loc[df["dataset"] == dataset, "generator"]))
        for gen in generators:
            values = [mean.get((dataset, gen, m), np.nan) for m in methods]
            estimates = [v for m, v in zip(methods, values, strict=True) if m not in BOUNDS]
            best = np.nanmin(estimates) if np.isfinite(estimates).any() else np.nan
            cells = []
            for m, v in zip(methods, values, strict=True):
                s = std.get((dataset, gen, m), np.nan)
                text = _fmt(v) + (f" ± {s:.4f}" if np.isfinite(s) else "")
                winner = m not in BOUNDS and np.isfinite(v) and v <= best + TIE_TOL
                cells.append(f"**{text}**" if winner else text)
            lines.append(f"| {label} | {gen} | " + " | ".join(cells) + " |")
        # The mean over generators only where the method has every generator ("--" otherwise).
        avg = [np.mean([mean.get((dataset, g, m), np.nan) for g in generators]) for m in methods]
        lines.append(f"| {label} | *mean* | " + " | ".join(_fmt(v) for v in avg) + " |")
    return "\n".join(lines) + "\n"
