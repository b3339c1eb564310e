"""The paper's calibration tables as package data: shape, and cells checked against the paper.

The expected values below were read off the paper's three calibration tables (Qwen2.5-Math-PRM-7B
in the main text, ReasonEval-7B and Math-Shepherd-Mistral-7B in the appendix) independently of
the CSV, one or more cells per table, dataset and method.
"""

from __future__ import annotations

from importlib.resources import files

import numpy as np
import pandas as pd
import pytest

PRMS = {"qwen-prm", "reasoneval", "shepherd"}
DATASETS = {"math500", "aime24-25"}
GENERATORS = {
    "llama-3.2-1b",
    "llama-3.1-8b",
    "qwen-2.5-1.5b",
    "qwen-2.5-7b",
    "r1-llama-8b",
    "r1-qwen-7b",
}
METHODS = {"base", "ot", "qr"}
METRICS = {"brier", "posbrier", "ece", "wql"}


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return pd.read_csv(files("dprm.report") / "paper_tables.csv")


def test_shape_is_the_full_grid(table):
    assert list(table.columns) == ["prm", "dataset", "generator", "method", "metric", "value"]
    assert len(table) == 432 == 3 * 2 * 6 * 3 * 4
    assert set(table["prm"]) == PRMS and set(table["dataset"]) == DATASETS
    assert set(table["generator"]) == GENERATORS
    assert set(table["method"]) == METHODS and set(table["metric"]) == METRICS
    key = ["prm", "dataset", "generator", "method", "metric"]
    assert not table.duplicated(key).any()
    # Base has no predictive distribution: its WQL is missing, and only that is missing.
    missing = table[table["value"].isna()]
    assert len(missing) == 36
    assert set(missing["method"]) == {"base"} and set(missing["metric"]) == {"wql"}
    values = table["value"].dropna()
    assert ((values > 0) & (values < 1)).all()


# (prm, dataset, generator, method, metric) -> value as printed in the paper
PAPER_CELLS = {
    # Table 1 (Qwen2.5-Math-PRM-7B)
    ("qwen-prm", "math500", "llama-3.2-1b", "base", "brier"): 0.3524,
    ("qwen-prm", "math500", "llama-3.2-1b", "ot", "wql"): 0.0608,
    ("qwen-prm", "math500", "qwen-2.5-7b", "qr", "brier"): 0.1444,
    ("qwen-prm", "math500", "r1-llama-8b", "qr", "posbrier"): 0.0761,
    ("qwen-prm", "aime24-25", "r1-qwen-7b", "base", "ece"): 0.7703,
    ("qwen-prm", "aime24-25", "llama-3.2-1b", "ot", "brier"): 0.0181,
    ("qwen-prm", "aime24-25", "qwen-2.5-1.5b", "qr", "wql"): 0.2086,
    # ReasonEval-7B (appendix)
    ("reasoneval", "math500", "qwen-2.5-7b", "base", "ece"): 0.0978,
    ("reasoneval", "math500", "llama-3.1-8b", "ot", "posbrier"): 0.1753,
    ("reasoneval", "aime24-25", "qwen-2.5-7b", "ot", "brier"): 0.5469,
    ("reasoneval", "aime24-25", "r1-llama-8b", "qr", "ece"): 0.4636,
    # Math-Shepherd-Mistral-7B (appendix)
    ("shepherd", "math500", "r1-qwen-7b", "base", "posbrier"): 0.0445,
    ("shepherd", "math500", "qwen-2.5-1.5b", "qr", "wql"): 0.1361,
    ("shepherd", "aime24-25", "qwen-2.5-1.5b", "ot", "brier"): 0.5851,
    ("shepherd", "aime24-25", "r1-llama-8b", "base", "brier"): 0.1746,
    ("shepherd", "aime24-25", "llama-3.2-1b", "qr", "ece"): 0.4782,
}


@pytest.mark.parametrize(("key", "expected"), list(PAPER_CELLS.items()))
def test_cells_match_the_paper(table, key, expected):
    prm, dataset, generator, method, metric = key
    row = table[
        (table["prm"] == prm)
        & (table["dataset"] == dataset)
        & (table["generator"] == generator)
        & (table["method"] == method)
        & (table["metric"] == metric)
    ]
    assert len(row) == 1
    assert row["value"].iloc[0] == pytest.approx(expected, abs=5e-5)


def test_base_posbrier_never_exceeds_brier(table):
    """PosBrier is a part of the Brier score, so no cell may have PosBrier > Brier."""
    wide = table.pivot_table(
        index=["prm", "dataset", "generator", "method"], columns="metric", values="value"
    )
    assert np.all(wide["posbrier"] <= wide["brier"] + 1e-4)
