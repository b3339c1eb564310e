"""The paper's published calibration tables next to ours ("paper vs dprm"), with a reading.

The paper's numbers are package data: ``paper_tables.csv`` (one row per prm, dataset,
generator, method in Base / OT / QR, metric in Brier / PosBrier / ECE / WQL) and
``paper_improvements.csv`` (its "Avg. % improv." rows: the mean over generators of
100 (Base - method) / Base, WQL relative to QR). Ours come from the *paper protocol* (ID =
the training split, training questions included, as the paper evaluated MATH; OOD = the
held-out AIME-like split), seed means. The reading is generated from these numbers only.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from dprm.report.tables import METRICS, build_table

#: our dataset (paper protocol) -> the paper's dataset name
PAPER_DATASETS = {"train": "math500", "ood": "aime24-25"}
#: our metric column -> the paper's metric name
PAPER_METRICS = {"brier": "brier", "pos_brier": "posbrier", "ece": "ece", "wql": "wql"}
PAPER_METHODS = ("base", "ot", "qr")
COLUMNS = ["prm", "dataset", "generator", "method", "metric", "paper", "dprm", "difference"]


def paper_tables() -> pd.DataFrame:
    """The paper's table cells (``prm, dataset, generator, method, metric, value``)."""
    with resources.files("dprm.report").joinpath("paper_tables.csv").open() as handle:
        return pd.read_csv(handle)


def paper_improvements() -> pd.DataFrame:
    """The paper's "Avg. % improv." rows (``prm, dataset, method, metric, improvement_percent``)."""
    with resources.files("dprm.report").joinpath("paper_improvements.csv").open() as handle:
        return pd.read_csv(handle)


def _ours(metrics: pd.DataFrame) -> pd.DataFrame:
    """Our paper-protocol Base / OT / QR rows with the paper's dataset and metric names."""
    df = metrics[metrics["dataset"].isin(PAPER_DATASETS) & metrics["method"].isin(PAPER_METHODS)]
    return df.assign(dataset=df["dataset"].map(PAPER_DATASETS))


def cell_comparison(metrics: pd.DataFrame) -> pd.DataFrame:
    """Every table cell of the paper that this run covers: paper value, ours (seed mean), difference.

    Args:
        metrics: tidy metrics rows (``prm, dataset, generator, method, seed`` + metric columns).

    Returns:
        rows of :data:`COLUMNS`, in the paper's order.
    """
    ours = _ours(metrics)
    if ours.empty:
        return pd.DataFrame(columns=COLUMNS)
    keys = ["prm", "dataset", "generator", "method"]
    mean = ours.groupby(keys)[list(PAPER_METRICS)].mean().rename(columns=PAPER_METRICS)
    long = mean.stack().rename("dprm").reset_index().rename(columns={"level_4": "metric"})
    paper = paper_tables().rename(columns={"value": "paper"})
    out = paper.merge(long, on=keys + ["metric"], how="inner")
    out["difference"] = out["dprm"] - out["paper"]
    return out[COLUMNS]


def improvement_comparison(metrics: pd.DataFrame) -> pd.DataFrame:
    """The paper's "Avg. % improv." rows next to ours (same formula, over the generators run)."""
    ours = _ours(metrics)
    rows = []
    for prm in dict.fromkeys(ours["prm"]) if not ours.empty else []:
        table = build_table(ours, prm)
        for (dataset, method), values in table.improvement.iterrows():
            for metric, _ in METRICS:
                rows.append(
                    {
                        "prm": prm,
                        "dataset": dataset,
                        "method": method,
                        "metric": PAPER_METRICS[metric],
                        "dprm": values[metric],
                        "n_generators": len(table.mean.loc[dataset]),
                    }
                )
    frame = pd.DataFrame(
        rows, columns=["prm", "dataset", "method", "metric", "dprm", "n_generators"]
    )
    paper = paper_improvements().rename(columns={"improvement_percent": "paper"})
    return paper.merge(frame, on=["prm", "dataset", "method", "metric"], how="inner")[
        ["prm", "dataset", "method", "metric", "relative_to", "paper", "dprm", "n_generators"]
    ]


def _count(mask: pd.Series) -> str:
    return f"{int(mask.sum())} of {len(mask)}"


