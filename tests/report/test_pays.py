"""The "does it pay?" rendering (dprm.report.pays)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dprm.report.pays import pays_markdown, pays_reading, pays_rows, pays_summary


def _pays_frame() -> pd.DataFrame:
    """Hand-made pays rows: one world, ID, two rules, three seeds, costs 0.1 and 0.25."""
    rows = []

    def add(seed, rule, method, allocation, cost, acc, uniform, oracle, split="id"):
        rows.append(
            {
                "world": "w",
                "split": split,
                "seed": seed,
                "rule": rule,
                "method": method,
                "allocation": allocation,
                "cost": cost,
                "accuracy": acc,
                "headroom": oracle - uniform,
                "gain": acc - uniform,
            }
        )

    for seed in range(3):
        for cost, uni, orc in ((0.1, 0.5, 0.6), (0.25, 0.7, 0.74)):
            add(seed, "highest-last", "uniform", "uniform", cost, uni, uni, orc)
            add(seed, "highest-last", "oracle", "oracle", cost, orc, uni, orc)
            add(seed, "highest-last", "ot", "auto", cost, uni + 0.02 + 0.01 * seed, uni, orc)
            add(seed, "highest-last", "truth", "auto", cost, uni + 0.03, uni, orc)
            # the C rule reaches cost 0.25 only (NaN at 0.1) and loses there
            add(seed, "highest-last", "qr", "C", cost, np.nan if cost == 0.1 else 0.68, uni, orc)
            # an allocation this module does not know is rendered too
            add(seed, "highest-last", "ot", "auto-seq", cost, uni + 0.001, uni, orc)
            add(seed, "majority", "uniform", "uniform", cost, 0.4, 0.4, 0.45)
            add(seed, "majority", "oracle", "oracle", cost, 0.45, 0.4, 0.45)
            add(seed, "majority", "ot", "auto", cost, 0.39, 0.4, 0.45)
    return pd.DataFrame(rows)


def test_pays_summary_means_and_spreads_over_seeds():
    summary = pays_summary(_pays_frame())
    ot = summary[
        (summary["allocation"] == "auto")
        & (summary["rule"] == "highest-last")
        & (summary["cost"] == 0.1)
    ].iloc[0]
    assert ot["seeds"] == 3
    assert np.isclose(ot["accuracy"], 0.53) and np.isclose(ot["accuracy_sd"], 0.01)
    assert np.isclose(ot["share"], 0.3) and np.isclose(ot["share_sd"], 0.1)


def test_pays_markdown_renders_the_numbers():
    text = pays_markdown(_pays_frame(), "w")
    lines = text.splitlines()
    assert lines[0] == "| split | selection rule | allocation | cost 0.1 | cost 0.25 |"
    assert "| ID, held out (MATH500-like) | highest-last | uniform | 0.500 | 0.700 |" in lines
    assert "|  |  | auto, OT | 0.530 ± 0.010 (+30 ± 10%) | 0.730 ± 0.010 (+75 ± 25%) |" in lines
    assert "|  |  | C rule, QR | -- | 0.680 (-50%) |" in lines
    assert "|  |  | auto-seq, OT | 0.501 (+1%) | 0.701 (+2%) |" in lines
    assert "|  |  | oracle (headroom) | 0.600 (+0.100) | 0.740 (+0.040) |" in lines
    assert "|  | majority | uniform | 0.400 | 0.400 |" in lines
    # order inside a rule: uniform, the C rule, auto, other allocations, the oracle last
    order = [line.split(" | ")[2] for line in lines[2:8]]
    assert order == [
        "uniform",
        "C rule, QR",
        "auto, OT",
        "auto, Truth",
        "auto-seq, OT",
        "oracle (headroom)",
    ]


def test_pays_reading_says_where_auto_wins_is_level_or_loses():
    reading = pays_reading(_pays_frame())
    assert len(reading) == 2  # (world, split, rule) blocks
    hl, vote = reading
    assert "headroom (oracle − uniform) +0.040 to +0.100" in hl
    assert "`auto`: above uniform in 2 of 2 costs, level in 0, below in 0" in hl
    assert "The C rule: above uniform in 0 of 1 costs, level in 0, below in 1" in hl
    assert "1 cell(s) outside its sweep's cost range" in hl
    # the truth is not counted among the calibrators but reported apart
    assert "with the true distribution of p given h (truth) the gain is +0.030" in hl
    assert "`auto-seq`: above uniform in 0 of 2 costs, level in 2, below in 0" in hl
    assert "headroom (oracle − uniform) +0.050." in vote
    assert "`auto`: above uniform in 0 of 2 costs, level in 0, below in 2; gain -0.010" in vote
    assert "mean share of the headroom -20%" in vote


def test_pays_rows_joins_the_reference_with_each_seed():
    levels = (0.05, 0.1, 0.25)
    ref = [
        {
            "method": m,
            "allocation": m,
            "rule": "highest-last",
            "target_cost": c,
            "cost": c,
            "accuracy": a,
        }
        for c in levels
        for m, a in (("uniform", 0.5 + c), ("oracle", 0.6 + c))
    ]
    ref += [  # Base's C sweep: two points, interpolated at cost 0.1
        {
            "method": "base",
            "allocation": "C",
            "C": C,
            "target_cost": np.nan,
            "cost": x,
            "accuracy": a,
        }
        for C, x, a in ((0.5, 0.05, 0.5), (0.9, 0.15, 0.7))
    ]
    seeds = {
        s: pd.DataFrame(
            [
                {
                    "method": "ot",
                    "allocation": "auto",
                    "rule": "highest-last",
                    "target_cost": c,
                    "cost": c,
                    "accuracy": 0.52 + c + 0.01 * s,
                }  # fmt: skip
                for c in levels
            ]
        )
        for s in (0, 1)
    }
    rows = pays_rows(pd.DataFrame(ref), seeds)
    assert set(rows["seed"]) == {0, 1}
    auto = rows[(rows["allocation"] == "auto") & np.isclose(rows["cost"], 0.1)].set_index("seed")
    assert np.allclose(auto["gain"], [0.02, 0.03]) and np.allclose(auto["headroom"], 0.1)
    base = rows[(rows["allocation"] == "C") & np.isclose(rows["cost"], 0.1)]
    assert np.allclose(base["accuracy"], 0.6)  # halfway between the two C points
    assert pays_rows(pd.DataFrame(ref[-2:]), seeds).empty  # no uniform / oracle rows: nothing


def test_reference_lines_draw_uniform_and_oracle_of_one_rule():
    plt = pytest.importorskip("matplotlib.pyplot")
    from dprm.report.pays import reference_lines

    rows = pd.DataFrame(
        [
            {"allocation": s, "rule": r, "target_cost": c, "cost": c, "accuracy": a + c}
            for c in (0.02, 0.05, 0.1)
            for s, r, a in (
                ("uniform", "highest-last", 0.5),
                ("oracle", "highest-last", 0.6),
                ("oracle", "majority", 0.9),  # another rule: not drawn
                ("C", np.nan, 0.1),  # not a reference line
            )
        ]
    )
    fig, ax = plt.subplots()
    reference_lines(ax, rows)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"uniform best-of-n", "oracle (same mean cost)"}
    assert np.allclose(lines["oracle (same mean cost)"].get_ydata(), [0.62, 0.65, 0.7])
    assert lines["uniform best-of-n"].get_linestyle() == "--"
    ax.clear()
    reference_lines(ax, rows, allocations=("oracle",), xrange=(0.03, 0.2), label=False)
    (line,) = ax.get_lines()
    x, y = line.get_xdata(), line.get_ydata()
    assert x.min() == 0.03 and x.max() == 0.1  # clipped to the range and to the points
    assert np.allclose(y, 0.6 + x) and line.get_label() == "_nolegend_"
    plt.close(fig)


def test_population_oracle_row_and_share_against_both_headrooms():
    """With oracle-pop rows (twin sets) a cell also gives the share of the population headroom."""
    frame = _pays_frame()
    pop = {0.1: 0.55, 0.25: 0.72}  # oracle-pop accuracy: headroom_pop 0.05 and 0.02
    frame["headroom_pop"] = np.where(
        frame["rule"] == "highest-last",
        frame["cost"].map(pop) - np.where(frame["cost"] == 0.1, 0.5, 0.7),
        np.nan,
    )
    extra = frame[(frame["allocation"] == "uniform") & (frame["rule"] == "highest-last")].copy()
    extra["allocation"] = extra["method"] = "oracle-pop"
    extra["accuracy"] = extra["cost"].map(pop)
    extra["gain"] = extra["accuracy"] - np.where(extra["cost"] == 0.1, 0.5, 0.7)
    lines = pays_markdown(pd.concat([frame, extra], ignore_index=True), "w").splitlines()
    # auto OT gains 0.03 at cost 0.1: 30 % of the pool headroom 0.1, 60 % of the population's 0.05
    assert (
        "|  |  | auto, OT | 0.530 ± 0.010 (+30 ± 10%; +60% pop.) | 0.730 ± 0.010 (+75 ± 25%; +150% pop.) |"
        in lines
    )
    assert "|  |  | oracle-pop (true curve, no pool) | 0.550 (+0.050) | 0.720 (+0.020) |" in lines
    labels = [line.split(" | ")[2] for line in lines[2:9]]
    assert labels.index("oracle-pop (true curve, no pool)") == labels.index("oracle (headroom)") - 1
    # no oracle-pop rows (real data): the cells keep the pool share alone
    assert "+30 ± 10%)" in pays_markdown(_pays_frame(), "w")
