"""The paper-vs-dprm comparison: fed the paper's own cells, it must give back the paper's rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dprm.report.paper import (
    PAPER_DATASETS,
    PAPER_METRICS,
    cell_comparison,
    improvement_comparison,
    paper_improvements,
    paper_tables,
    reading,
)


def _paper_as_metrics() -> pd.DataFrame:
    """The paper's cells as a tidy metrics frame of ours (dataset and metric names mapped)."""
    cells = paper_tables()
    wide = cells.pivot_table(
        index=["prm", "dataset", "generator", "method"], columns="metric", values="value"
    ).reset_index()
    to_ours = {v: k for k, v in PAPER_DATASETS.items()}
    wide["dataset"] = wide["dataset"].map(to_ours)
    wide = wide.rename(columns={v: k for k, v in PAPER_METRICS.items()})
    if "wql" not in wide:
        wide["wql"] = np.nan
    return wide.assign(seed=0)


def test_paper_data_shape():
    cells = paper_tables()
    assert len(cells) == 432  # 3 PRMs x 2 datasets x 6 generators x 3 methods x 4 metrics
    assert cells.groupby(["prm", "dataset"]).ngroups == 6
    cell = cells.query(
        "prm == 'qwen-prm' and dataset == 'math500' and generator == 'llama-3.2-1b' "
        "and method == 'ot' and metric == 'brier'"
    )
    assert float(cell["value"].iloc[0]) == 0.0725
    assert len(paper_improvements()) == 42


def test_the_paper_against_itself_gives_zero_differences_and_its_own_improvements():
    metrics = _paper_as_metrics()
    cells = cell_comparison(metrics)
    finite = cells.dropna(subset=["paper", "dprm"])
    assert len(finite) >= 396 and np.allclose(finite["difference"], 0.0)
    imp = improvement_comparison(metrics)
    assert len(imp) == 42 and (imp["n_generators"] == 6).all()
    # the paper's rows are rounded to 0.1 and computed from cells rounded to 1e-4
    assert np.abs(imp["dprm"] - imp["paper"]).max() < 0.6
    lines = reading(cells, imp)
    assert any("agree in" in line for line in lines)
    assert any("same order" in line for line in lines)