def reading(
    cells: pd.DataFrame, improvements: pd.DataFrame, *, synthetic: bool = True
) -> list[str]:
    """Bullet points read off the two comparisons (no claim that the numbers do not carry).

    ``synthetic``: the run's data are the twin worlds (fitted to the paper's Base statistics),
    not real data.
    """
    if cells.empty:
        return ["- This run covers none of the paper's table cells (no paper-protocol rows)."]
    lines = []
    base = cells[(cells["method"] == "base") & (cells["metric"] != "wql")]
    if not base.empty:
        per = base.groupby("metric")["difference"].agg(lambda d: float(np.abs(d).mean()))
        text = ", ".join(f"{m} {per[m]:.3f}" for m in ("brier", "posbrier", "ece") if m in per)
        what = (
            "the statistics the twin worlds are fitted to" if synthetic else "measured, not fitted"
        )
        lines.append(
            f"- Base (the raw PRM score, no calibrator — {what}): mean |dprm − paper| over {len(base) // per.size} (generator, PRM, dataset) "
            f"rows: {text}."
        )
    imp = improvements.dropna(subset=["paper", "dprm"])
    sign = imp[imp["metric"] != "wql"]
    if not sign.empty:
        agree = np.sign(sign["paper"]) == np.sign(sign["dprm"])
        by_ds = {ds: _count(agree[sign["dataset"] == ds]) for ds in dict.fromkeys(sign["dataset"])}
        lines.append(
            "- Does calibration help (sign of 'Avg. % improv.' over Base, Brier / PosBrier / ECE)? "
            "Paper and dprm agree in "
            + "; ".join(f"{ds}: {c}" for ds, c in by_ds.items())
            + " (prm × method × metric)."
        )
    wide = imp[imp["method"].isin(("ot", "qr")) & (imp["metric"] != "wql")].pivot_table(
        index=["prm", "dataset", "metric"], columns="method", values=["paper", "dprm"]
    )
    if {("paper", "ot"), ("paper", "qr"), ("dprm", "ot"), ("dprm", "qr")} <= set(wide.columns):
        paper_ot = wide[("paper", "ot")] > wide[("paper", "qr")]
        ours_ot = wide[("dprm", "ot")] > wide[("dprm", "qr")]
        gap = (wide[("dprm", "ot")] - wide[("dprm", "qr")]).abs()
        lines.append(
            f"- OT vs QR ('Avg. % improv.', Brier / PosBrier / ECE): OT ahead in the paper in "
            f"{_count(paper_ot)} (prm, dataset, metric) rows, in dprm in {_count(ours_ot)}; "
            f"the two agree on which is ahead in {_count(paper_ot == ours_ot)}. Median |OT − QR| "
            f"in dprm: {float(gap.median()):.1f} points (paper: "
            f"{float((wide[('paper', 'ot')] - wide[('paper', 'qr')]).abs().median()):.1f})."
        )
    ot_brier = imp[(imp["method"] == "ot") & (imp["metric"] == "brier")]
    for ds in dict.fromkeys(ot_brier["dataset"]):
        sub = ot_brier[ot_brier["dataset"] == ds]
        if len(sub) < 2:
            continue
        paper_rank = " > ".join(sub.sort_values("paper", ascending=False)["prm"])
        ours_rank = " > ".join(sub.sort_values("dprm", ascending=False)["prm"])
        verdict = "same order" if paper_rank == ours_rank else "different order"
        lines.append(
            f"- PRMs ranked by how much OT improves Brier on {ds}: paper {paper_rank}; "
            f"dprm {ours_rank} ({verdict})."
        )
    cal = cells[cells["method"] != "base"]
    if not cal.empty:
        per_ds = {
            ds: float(np.abs(g["difference"]).mean())
            for ds, g in cal.groupby("dataset", sort=False)
        }
        lines.append(
            "- OT / QR cells (not fitted; they come out of training): mean |dprm − paper| "
            + ", ".join(f"{ds} {v:.3f}" for ds, v in per_ds.items())
            + "."
        )
    return lines


def _markdown(frame: pd.DataFrame, digits: dict[str, int]) -> str:
    head = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---:" if c in digits else "---" for c in frame.columns) + "|"
    body = []
    for _, row in frame.iterrows():
        cells = []
        for c in frame.columns:
            v = row[c]
            if c in digits:
                cells.append(
                    "--"
                    if pd.isna(v)
                    else f"{v:+.{digits[c]}f}"
                    if c == "difference"
                    else f"{v:.{digits[c]}f}"
                )
            else:
                cells.append(str(v))
        body.append("| " + " | ".join(cells) + " |")
    return "\n".join([head, rule, *body]) + "\n"


def cells_markdown(cells: pd.DataFrame) -> str:
    return _markdown(cells, {"paper": 4, "dprm": 4, "difference": 4})


def improvements_markdown(improvements: pd.DataFrame) -> str:
    return _markdown(improvements, {"paper": 1, "dprm": 1})


def write_comparison(
    metrics: pd.DataFrame, out_dir: Path, *, synthetic: bool = True
) -> dict[str, object]:
    """Write ``paper_vs_dprm_{cells,improvements}.{md,csv}`` and return frames and reading.

    ``synthetic``: as for :func:`reading`.
    """
    from dprm.io import atomic_path

    cells, improvements = cell_comparison(metrics), improvement_comparison(metrics)
    lines = reading(cells, improvements, synthetic=synthetic)
    for name, frame, render in (
        ("paper_vs_dprm_cells", cells, cells_markdown),
        ("paper_vs_dprm_improvements", improvements, improvements_markdown),
    ):
        with atomic_path(Path(out_dir) / f"{name}.csv") as tmp:
            frame.to_csv(tmp, index=False)
        with atomic_path(Path(out_dir) / f"{name}.md") as tmp:
            tmp.write_text(render(frame) + "\n" + "\n".join(lines) + "\n")
    return {"cells": cells, "improvements": improvements, "reading": lines}
