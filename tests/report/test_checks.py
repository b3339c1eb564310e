"""``dprm.report.checks``: the greedy-allocation check on hand-made sweep rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dprm.report.checks import greedy_checks


def _rows(allocation: str, accuracy: list[float], seed: int = 0) -> list[dict]:
    return [
        {
            "world": "w",
            "dataset": "id",
            "method": "ot",
            "allocation": allocation,
            "C": c,
            "seed": seed,
        }
        | {"cost": cost, "accuracy": a}
        for c, cost, a in zip((0.5, 0.9), (0.1, 0.5), accuracy, strict=True)
    ]


def test_greedy_minus_rule_and_minus_uniform_are_hand_computed():
    ias = pd.DataFrame(
        _rows("C", [0.50, 0.70])
        + _rows("greedy", [0.60, 0.74])
        + _rows("C", [0.52, 0.70], seed=1)  # seeds are averaged: C rule 0.51, 0.70
        + _rows("greedy", [0.60, 0.76], seed=1)  # greedy 0.60, 0.75
        + _rows("tau", [0.0, 0.0])  # other sweeps are ignored
    )
    uniform = pd.DataFrame(
        {"world": "w", "dataset": "id", "cost": [0.0, 1.0], "accuracy": [0.4, 0.9]}
    )
    (row,) = greedy_checks(ias, uniform)
    # greedy - rule: mean(0.60 - 0.51, 0.75 - 0.70) = 0.07
    assert row["greedy_minus_rule"] == pytest.approx(0.07)
    # uniform at cost 0.1 / 0.5: 0.45 / 0.65 -> rule - uniform = mean(0.06, 0.05)
    assert row["rule_minus_uniform"] == pytest.approx(0.055)
    assert row["greedy_minus_uniform"] == pytest.approx(0.125)
    (no_uniform,) = greedy_checks(ias)
    assert math.isnan(no_uniform["rule_minus_uniform"])
    assert greedy_checks(ias[ias["allocation"] != "greedy"]) == []
