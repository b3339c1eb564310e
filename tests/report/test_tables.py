"""Tests for :mod:`dprm.report.tables`: Table 1 layout, best marking and % improvement rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dprm.report import tables as T


def _metrics(seeds=(0,)) -> pd.DataFrame:
    rows = []
    values = {
        # (dataset, generator): {method: (brier, pos_brier, ece, wql)}
        ("id", "g1"): {
            "base": (0.4, 0.3, 0.5, np.nan),
            "ot": (0.1, 0.05, 0.1, 0.06),
            "qr": (0.2, 0.2, 0.3, 0.12),
        },
        ("id", "g2"): {
            "base": (0.2, 0.1, 0.2, np.nan),
            "ot": (0.15, 0.1, 0.1, 0.10),
            "qr": (0.1, 0.12, 0.2, 0.10),
        },
        ("ood", "g1"): {
            "base": (0.5, 0.5, 0.6, np.nan),
            "ot": (0.25, 0.2, 0.3, 0.15),
            "qr": (0.3, 0.3, 0.4, 0.2),
        },
        ("ood", "g2"): {
            "base": (0.6, 0.6, 0.7, np.nan),
            "ot": (0.3, 0.3, 0.35, 0.2),
            "qr": (0.4, 0.4, 0.5, 0.25),
        },
    }
    for seed in seeds:
        for (d, g), per in values.items():
            for m, v in per.items():
                jitter = 0.0 if m == "base" else 0.01 * seed
                rows.append(
                    {"dataset": d, "generator": g, "prm": "qwen-prm", "method": m, "seed": seed}
                    | dict(
                        zip(("brier", "pos_brier", "ece", "wql"), np.add(v, jitter), strict=True)
                    )
                )
    # an extra method that must appear after Base / OT / QR without code changes
    rows.append(
        {
            "dataset": "id",
            "generator": "g1",
            "prm": "qwen-prm",
            "method": "isotonic",
            "seed": 0,
            "brier": 0.09,
            "pos_brier": 0.3,
            "ece": 0.1,
            "wql": np.nan,
        }
    )
    return pd.DataFrame(rows)


def test_improvement_rows_follow_the_paper():
    table = T.build_table(_metrics())
    assert table.methods == ["base", "ot", "qr", "isotonic"]
    imp = table.improvement
    # OT Brier on ID: mean of (0.4-0.1)/0.4 and (0.2-0.15)/0.2 = (75 + 25) / 2
    assert imp.loc[("id", "ot"), "brier"] == pytest.approx(50.0)
    assert imp.loc[("id", "qr"), "brier"] == pytest.approx((50.0 + 50.0) / 2)
    # WQL: OT relative to QR (dagger), QR itself has none
    assert imp.loc[("id", "ot"), "wql"] == pytest.approx((50.0 + 0.0) / 2)
    assert np.isnan(imp.loc[("id", "qr"), "wql"])
    # a method present for one generator only averages over what it has
    assert imp.loc[("id", "isotonic"), "brier"] == pytest.approx(77.5)
    assert np.isnan(imp.loc[("ood", "isotonic"), "brier"])


def test_best_marking_and_ties():
    table = T.build_table(_metrics())
    assert table.best.loc[("id", "g1"), ("brier", "isotonic")]
    assert not table.best.loc[("id", "g1"), ("brier", "ot")]
    # g2 ID WQL: OT and QR tie at 0.10 -> both marked; Base (NaN) never
    assert (
        table.best.loc[("id", "g2"), ("wql", "ot")] and table.best.loc[("id", "g2"), ("wql", "qr")]
    )
    assert not table.best.loc[("id", "g2"), ("wql", "base")]
    assert table.best.sum(axis=1).ge(4).all()  # at least one best per metric per row


def test_seeds_are_averaged_with_std():
    table = T.build_table(_metrics(seeds=(0, 1, 2)))
    assert table.n_seeds == 3
    assert table.mean.loc[("id", "g1"), ("brier", "ot")] == pytest.approx(0.11)
    assert table.std.loc[("id", "g1"), ("brier", "ot")] == pytest.approx(0.01)


def test_renderings(tmp_path):
    tables = T.write_tables(_metrics(), tmp_path)
    assert set(tables) == {"qwen-prm"}
    md = (tmp_path / "calibration_qwen-prm.md").read_text()
    assert "| Dataset | Generator | Brier Base | Brier OT | Brier QR | Brier Isotonic |" in md
    assert "**0.1000**" in md and "+50.0%" in md and "+25.0%†" in md
    assert "*Avg. % improv. OT*" in md and "ID, held out (MATH500-like)" in md
    tex = (tmp_path / "calibration_qwen-prm.tex").read_text()
    assert r"\textbf{0.1000}" in tex and r"\multirow" in tex and r"$^\dagger$" in tex
    assert tex.count(r"\begin{tabular}") == 1 and tex.count(r"\end{tabular}") == 1
    csv = pd.read_csv(tmp_path / "calibration_qwen-prm.csv")
    assert set(csv["row"]) == {"value", "avg_pct_improvement"}
    assert len(csv[csv.row == "value"]) == 4 * 4 * 4  # rows x metrics x methods


def test_several_prms_need_a_choice():
    df = pd.concat([_metrics(), _metrics().assign(prm="shepherd")])
    with pytest.raises(ValueError, match="several PRMs"):
        T.build_table(df)
    assert T.build_table(df, "shepherd").prm == "shepherd"


def test_subset_recomputes_best():
    table = T.build_table(_metrics())
    small = T.subset(table, ["base", "ot", "qr"])
    assert small.methods == ["base", "ot", "qr"]
    # without isotonic, OT (0.1) is the best ID/g1 Brier
    assert small.best.loc[("id", "g1"), ("brier", "ot")]
    assert (
        small.improvement.loc[("id", "ot"), "brier"] == table.improvement.loc[("id", "ot"), "brier"]
    )


def test_truth_table_seed_mean_std_best_and_mean_rows():
    df = _metrics(seeds=(0, 1))
    assert T.truth_markdown(df) is None  # no truth column: not a synthetic world
    df["quantile_error_true"] = df["brier"] / 2
    text = T.truth_markdown(df, "qwen-prm")
    lines = text.splitlines()
    assert lines[0] == "| Dataset | Generator | Base | OT | QR | Isotonic |"
    # id/g1: OT seeds 0.05 and 0.055 -> 0.0525 ± 0.0035; isotonic (0.045, one seed) is best
    g1 = next(line for line in lines if "| ID, held out (MATH500-like) | g1 |" in line)
    assert "0.0525 ± 0.0035" in g1 and "**0.0450**" in g1 and "**0.0525" not in g1
    mean_id = next(line for line in lines if "ID, held out (MATH500-like) | *mean*" in line)
    # OT's mean over generators: (0.0525 + 0.0775) / 2 = 0.065
    assert mean_id.split(" | ")[3] == "0.0650"
    assert sum("*mean*" in line for line in lines) == 2


def test_several_seeds_put_the_std_in_the_table(tmp_path):
    """Seeds > 1: each calibrator cell reads 'mean ± std'; one seed: no band."""
    T.write_tables(_metrics(seeds=(0, 1, 2)), tmp_path)
    md = (tmp_path / "calibration_qwen-prm.md").read_text()
    assert "0.1100 ± 0.0100" in md  # OT id/g1 Brier: 0.10, 0.11, 0.12
    assert "mean ± standard deviation over 3 training seeds" in md
    tex = (tmp_path / "calibration_qwen-prm.tex").read_text()
    assert r"0.1100 $\pm$ 0.0100" in tex
    T.write_tables(_metrics(), tmp_path / "one")
    assert "±" not in (tmp_path / "one" / "calibration_qwen-prm.md").read_text()


def test_a_bound_is_shown_but_never_marked_best(tmp_path):
    df = _metrics()
    # conformal (a deliberately pessimistic lower bound) with the lowest OOD Brier of g1
    df = pd.concat(
        [
            df,
            pd.DataFrame(
                [
                    {"dataset": "ood", "generator": "g1", "prm": "qwen-prm",
                     "method": "conformal", "seed": 0, "brier": 0.01, "pos_brier": 0.9,
                     "ece": 0.9, "wql": 0.9, "quantile_error_true": 0.001}
                ]
            ),
        ],
        ignore_index=True,
    )  # fmt: skip
    table = T.build_table(df)
    assert not table.best[[c for c in table.best.columns if c[1] == "conformal"]].any().any()
    assert table.best.loc[("ood", "g1"), ("brier", "ot")]  # the best estimate wins the row
    text = T.to_markdown(table)
    row = next(line for line in text.splitlines() if "| g1 |" in line and "OOD" in line)
    assert "0.0100" in row and "**0.0100**" not in row and "**0.2500**" in row
    assert "Conformal ‡" in text.splitlines()[0]
    assert "lower bound" in T.caption(table) and "never marked best" in T.caption(table)
    assert not T.subset(table, ["ot", "conformal"]).best[("brier", "conformal")].any()
    truth = T.truth_markdown(df)
    ood = next(line for line in truth.splitlines() if "| g1 |" in line and "OOD" in line)
    assert "0.0010" in ood and "**0.0010**" not in ood
    assert r"$^\ddagger$" in T.to_latex(table)
