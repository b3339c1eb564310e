"""The peer pages' paired statistics: the target check and calibration's share, per draw, with
their median over draws and a paired bootstrap 90 % interval (:mod:`dprm.ias.curves.paired`).

Both read the replicates (every method's figures on each draw's questions, replicate 0,
and on the same bootstrap resamples of them, replicates 1..B; ``draw`` names the draw: the world
seed of a twin, the calibrator seed of a world given as BoN sets); the pages store their rows
(headline.csv, calibration_share.csv) and render from those. Every cell is shown: a share
below 0 or above 100 % is printed as it is, an undefined one says why.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dprm.ias.peers.methods import CALIBRATOR_FREE

#: the method the pages put forward
CALIBRATED = "auto-seq[calibrated]"
#: its ceiling: auto-seq with the true distribution of p as prior
CEILING = "auto-seq[truth]"
#: the rivals that read no calibrator: the peers and auto-seq with the raw PRM or no prior
FREE_PEERS = CALIBRATOR_FREE  # every registered peer that reads no calibrator
FREE_METHODS = (*FREE_PEERS, "auto-seq[base]", "auto-seq[none]")
#: the target per split: ratio of draws to reach uniform-n, calibrated / best rival
LIMITS = {"id": 0.7}
SHIFTED_LIMIT = 1.1
COSTS = ("0.05", "0.1", "0.25")


def median_draws(values: np.ndarray) -> float:
    """The median over draws of draws to a target, a draw that never reaches it counted as
    infinite (∞ on the page)."""
    return float(np.median(np.where(np.isnan(values), np.inf, values)))


def limit_of(split: str) -> float:
    return LIMITS.get(split, SHIFTED_LIMIT)


def _matrices(grp: pd.DataFrame, methods, figure: str, draws: list) -> dict[str, np.ndarray]:
    from dprm.ias.curves.paired import replicate_matrix

    present = set(grp["method"])
    return {m: replicate_matrix(grp, m, figure, draws) for m in methods if m in present}


def _num(value: float, digits: int = 2) -> str:
    if np.isnan(value):
        return "—"
    if np.isinf(value):
        return "∞"
    return f"{value:.{digits}f}"


def _fallbacks(cells: pd.DataFrame, world, rule, split) -> str:
    if cells is None or "falls_back_to" not in cells:
        return ""
    at = cells[(cells["world"] == world) & (cells["rule"] == rule) & (cells["split"] == split)
               & (cells["method"] == CALIBRATED)]  # fmt: skip
    return ",".join(sorted({b for b in at["falls_back_to"].fillna("") if b}))


def headline(replicates: pd.DataFrame, cells: pd.DataFrame | None = None):
    """The target check per world, rule, split and target (uniform-64, -16): the per-draw ratio
    of ``auto-seq[calibrated]``'s draws to the best calibrator-free rival's (the rival with the
    least median draws over draws), their median and 90 % interval; met only if the interval's
    upper end is within the limit (ID 0.7, shifted 1.1).

    Returns:
        (the page's lines, one row per check).
    """
    from dprm.ias.curves.paired import LEVEL, best_method, paired_ratio

    rows = []
    for (world, rule, split), grp in replicates.groupby(["world", "rule", "split"], sort=False):
        if CALIBRATED not in set(grp["method"]):
            continue
        draws = sorted(grp["draw"].unique())
        for target in ("u64", "u16"):
            fig = f"draws_to_{target}"
            free = _matrices(grp, FREE_METHODS, fig, draws)
            cal = _matrices(grp, (CALIBRATED,), fig, draws)[CALIBRATED]
            rival = best_method({m: v[:, 0] for m, v in free.items()}, lower_is_better=True)
            row = {"world": world, "rule": rule, "split": split, "target": target,
                   "draws": len(draws), "calibrated_draws": median_draws(cal[:, 0]),
                   "rival": rival or "none reaches", "limit": limit_of(split),
                   "falls_back_to": _fallbacks(cells, world, rule, split)}  # fmt: skip
            if rival is None:
                row.update(rival_draws=np.nan, per_draw="", median=np.nan, low=np.nan,
                           high=np.nan, met=False)  # fmt: skip
            else:
                stat = paired_ratio(cal, free[rival], LEVEL)
                row.update(
                    rival_draws=median_draws(free[rival][:, 0]),
                    per_draw=" ".join(_num(v) for v in stat.per_draw),
                    median=stat.median, low=stat.low, high=stat.high,
                    met=stat.at_most(row["limit"]),
                )  # fmt: skip
            rows.append(row)
    frame = pd.DataFrame(rows)
    return headline_lines(frame), frame


def headline_lines(frame: pd.DataFrame) -> list[str]:
    """The target table's lines from :func:`headline`'s rows (as computed, or read back from
    the page's headline.csv)."""
    lines = [
        "| world | rule | split | target | auto-seq[calibrated] draws | best calibrator-free "
        "rival (draws) | ratio per draw | median ratio [90 % interval] | limit | met |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in frame.iterrows():
        cal = _num(r["calibrated_draws"], 1)
        if _text(r["falls_back_to"]):
            cal += f" (falls back to {r['falls_back_to']})"
        rival = f"{r['rival']} ({_num(r['rival_draws'], 1)})"
        ratio = f"{_num(r['median'])} [{_num(r['low'])}, {_num(r['high'])}]"
        lines.append(
            f"| {r['world']} | {r['rule']} | {r['split']} | {r['target']} | {cal} | {rival} | "
            f"{_text(r['per_draw']) or '—'} | {ratio} | ≤ {r['limit']:.1f} | "
            f"{'yes' if r['met'] else 'no'} |"
        )
    return lines


def _text(value) -> str:
    """A text cell, empty where a CSV read it back as NaN."""
    return "" if isinstance(value, float) and np.isnan(value) else str(value)


def _check(row) -> str:
    """A headline check's name: its world's PRM, rule and target (``prm-a majority u64``)."""
    return f"{_short(row['world'])} {row['rule']} {row['target']}"


def _short(world: str) -> str:
    """A world's name without its generator (``gen__prm`` -> ``prm``)."""
    return world.split("__")[-1]


def verdict(frame: pd.DataFrame) -> list[str]:
    """The target check in words, one bullet per split: the checks met (the interval's upper
    end within the limit), those not met, and those where ``auto-seq[calibrated]`` needs more
    draws than its rival (median ratio above 1), each with its median and interval.

    Args:
        frame: :func:`headline`'s rows.
    """

    def cell(r) -> str:
        return f"{_check(r)} {_num(r['median'])} [{_num(r['low'])}, {_num(r['high'])}]"

    lines = []
    for split, grp in frame.groupby("split", sort=False):
        met = [cell(r) for _, r in grp.iterrows() if r["met"]]
        missed = [cell(r) for _, r in grp.iterrows() if not r["met"]]
        behind = [cell(r) for _, r in grp.iterrows() if r["median"] > 1]
        limit = grp["limit"].iloc[0]
        aim = (f"≤ {limit:.1f}, at least {(1 - limit) * 100:.0f} % fewer draws than the best "
               f"calibrator-free rival" if limit < 1 else f"≤ {limit:.1f}")  # fmt: skip
        text = f"- **{split}** (limit {aim}): met in {len(met)} of {len(grp)} checks"
        text += f" ({'; '.join(met)})" if met else ""
        text += f"; not met: {'; '.join(missed)}" if missed else ""
        text += (f"; `auto-seq[calibrated]` needs more draws than the rival (median ratio "
                 f"above 1): {'; '.join(behind)}" if behind else "")  # fmt: skip
        lines.append(text + ".")
    return lines


#: why a check was missed, in the order tried (the first that holds is the reason given)
MISS_REASONS = (
    ("never", "`auto-seq[calibrated]` does not reach the target on some draws (∞)"),
    ("noise", "the median meets the limit but the interval's upper end does not: the draws "
              "disagree more than the margin (more draws or questions would decide it)"),
    ("fallback", "the shift check fired and `auto-seq` became a calibrator-free peer chosen on "
                 "the training pool, which on this split needs more draws than the best rival"),
    ("flat", "uniform best-of-n does not gain with n here: one draw per question already "
             "reaches the target, so no method can save draws"),
    ("policy", "the rival is the same sequential policy without the calibrated prior "
               "(`auto-seq[base]` / `auto-seq[none]`): calibration saves too few draws over it"),
    ("peer-ahead", "a calibrator-free stopping rule needs fewer draws (median ratio above 1)"),
    ("peer", "a calibrator-free stopping rule needs about as few draws"),
)  # fmt: skip


def miss_reason(row) -> str:
    """The key of :data:`MISS_REASONS` that explains one missed headline check (a row of
    :func:`headline`'s frame)."""
    if not np.isfinite(row["median"]) or not np.isfinite(row.get("calibrated_draws", 0.0)):
        return "never"
    if row["median"] <= row["limit"]:
        return "noise"
    if _text(row.get("falls_back_to", "")):
        return "fallback"
    if max(row.get("calibrated_draws", np.inf), row.get("rival_draws", np.inf)) <= 1.0:
        return "flat"
    if str(row.get("rival", "")).startswith("auto-seq["):
        return "policy"
    return "peer-ahead" if row["median"] > 1 else "peer"


def why_missed(frame: pd.DataFrame) -> list[str]:
    """Why each check was missed, one bullet per split and reason (:data:`MISS_REASONS`),
    naming its checks; [] when every check is met."""
    lines = []
    for split, grp in frame.groupby("split", sort=False):
        missed = grp[~grp["met"].astype(bool)]
        if missed.empty:
            continue
        reasons = missed.apply(miss_reason, axis=1)
        for key, text in MISS_REASONS:
            rows = missed[reasons == key]
            if rows.empty:
                continue
            names = "; ".join(_check(r) for _, r in rows.iterrows())
            lines.append(f"- **{split}**, {len(rows)} of {len(missed)} misses: {text} ({names}).")
    return lines


def calibration_share(replicates: pd.DataFrame, cells: pd.DataFrame | None = None):
    """Calibration's share of the gain at equal cost per world, rule, split and cost:
    (calibrated - best calibrator-free) / (truth - best calibrator-free) per draw (the rival
    with the highest median accuracy over draws), the median and its 90 % interval. Every
    cell is shown; a share is undefined only where the ceiling is not above the rival.

    Returns:
        (the page's lines, one row per cell).
    """
    from dprm.ias.curves.paired import LEVEL, best_method, paired_share

    rows = []
    for (world, rule, split), grp in replicates.groupby(["world", "rule", "split"], sort=False):
        if not {CALIBRATED, CEILING} <= set(grp["method"]):
            continue
        draws = sorted(grp["draw"].unique())
        for c in COSTS:
            fig = f"acc_at_{c}"
            free = _matrices(grp, FREE_METHODS, fig, draws)
            both = _matrices(grp, (CALIBRATED, CEILING), fig, draws)
            rival = best_method({m: v[:, 0] for m, v in free.items()}, lower_is_better=False)
            row = {"world": world, "rule": rule, "split": split, "cost": c, "draws": len(draws),
                   "calibrated": float(np.median(both[CALIBRATED][:, 0])),
                   "truth": float(np.median(both[CEILING][:, 0])), "rival": rival or "none",
                   "falls_back_to": _fallbacks(cells, world, rule, split)}  # fmt: skip
            if rival is None:
                row.update(rival_acc=np.nan, per_draw="", median=np.nan, low=np.nan, high=np.nan)
            else:
                stat = paired_share(both[CALIBRATED], free[rival], both[CEILING], LEVEL)
                row.update(
                    rival_acc=float(np.median(free[rival][:, 0])),
                    per_draw=" ".join(_pct(v) for v in stat.per_draw),
                    median=stat.median, low=stat.low, high=stat.high,
                )  # fmt: skip
            rows.append(row)
    frame = pd.DataFrame(rows)
    return share_lines(frame), frame


def share_lines(frame: pd.DataFrame) -> list[str]:
    """The share table's lines from :func:`calibration_share`'s rows (as computed, or read
    back from the page's calibration_share.csv)."""
    lines = [
        "| world | rule | split | cost | auto-seq[calibrated] | auto-seq[truth] | best "
        "calibrator-free (acc) | share per draw | median share [90 % interval] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in frame.iterrows():
        if np.isnan(r["median"]):
            share = "undefined (the truth is not above the rival in some draw)"
        else:
            share = f"{_pct(r['median'])} [{_pct(r['low'])}, {_pct(r['high'])}]"
        if _text(r["falls_back_to"]):
            share += f" (falls back to {r['falls_back_to']})"
        lines.append(
            f"| {r['world']} | {r['rule']} | {r['split']} | {r['cost']} | "
            f"{_num(r['calibrated'], 4)} | {_num(r['truth'], 4)} | {r['rival']} "
            f"({_num(r['rival_acc'], 4)}) | {_text(r['per_draw']) or '—'} | {share} |"
        )
    return lines


def _pct(value: float) -> str:
    if np.isnan(value):
        return "—"
    return f"{value:.0%}"
