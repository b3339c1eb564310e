"""The "does it pay?" rendering (dprm.report.pays)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dprm.report.pays import pays_markdown, pays_summary


def test_pays_summary_and_markdown():
    rows = []
    for seed in range(3):
        for method, kind, acc in (("uniform", "uniform", 0.5), ("oracle", "oracle", 0.6),
                                  ("ot", "auto", 0.52 + 0.01 * seed)):  # fmt: skip
            rows.append(
                {
                    "world": "w",
                    "split": "id",
                    "seed": seed,
                    "rule": "highest-last",
                    "method": method,
                    "kind": kind,
                    "cost": 0.1,
                    "accuracy": acc,
                    "headroom": 0.1,
                    "gain": acc - 0.5,
                }  # fmt: skip
            )
    pays = pd.DataFrame(rows)
    summary = pays_summary(pays).set_index("method")
    assert summary.loc["ot", "seeds"] == 3
    assert np.isclose(summary.loc["ot", "share"], 0.3)
    text = pays_markdown(pays)
    assert "| w | id | ot | auto | 0.530 ± 0.010 (+30%) |" in text
