"""Accuracy vs compute of a ``dprm solve`` run: the pieces the bon and beam summaries share.

A *side* is one method's totals over the finished questions (the adaptive run, or the fixed
baseline stored under ``record["baseline"]``); the *saving* compares the two.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def mean_or_none(values: list) -> float | None:
    """The mean of ``values``, or None when there are none."""
    return float(np.mean(values)) if values else None


def side_totals(records: list[dict], key: str | None) -> dict[str, Any]:
    """Accuracy (over graded questions), samples and tokens of one side.

    Args:
        records: finished questions (or picks) with ``correct``, ``samples`` and ``tokens``.
        key: None for the records themselves, else the sub-record to read (``"baseline"``).
    """
    parts = [r if key is None else r[key] for r in records]
    graded = [p["correct"] for p in parts if p["correct"] is not None]
    return {
        "accuracy": mean_or_none([float(v) for v in graded]),
        "n_graded": len(graded),
        "samples": int(sum(p["samples"] for p in parts)),
        "tokens": int(sum(p["tokens"] for p in parts)),
        "mean_samples": mean_or_none([p["samples"] for p in parts]),
    }


def grading_totals(items) -> dict[str, int]:
    """``{candidates, failed}`` over graded items (``correct`` not None): how many were graded,
    and how many of them the grader timed out on or failed (graded False, ``grade_failed``)."""
    graded = [c for c in items if c.get("correct") is not None]
    return {"candidates": len(graded), "failed": sum(bool(c.get("grade_failed")) for c in graded)}


def add_baseline(
    summary: dict[str, Any], records: list[dict], adaptive: dict[str, Any], baseline_n: int
) -> dict[str, Any] | None:
    """Add the baseline's totals and the saving to ``summary`` when every record has one.

    Args:
        summary: the summary being built (``baseline`` and ``saving`` are set in place).
        records: the finished questions.
        adaptive: the adaptive side's totals (:func:`side_totals`).
        baseline_n: the baseline's fixed budget (stored as the side's ``n``).

    Returns:
        The baseline's totals, or None (``summary`` unchanged) when some record has none.
    """
    if not records or not all(r.get("baseline") for r in records):
        return None
    base = side_totals(records, "baseline")
    base["n"] = int(baseline_n)
    summary["baseline"] = base
    summary["saving"] = {
        "samples": 1.0 - adaptive["samples"] / max(base["samples"], 1),
        "tokens": 1.0 - adaptive["tokens"] / max(base["tokens"], 1),
        "accuracy_change": None
        if adaptive["accuracy"] is None or base["accuracy"] is None
        else adaptive["accuracy"] - base["accuracy"],
    }
    return base


def write_summary(out: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """Write ``OUT/summary.json`` (strict JSON) and return ``summary``."""
    from dprm.io import write_json

    write_json(out / "summary.json", summary, allow_nan=False)
    return summary
