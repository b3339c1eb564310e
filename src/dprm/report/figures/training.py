"""Training curves of the gradient-trained calibrators: validation score and loss against step."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dprm.report.figures.style import _finish, _grid, color
from dprm.report.tables import display, method_order

#: what each validation score is, as a panel reads it (lower is better for all)
SCORE_NAMES = {
    "nll": "count NLL (binomial likelihood)",
    "calibration_area": "calibration area",
    "wql": "WQL",
}


#: the same, short enough for an axis label
SHORT_NAMES = {"nll": "count NLL", "calibration_area": "calibration area", "wql": "WQL"}


def score_name(metric: str) -> str:
    """The validation score ``metric`` in words."""
    return SCORE_NAMES.get(metric, metric)


def training_figure(
    history: pd.DataFrame, stem: str | Path, title: str = ""
) -> tuple[list[Path], str]:
    """A column per method: validation score (top) and training loss (bottom) against step.

    Every seed is one thin line; on the validation curve ★ marks the checkpoint kept, ○ the
    validation minimum when the kept one is elsewhere, and × the step the run stopped at. The
    caption says per method in one sentence when validation got worse, where the runs stopped
    and what they kept. Methods fitted in closed form have no steps and no column.

    Args:
        history: rows ``method, seed, step, validation, metric, loss, loss_name, best_step``
            (optional ``eligible_from, min_step``) of one world (``dprm.report.document.collect``'s
            ``history``).
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
            label = f"{n} seed{'s' if n > 1 else ''}" if i == 0 else None
            ax = axes[0, c]
            ax.plot(run["step"], run["validation"], label=label, **kw)
            best = run[run["step"] == run["best_step"]]
            if not best.empty:
                ax.plot(best["step"], best["validation"], "*", color=color(m), markersize=10,
                        label="kept" if i == 0 else None)  # fmt: skip
            low = _minimum(run)
            if low is not None and not best.empty and low[0] != int(best["step"].iloc[0]):
                ax.plot(*low, "o", mfc="none", color="black", markersize=7,
                        label="validation minimum" if i == 0 else None)  # fmt: skip
            last = run.dropna(subset=["validation"]).tail(1)
            if not last.empty:
                ax.plot(last["step"], last["validation"], "x", color="0.3", markersize=6,
                        label="stopped" if i == 0 else None)  # fmt: skip
            loss = run.dropna(subset=["loss"])
            axes[1, c].plot(loss["step"], loss["loss"], **kw)
        axes[0, c].set_title(f"{display(m)}: validation {score_name(metric)}", fontsize=9)
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
            axes[0, c].set_ylabel(
                f"{SHORT_NAMES.get(metric, metric)} (lower is better)", fontsize=8
            )
        axes[1, c].set_title(f"{display(m)}: training {loss_name}", fontsize=9)
        axes[1, c].set_ylabel(f"training {loss_name}", fontsize=8)
        axes[1, c].set_xlabel("step")
        for r in range(2):
            axes[r, c].grid(alpha=0.3)
    n_seeds = history.groupby("method")["seed"].nunique().max()
    conclusions = " ".join(conclusion(history, m) for m in methods)
    caption = (
        f"{conclusions} Top: the validation score each run early-stops on (on the 20% of the "
        "train questions held back, lower is better); ★ = the checkpoint kept, ○ = the "
        "validation minimum where another was kept, × = where the run stopped (once a wait as "
        "long as the kept step, at most `patience` steps, passed without a better score: at "
        "most twice the kept step; shorter waits missed later, better checkpoints on the development "
        "worlds, docs/results/do-no-harm.md); "
        f"{selection_note(history)}. Bottom: the mean training loss since the previous "
        f"evaluation. One thin line per training seed ({n_seeds} seed(s)). Methods fitted in "
        "closed form (isotonic, Platt, ...) have no curve."
    )
    return _finish(fig, axes, stem, title or "Training curves", caption)


def _minimum(run: pd.DataFrame) -> tuple[int, float] | None:
    """(step, score) of the lowest validation score of one run, or None."""
    scored = run.dropna(subset=["validation"])
    if scored.empty:
        return None
    row = scored.loc[scored["validation"].idxmin()]
    return int(row["step"]), float(row["validation"])


def _proper_beside(run: pd.DataFrame) -> tuple[str, int] | None:
    """(name, minimum step) of the proper score evaluated beside an improper validation score
    (the WQL beside the calibration area), or None."""
    if "proper_min_step" not in run.columns or run["proper_min_step"].isna().all():
        return None
    name = run["proper_score"].dropna().iloc[0]
    if name == run["metric"].dropna().iloc[0]:
        return None
    return str(name), int(run["proper_min_step"].dropna().iloc[0])


def _span(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def conclusion(history: pd.DataFrame, method: str) -> str:
    """One sentence per method: when validation got worse, where the runs stopped, what they kept.

    E.g. "binomial: validation got worse after step 175: stopped at 350, kept 175." (several
    seeds: the ranges over seeds).
    """
    rows = history[history["method"] == method]
    kept, stopped, minima, beside = [], [], [], []
    for _seed, run in rows.groupby("seed", sort=True):
        low = _minimum(run)
        if low is None or run["best_step"].isna().all():
            continue
        kept.append(int(run["best_step"].dropna().iloc[0]))
        stopped.append(int(run["step"].max()))
        minima.append(low[0])
        beside.append(_proper_beside(run))
    if not kept:
        return f"{display(method)}: no validation score recorded."
    name = display(method)
    missed = sum(k != m for k, m in zip(kept, minima, strict=True))
    if missed:
        # the selection rule (a warm-up) kept a later checkpoint than the validation minimum
        text = (
            f"{name}: validation lowest at step {_span(minima)}, passed over by the warm-up in "
            f"{missed} of {len(kept)} runs: kept {_span(kept)}, stopped at {_span(stopped)}"
        )
        earlier = [b for b, k in zip(beside, kept, strict=True) if b is not None and b[1] < k]
        if earlier:  # the run stopped because that score had stopped improving too
            text += (
                f" (its {SHORT_NAMES.get(earlier[0][0], earlier[0][0])}, lowest at step "
                f"{_span([b[1] for b in earlier])}, had stopped improving before the kept step)"
            )
    elif all(s == k for s, k in zip(stopped, kept, strict=True)):
        text = f"{name}: validation still improving at the last step {_span(stopped)}, kept it"
    else:
        text = (
            f"{name}: validation got worse after step {_span(kept)}: stopped at "
            f"{_span(stopped)}, kept {_span(kept)}"
        )
    return text + "."


def selection_note(history: pd.DataFrame) -> str:
    """Which rule kept each ★: the lowest validation score from the warm-up on, the warm-up
    per method (none: the minimum itself), and how many runs passed a lower score over (○)."""
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
        "★ = the lowest validation score from the end of the warm-up on (warm-up = "
        "min(warmup_steps, warmup_fraction × max_steps) steps: "
        + "; ".join(warmups)
        + "; the last step is always eligible; the warm-up keeps the calibration area from "
        "choosing the near-marginal maps of the first steps; binomial's count likelihood needs "
        "none, except with <= 50 training questions, where too few validation questions make "
        "its minimum noise, and there a run stops by twice the step of the minimum passed over)"
    )
    if len(passed):
        note += (
            f"; ○ = a lower score earlier, passed over by that rule ({len(passed)} of "
            f"{len(runs)} runs; early maps sit near their marginal initialisation)"
        )
    else:
        note += "; every run kept its validation minimum"
    return note


__all__ = ["conclusion", "score_name", "selection_note", "training_figure"]
