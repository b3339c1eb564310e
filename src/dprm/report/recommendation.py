"""The report's recommendation, computed from its own held-out tables, and its do-no-harm flags.

**Rule** (docs/calibrators.md, "One recommendation"):

- *For calibration (point estimates, tables):* the calibrator with the lowest held-out Brier,
  averaged over the report's worlds and held-out splits (ID and OOD) and seeds; `conformal`
  (a lower bound by design) and the raw score itself are not candidates; when the raw PRM
  score's Brier, averaged over the same cells, is as low or lower, the report recommends the
  raw score instead.
- *For IAS (`dprm ias`, `dprm solve`):* the calibrator whose `auto` allocation gains most
  accuracy over uniform best-of-N at equal cost, averaged over the report's worlds, held-out
  splits, costs and seeds; without IAS rows, the distribution calibrator with the lowest
  held-out WQL.
- *Do no harm:* on a split where the chosen calibrator's Brier is above the raw PRM score's by
  more than one standard error (question-clustered on the split's records, averaged over
  seeds), the report says "use the raw score here" for that split.

Flags per (world, split): each calibrator worse than the raw PRM beyond noise, and a split whose
inputs look shifted from the training questions (the shift AUC the evaluation recorded with
Base, above :data:`dprm.ias.allocation.SHIFT_AUC`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from dprm.report.tables import display

#: never recommended: the raw score (the reference) and a deliberate lower bound
NOT_CANDIDATES = ("base", "conformal")
#: the report's held-out splits
HELD_OUT = ("id", "ood")


def harm_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per (world, dataset, method): seed-mean Brier, Brier - raw, its s.e., worse flag, shift.

    Args:
        metrics: the report's metric rows (``world, dataset, method, seed, brier`` and, when the
            evaluation recorded them, ``brier_vs_raw, brier_vs_raw_se``; Base rows may carry
            ``shift_auc, shifted``).
    """
    if metrics.empty or "brier_vs_raw" not in metrics.columns:
        return pd.DataFrame()
    rows = metrics[metrics["dataset"].isin(HELD_OUT)]
    grouped = rows.groupby(["world", "dataset", "method"], sort=False)
    out = grouped.agg(
        brier=("brier", "mean"),
        brier_vs_raw=("brier_vs_raw", "mean"),
        brier_vs_raw_se=("brier_vs_raw_se", "mean"),
        seeds=("seed", "nunique"),
    ).reset_index()
    out["worse_than_raw"] = out["brier_vs_raw"] > out["brier_vs_raw_se"].fillna(0.0)
    if "shift_auc" in rows.columns:
        shift = rows[rows["method"] == "base"].groupby(["world", "dataset"])["shift_auc"].first()
        out = out.merge(
            shift.rename("shift_auc").reset_index(), on=["world", "dataset"], how="left"
        )
    return out


def recommend(metrics: pd.DataFrame, pays: pd.DataFrame | None = None) -> dict[str, Any]:
    """The recommendation for each job from the held-out tables (module docstring's rule).

    Returns:
        ``{"calibration": method | None, "ias": method | None, "ias_basis": str,
        "raw_here": [(world, dataset), ...]}`` (``raw_here``: splits where the calibration
        choice is worse than the raw score beyond noise).
    """
    out: dict[str, Any] = {
        "calibration": None, "ias": None, "ias_basis": "", "raw_here": [], "raw_better": None,
    }  # fmt: skip
    if metrics.empty:
        return out
    held = metrics[metrics["dataset"].isin(HELD_OUT) & ~metrics["method"].isin(NOT_CANDIDATES)]
    if held.empty:
        return out
    by_cell = held.groupby(["method", "world", "dataset"])["brier"].mean()
    brier = by_cell.groupby("method").mean().dropna()
    if len(brier):
        out["calibration"] = str(brier.idxmin())
        # the raw score on the same cells: a calibrator that does not beat it on average is no
        # recommendation for calibration tables (the user keeps the raw score)
        raw = metrics[metrics["dataset"].isin(HELD_OUT) & (metrics["method"] == "base")]
        raw_cells = raw.groupby(["world", "dataset"])["brier"].mean()
        chosen_cells = by_cell.loc[out["calibration"]]
        common = chosen_cells.index.intersection(raw_cells.index)
        if len(common) and raw_cells[common].mean() <= chosen_cells[common].mean():
            out["raw_better"] = (
                float(chosen_cells[common].mean()),
                float(raw_cells[common].mean()),
            )
    gains = _ias_gains(pays)
    if gains is not None and len(gains):
        out["ias"], out["ias_basis"] = str(gains.idxmax()), "auto - uniform accuracy"
    elif "wql" in held.columns:
        wql = held.groupby(["method", "world", "dataset"])["wql"].mean().groupby("method").mean()
        wql = wql.dropna()
        if len(wql):
            out["ias"], out["ias_basis"] = str(wql.idxmin()), "held-out WQL"
    harm = harm_table(metrics)
    if not harm.empty and out["calibration"] is not None:
        chosen = harm[(harm["method"] == out["calibration"]) & harm["worse_than_raw"]]
        out["raw_here"] = list(zip(chosen["world"], chosen["dataset"], strict=True))
    return out


