"""The report's recommendation computed from its tables (:mod:`dprm.report.recommendation`)."""

from __future__ import annotations

import pandas as pd

from dprm.report.recommendation import harm_table, recommend, recommendation_lines


def _metrics(briers: dict[str, dict[str, float]], se: float = 0.002) -> pd.DataFrame:
    """Rows of one world: method -> {split: Brier}, Base first; three seeds, equal values."""
    rows = []
    for method, by_split in briers.items():
        for split, brier in by_split.items():
            for seed in (0, 1, 2):
                raw = briers["base"][split]
                row = {"world": "w", "dataset": split, "method": method, "seed": seed,
                       "brier": brier, "wql": brier / 2, "brier_vs_raw": brier - raw,
                       "brier_vs_raw_se": 0.0 if method == "base" else se}  # fmt: skip
                if method == "base":
                    row |= {"shift_auc": 0.9 if split == "ood" else 0.5}
                rows.append(row)
    return pd.DataFrame(rows)


def test_the_recommendation_follows_the_tables_not_a_name():
    metrics = _metrics({
        "base": {"id": 0.10, "ood": 0.30},
        "binomial": {"id": 0.05, "ood": 0.40},  # best ID, bad OOD
        "platt": {"id": 0.07, "ood": 0.20},  # best on average
        "conformal": {"id": 0.01, "ood": 0.01},  # a lower bound: never a candidate
    })  # fmt: skip
    rec = recommend(metrics)
    assert rec["calibration"] == "platt" and rec["raw_here"] == []
    assert rec["ias"] == "platt" and rec["ias_basis"] == "held-out WQL"
    # make binomial the best on average: it is chosen, and OOD is "use the raw score here"
    metrics.loc[(metrics["method"] == "binomial") & (metrics["dataset"] == "id"), "brier"] = -0.2
    rec = recommend(metrics)
    assert rec["calibration"] == "binomial" and rec["raw_here"] == [("w", "ood")]
    text = "\n".join(recommendation_lines(metrics))
    assert "**Use the raw score here:** w OOD" in text
    assert "w OOD: worse than the raw PRM" in text and "Binomial" in text
    assert "inputs look shifted from the training questions (shift AUC 0.90" in text
    assert "w ID: inputs look shifted" not in text


def test_ias_choice_reads_the_auto_rows_of_the_pays_table():
    metrics = _metrics({"base": {"id": 0.1, "ood": 0.3}, "ot": {"id": 0.05, "ood": 0.2},
                        "binomial": {"id": 0.06, "ood": 0.21}})  # fmt: skip
    pays = pd.DataFrame({"split": ["id", "id", "id"], "method": ["ot", "binomial", "ot"],
                         "allocation": ["auto", "auto", "uniform"], "gain": [0.01, 0.03, 0.5]})  # fmt: skip
    rec = recommend(metrics, pays)
    assert rec["calibration"] == "ot" and rec["ias"] == "binomial"
    assert rec["ias_basis"] == "auto - uniform accuracy"


def test_a_worse_calibrator_within_noise_is_not_flagged():
    metrics = _metrics({"base": {"id": 0.10, "ood": 0.30}, "ot": {"id": 0.101, "ood": 0.2}})
    harm = harm_table(metrics)
    assert not harm["worse_than_raw"].any()
    assert harm.loc[harm["method"] == "ot", "seeds"].tolist() == [3, 3]


def test_the_raw_score_is_recommended_when_no_calibrator_beats_it_on_average():
    """Every calibrator within noise of the raw score on each split, but worse on average: the
    report keeps the raw score for calibration tables instead of naming the least bad one."""
    metrics = _metrics({"base": {"id": 0.10, "ood": 0.30}, "ot": {"id": 0.101, "ood": 0.301},
                        "qr": {"id": 0.12, "ood": 0.35}}, se=0.01)  # fmt: skip
    rec = recommend(metrics)
    assert rec["calibration"] == "ot" and rec["raw_here"] == []
    assert rec["raw_better"] == (0.201, 0.2)
    text = "\n".join(recommendation_lines(metrics))
    assert "For calibration tables: **the raw PRM score**" in text and "OT, 0.2010" in text
    # one calibrator better on average: named as before
    metrics.loc[metrics["method"] == "ot", "brier"] -= 0.01
    rec = recommend(metrics)
    assert rec["calibration"] == "ot" and rec["raw_better"] is None
