"""Training curves of the gradient-trained calibrators: validation score and loss against step."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dprm.report.figures.style import _finish, _grid, color
from dprm.report.tables import display, method_order


def training_figure(
    history: pd.DataFrame, stem: str | Path, title: str = ""
) -> tuple[list[Path], str]:
    """A column per method: validation score (top) and training loss (bottom) against step.

    Every seed is one thin line; the checkpoint kept (the best eligible validation score) is a
    marker on the validation curve. Methods fitted in closed form have no steps and no column.

    Args:
        history: rows ``method, seed, step, validation, metric, loss, loss_name, best_step``
            of one world (``dprm.report.document.collect``'s ``history``).
        stem: output path without suffix.
        title: figure title.

    Returns:
        (the written files, the caption).
    """
    methods = method_order(history["method"])
    fig, axes = _grid(2, len(methods), width=3.8, height=2.8)
    for c, m in enumerate(methods):
        rows = history[history["method"] == m]
        metric = str(rows["metric"].dropna().iloc[0]) if rows["metric"].notna().any() else "?"
        loss_name = (
            str(rows["loss_name"].dropna().iloc[0]) if rows["loss_name"].notna().any() else "loss"
        )
        n = rows["seed"].nunique()
        for i, (_seed, run) in enumerate(rows.groupby("seed", sort=True)):
            run = run.sort_values("step")
            kw = {"color": color(m), "linewidth": 0.9, "alpha": 0.8}
            label = f"{display(m)} ({n} seed{'s' if n > 1 else ''})" if i == 0 else None
            axes[0, c].plot(run["step"], run["validation"], label=label, **kw)
            best = run[run["step"] == run["best_step"]]
            if not best.empty:
                axes[0, c].plot(best["step"], best["validation"], "*", color=color(m), markersize=9)
            passed = run[(run["step"] == run.get("min_step")) & (run["step"] != run["best_step"])]
            if not passed.empty:  # a lower score before the warm-up: shown, not hidden
                axes[0, c].plot(
                    passed["step"], passed["validation"], "o", mfc="none", color=color(m),
                    markersize=6,
                )  # fmt: skip
            loss = run.dropna(subset=["loss"])
            axes[1, c].plot(loss["step"], loss["loss"], **kw)
        axes[0, c].set_title(display(m), fontsize=10)
        if rows["validation"].isna().all():  # e.g. conformal: its inner model's loss only
            axes[0, c].cla()
            axes[0, c].set_title(display(m), fontsize=10)
            axes[0, c].text(
                0.5, 0.5, "no validation score\nrecorded", ha="center", va="center",
                transform=axes[0, c].transAxes, fontsize=9, color="0.4",
            )  # fmt: skip
            axes[0, c].set_xticks([])
            axes[0, c].set_yticks([])
        else:
            axes[0, c].set_ylabel(f"validation {metric}")
        axes[1, c].set_ylabel(f"training {loss_name}")
        axes[1, c].set_xlabel("step")
        for r in range(2):
            axes[r, c].grid(alpha=0.3)
    n_seeds = history.groupby("method")["seed"].nunique().max()
    caption = (
        "Training of each gradient-trained calibrator: the validation score used for early "
        "stopping (top; on the 20% of the train questions held back, lower is better; "
        f"{selection_note(history)}) and the mean training loss since the previous evaluation "
        f"(bottom), against the optimisation step; one thin line per training seed ({n_seeds} "
        "seed(s)). Methods fitted in closed form (isotonic, Platt, ...) have no curve."
    )
    return _finish(fig, axes, stem, title or "Training curves", caption)


def selection_note(history: pd.DataFrame) -> str:
    """Which rule kept each ★: the lowest validation score from the warm-up on, the warm-up
    per method, and whether a lower score before it was passed over (○)."""
    if "eligible_from" not in history.columns or history["eligible_from"].isna().all():
        return "★ = the checkpoint kept"
    warmups = []
    for m in method_order(history["method"]):
        steps = history.loc[history["method"] == m, "eligible_from"].dropna().unique()
        if len(steps):
            warmups.append(f"{display(m)} {', '.join(str(int(s)) for s in sorted(steps))}")
    runs = history.drop_duplicates(["method", "seed"])
    passed = runs[runs["min_step"].notna() & (runs["min_step"] != runs["best_step"])]
    note = (
        "★ = the checkpoint kept: the lowest validation score from the end of the warm-up on "
        "(warm-up = min(warmup_steps, warmup_fraction × max_steps) steps: "
        + "; ".join(warmups)
        + "; the last step is always eligible)"
    )
    if len(passed):
        note += (
            f"; ○ = a lower score earlier, passed over by that rule ({len(passed)} of "
            f"{len(runs)} runs; early maps sit near their marginal initialisation)"
        )
    else:
        note += "; no run had a lower score before its warm-up"
    return note


__all__ = ["selection_note", "training_figure"]