def _ias_gains(pays: pd.DataFrame | None) -> pd.Series | None:
    """Mean gain of ``auto`` over uniform per method (held-out splits), or None."""
    if pays is None or pays.empty or not {"allocation", "gain", "method"} <= set(pays.columns):
        return None
    rows = pays[(pays["allocation"] == "auto") & ~pays["method"].isin(NOT_CANDIDATES)]
    if "split" in rows.columns:
        rows = rows[rows["split"].isin(HELD_OUT)]
    rows = rows.dropna(subset=["gain"])
    if rows.empty:
        return None
    return rows.groupby("method")["gain"].mean()


def recommendation_lines(metrics: pd.DataFrame, pays: pd.DataFrame | None = None) -> list[str]:
    """The report's "Which calibrator?" paragraph and its do-no-harm flags (markdown lines)."""
    rec = recommend(metrics, pays)
    lines = ["## Which calibrator? (computed from this report's held-out tables)", ""]
    if rec["calibration"] is None:
        return [*lines, "No calibrator has held-out metrics in this run.", ""]
    if rec["raw_better"] is not None:
        best, raw = rec["raw_better"]
        text = (
            "For calibration tables: **the raw PRM score**: no calibrator beats it on held-out "
            f"Brier averaged over this run's worlds, ID and OOD splits and seeds (the best, "
            f"{display(rec['calibration'])}, {best:.4f} against the raw score's {raw:.4f}). "
        )
    else:
        text = (
            f"For calibration tables: **{display(rec['calibration'])}**, the lowest held-out "
            "Brier averaged over this run's worlds, ID and OOD splits and seeds. "
        )
    if rec["ias"] is not None:
        text += (
            f"For IAS (`dprm ias`, `dprm solve`): **{display(rec['ias'])}**, by "
            f"{rec['ias_basis']} averaged the same way. "
        )
    text += (
        "`conformal` is a lower bound by design and the raw score is the reference: neither is "
        'a candidate (rule: docs/calibrators.md, "One recommendation").'
    )
    lines += [text, ""]
    if rec["raw_here"]:
        where = ", ".join(f"{w} {d.upper()}" for w, d in rec["raw_here"])
        lines += [
            f"**Use the raw score here:** {where}: {display(rec['calibration'])}'s Brier there is "
            "above the raw PRM score's by more than one standard error.",
            "",
        ]
    harm = harm_table(metrics)
    if not harm.empty:
        worse = harm[harm["worse_than_raw"] & (harm["method"] != "base")]
        flagged = []
        for (world, dataset), grp in worse.groupby(["world", "dataset"], sort=False):
            names = ", ".join(
                f"{display(m)} ({d:+.4f} ± {s:.4f})"
                for m, d, s in zip(
                    grp["method"], grp["brier_vs_raw"], grp["brier_vs_raw_se"], strict=True
                )
            )
            flagged.append(
                f"- {world} {dataset.upper()}: worse than the raw PRM (Brier − raw ± s.e.): {names}"
            )
        if "shift_auc" in harm.columns:
            from dprm.ias.allocation import SHIFT_AUC

            cells = harm.drop_duplicates(["world", "dataset"])
            for world, dataset, auc in zip(
                cells["world"], cells["dataset"], cells["shift_auc"], strict=True
            ):
                if pd.notna(auc) and auc > SHIFT_AUC:
                    flagged.append(
                        f"- {world} {dataset.upper()}: inputs look shifted from the training "
                        f"questions (shift AUC {auc:.2f} > {SHIFT_AUC}); training-time "
                        "validation says little here"
                    )
        lines += (
            ["Flags per held-out split:", "", *flagged, ""]
            if flagged
            else [
                "No calibrator is worse than the raw PRM beyond noise on a held-out split, "
                "and no split looks shifted.",
                "",
            ]  # fmt: skip
        )
    return lines


__all__ = ["HELD_OUT", "harm_table", "recommend", "recommendation_lines"]
