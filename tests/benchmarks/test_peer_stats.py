"""benchmarks/experiments/peer_stats.py: the peer pages' paired target check and calibration's
share, on hand-made replicates (every cell shown, a target met only by its interval)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "experiments"))
import adaptive_peers as ap  # noqa: E402
import peer_stats  # noqa: E402
import results_page as rp  # noqa: E402


def _replicates(values: dict[str, list[list[float]]], figure: str, split: str = "id"):
    """values: method -> [draw][replicate] of one figure (the others NaN)."""
    rows = []
    for method, per_draw in values.items():
        for d, reps in enumerate(per_draw):
            for b, v in enumerate(reps):
                row = {fig: np.nan for fig in ap.FIGURES}
                row.update({"world": "w", "rule": "majority", "split": split, "method": method,
                            "draw": 101 + d, "replicate": b, figure: v})  # fmt: skip
                rows.append(row)
    return pd.DataFrame(rows)


def test_a_median_within_the_limit_is_not_met_unless_the_interval_is():
    reps = _replicates({
        "auto-seq[calibrated]": [[10, 10, 12, 9, 11], [30, 28, 33, 30, 27], [20, 18, 25, 20, 40]],
        "vote-lead": [[20, 20, 20, 18, 22], [30, 28, 30, 40, 30], [40, 36, 25, 40, 40]],
        "esc-4": [[60] * 5, [60] * 5, [60] * 5],
    }, "draws_to_u64")  # fmt: skip
    lines, frame = peer_stats.headline(reps)
    u64 = frame[frame["target"] == "u64"].iloc[0]
    assert u64["rival"] == "vote-lead" and u64["median"] == 0.5 and u64["high"] == 1.0
    assert not u64["met"]  # median 0.5 <= 0.7, upper end 1.0 > 0.7
    row = next(x for x in lines if "| u64 |" in x)
    assert "0.50 1.00 0.50" in row and "0.50 [0.50, 1.00]" in row and row.endswith("| no |")
    # no draws_to_u16 anywhere: every method "never reaches", the check is shown, not met
    u16 = frame[frame["target"] == "u16"].iloc[0]
    assert u16["rival"] == "none reaches" and not u16["met"]
    assert "| u16 | ∞ | none reaches (—) |" in next(x for x in lines if "| u16 |" in x)


def test_every_share_is_shown_also_above_100_percent():
    reps = _replicates({
        "auto-seq[calibrated]": [[0.80, 0.80, 0.82], [0.70, 0.71, 0.69]],
        "vote-lead": [[0.78, 0.78, 0.78], [0.72, 0.70, 0.70]],
        "auto-seq[truth]": [[0.79, 0.82, 0.86], [0.74, 0.75, 0.70]],
    }, "acc_at_0.1")  # fmt: skip
    lines, frame = peer_stats.calibration_share(reps)
    at = frame[frame["cost"] == "0.1"].iloc[0]
    assert at["median"] == 0.5
    row = next(x for x in lines if "| 0.1 |" in x)
    assert "200% -100%" in row and "50% [35%, 35%]" in row


def test_the_smoke_page_renders_the_paired_statistics_and_the_costs(tmp_path, monkeypatch):
    monkeypatch.setattr(rp, "RESULTS", tmp_path / "results")
    cells = ap.smoke_cells()
    settings = {"size": "smoke", "size_text": "hand-made", "calibrator": "binomial",
                "trials": 4, "train_trials": 2, "bootstrap": 4, "elapsed_min": 0.0,
                "preregistered": []}  # fmt: skip
    ap.store(cells, pd.DataFrame({"rule": ["majority"]}), ap.aggregate(cells), "smoke-page",
             "cmd", settings, ap.smoke_replicates(cells))  # fmt: skip
    text = ap.render("smoke-page").read_text()
    assert "median ratio [90 % interval]" in text and "median share [90 % interval]" in text
    assert "labelled training samples | PRM passes / test question (500 / 5,000)" in text
    assert "Hand-made data: no pre-registered draws." in text
    assert "auto-seq[calibrated] — falls back to vote-lead" in text
    assert "## Headline" in text and "`beacon`, `pandora`" in text
    first = text
    assert ap.render("smoke-page").read_text() == first  # renders from its files alone


def test_the_headline_names_every_check_met_missed_and_lost():
    frame = pd.DataFrame([
        # met: upper end 0.66 <= 0.7
        {"world": "gen__prm-a", "rule": "majority", "split": "id", "target": "u64",
         "median": 0.36, "low": 0.22, "high": 0.66, "limit": 0.7, "met": True},
        # median within the limit, upper end not: missed, not behind
        {"world": "gen__prm-a", "rule": "majority", "split": "id", "target": "u16",
         "median": 0.5, "low": 0.3, "high": 0.9, "limit": 0.7, "met": False},
        # behind the rival: median above 1
        {"world": "gen__prm-a", "rule": "highest-last", "split": "ood", "target": "u64",
         "median": 1.25, "low": 0.14, "high": np.inf, "limit": 1.1, "met": False},
    ])  # fmt: skip
    lines = peer_stats.verdict(frame)
    assert lines[0] == (
        "- **id** (limit ≤ 0.7, at least 30 % fewer draws than the best calibrator-free "
        "rival): met in 1 of 2 checks (prm-a majority u64 0.36 [0.22, 0.66]); not met: prm-a "
        "majority u16 0.50 [0.30, 0.90]."
    )
    assert lines[1] == (
        "- **ood** (limit ≤ 1.1): met in 0 of 1 checks; not met: prm-a highest-last u64 1.25 "
        "[0.14, ∞]; `auto-seq[calibrated]` needs more draws than the rival (median ratio above "
        "1): prm-a highest-last u64 1.25 [0.14, ∞]."
    )


def test_each_missed_check_gets_the_reason_its_row_shows():
    base = {"world": "gen__prm-a", "split": "id", "target": "u64", "limit": 0.7, "met": False,
            "calibrated_draws": 10.0, "rival_draws": 8.0, "falls_back_to": "",
            "rival": "vote-lead"}  # fmt: skip
    frame = pd.DataFrame([
        base | {"rule": "r-met", "median": 0.4, "high": 0.6, "met": True},
        base | {"rule": "r-never", "median": np.inf, "high": np.inf, "calibrated_draws": np.inf},
        base | {"rule": "r-noise", "median": 0.6, "high": 0.8, "falls_back_to": "vote-lead"},
        base | {"rule": "r-fallback", "median": 2.0, "high": 2.5, "falls_back_to": "vote-lead"},
        base | {"rule": "r-flat", "median": 1.0, "high": 1.0, "calibrated_draws": 1.0,
                "rival_draws": 1.0},
        base | {"rule": "r-policy", "median": 0.9, "high": 1.0, "rival": "auto-seq[base]"},
        base | {"rule": "r-ahead", "median": 1.4, "high": 1.6},
        base | {"rule": "r-peer", "median": 0.9, "high": 1.0},
    ])  # fmt: skip
    reasons = [peer_stats.miss_reason(r) for _, r in frame.iloc[1:].iterrows()]
    assert reasons == ["never", "noise", "fallback", "flat", "policy", "peer-ahead", "peer"]
    lines = peer_stats.why_missed(frame)
    assert len(lines) == 7 and all(line.startswith("- **id**, 1 of 7 misses: ") for line in lines)
    assert "(prm-a r-noise u64)" in lines[1] and "more draws or questions" in lines[1]
    assert peer_stats.why_missed(frame.iloc[:1]) == []  # every check met: nothing to explain


def test_a_pages_source_names_the_commit_its_script_started_from(tmp_path, monkeypatch):
    """A commit made while a page's data is computed is not the data's commit."""
    monkeypatch.setattr(rp, "RESULTS", tmp_path)
    monkeypatch.setattr(rp, "commit", lambda: "made-later")
    source = rp.record_source("page", "python make_page.py")
    assert source["commit"] == rp.STARTED_AT_COMMIT != "made-later"
    assert rp.read_source("page")["commit"] == rp.STARTED_AT_COMMIT
