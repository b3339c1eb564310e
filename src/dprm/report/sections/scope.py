"""The "What this run can show" section of ``report.md``: the run's sizes and its PRM's ranking
power, measured on the run's own best-of-N pools, and what they allow one to conclude."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

#: the pools the section reads, in the order it lists them
SCOPE_SPLITS = ("id", "ood")
#: fewer questions with both right and wrong candidates than this: the AUROC is not judged
MIN_MIXED = 10


def _auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(a positive's score > a negative's), ties half."""
    p, q = pos[:, None], neg[None, :]
    return float(((p > q).sum() + 0.5 * (p == q).sum()) / (p.size * q.size))


def pool_scope(responses: pd.DataFrame) -> dict:
    """Sizes and ranking power of one best-of-N pool (``question_id``, ``prm_score``,
    ``correct`` per candidate).

    Returns: questions, candidates per question (mean), the mean candidate accuracy, the share
    of questions with a correct candidate, questions with both right and wrong candidates, the
    PRM's within-question AUROC (mean over those questions; NaN without any) and the accuracy
    of the highest-scoring candidate.
    """
    auroc, top = [], []
    for _, group in responses.groupby("question_id", sort=False):
        scores = group["prm_score"].to_numpy(dtype=float)
        right = group["correct"].to_numpy(dtype=bool)
        top.append(float(right[scores == scores.max()].mean()))
        if right.any() and not right.all():
            auroc.append(_auroc(scores[right], scores[~right]))
    counts = responses.groupby("question_id", sort=False).size()
    solved = responses.groupby("question_id", sort=False)["correct"].any()
    return {
        "questions": int(len(counts)),
        "candidates": float(counts.mean()),
        "accuracy": float(responses["correct"].mean()),
        "any_correct": float(solved.mean()),
        "mixed": len(auroc),
        "auroc": float(np.mean(auroc)) if auroc else float("nan"),
        "top": float(np.mean(top)),
    }


def scope_lines(pools: dict[str, dict[str, pd.DataFrame]]) -> list[str]:
    """The section: per world and split, the numbers of :func:`pool_scope` and what they allow.

    Args:
        pools: ``{world: {split: responses}}`` of the run's best-of-N pools.
    """
    if not any(pools.values()):
        return []
    lines = [
        "## What this run can show",
        "",
        "Measured on this run's best-of-N pools (the PRM's raw last-step score against each "
        "candidate's correctness).",
        "",
        "| world | split | questions | candidates / question | candidate accuracy | "
        "questions with a correct candidate | questions with right and wrong candidates | "
        "PRM within-question AUROC | accuracy of the PRM's top candidate |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for world, by_split in pools.items():
        for split, responses in by_split.items():
            s = pool_scope(responses)
            auroc = "n/a" if math.isnan(s["auroc"]) else f"{s['auroc']:.2f}"
            lines.append(
                f"| {world} | {split} | {s['questions']} | {s['candidates']:.0f} | "
                f"{s['accuracy']:.3f} | {s['any_correct']:.2f} | {s['mixed']} | {auroc} | "
                f"{s['top']:.3f} |"
            )
            p = min(max(s["accuracy"], 0.05), 0.95)
            # two accuracies on the same questions: a gap under ~2 standard errors is noise
            resolvable = 2 * math.sqrt(2 * p * (1 - p) / max(1, s["questions"]))
            if s["mixed"] < MIN_MIXED:
                rank = (
                    f"only {s['mixed']} questions have both right and wrong candidates, too few "
                    "to judge how well the PRM ranks a question's candidates"
                )
            elif s["auroc"] < 0.6:
                rank = (
                    f"the PRM barely ranks a question's candidates (AUROC {s['auroc']:.2f} on "
                    f"{s['mixed']} questions): score-based selection and allocation can gain "
                    "little over uniform sampling here"
                )
            else:
                rank = (
                    f"the PRM ranks a question's candidates (AUROC {s['auroc']:.2f} on "
                    f"{s['mixed']} questions), so score-based selection has signal to use"
                )
            notes.append(
                f"- {world}, {split}: with {s['questions']} questions, accuracy differences "
                f"below about {resolvable:.2f} are within noise (two standard errors of a "
                f"paired difference at accuracy {s['accuracy']:.2f}); {rank}."
            )
    return [*lines, "", *notes, ""]


def read_pools(world_dirs: dict[str, Path]) -> dict[str, dict[str, pd.DataFrame]]:
    """``{world: {split: responses}}`` of the pools present under each world's folder."""
    from dprm.data.bon_set import read_bon_set

    pools: dict[str, dict[str, pd.DataFrame]] = {}
    for world, folder in world_dirs.items():
        for split in SCOPE_SPLITS:
            path = Path(folder) / split / "bon"
            if (path / "responses.parquet").is_file():
                responses = read_bon_set(path, check_hidden=False).responses
                pools.setdefault(world, {})[split] = responses
    return pools
