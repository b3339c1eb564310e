"""The "What this run can show" section of ``report.md``: the run's sizes and its PRM's ranking
power, measured on the run's own best-of-N pools, the noise of the Monte Carlo reference its
calibration metrics are scored against, and what they allow one to conclude."""

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


def reference_noise(records: pd.DataFrame) -> dict:
    """How noisy a calibration set's Monte Carlo reference is (``success_prob``, ``n_rollouts``
    and, where present, ``label_source`` per labelled prefix).

    A prefix labelled by n rollouts has an estimate p_hat of variance p(1 - p) / n, and
    p_hat(1 - p_hat) / (n - 1) estimates that without bias; a prefix whose answer is already
    written (``label_source`` "complete" or "boxed") is graded exactly. The mean over the
    prefixes is the Brier that even a predictor of the true success probabilities scores
    against this reference (a predictor not fitted to these rollouts scores its squared error
    to the truth plus it).

    Returns: prefixes, those labelled by rollouts, their median rollouts, and that floor (NaN
    when a prefix has a single rollout).
    """
    n = records["n_rollouts"].to_numpy(dtype=float)
    p = records["success_prob"].to_numpy(dtype=float)
    if "label_source" in records.columns:
        sampled = records["label_source"].to_numpy() == "rollouts"
    else:
        sampled = np.ones(len(n), dtype=bool)
    n_s, p_s = n[sampled], p[sampled]
    if len(n) and (not len(n_s) or n_s.min() > 1):
        floor = float(np.sum(p_s * (1 - p_s) / (n_s - 1)) / len(n))
    else:
        floor = float("nan")
    return {
        "prefixes": int(len(n)),
        "sampled": int(sampled.sum()),
        "rollouts": float(np.median(n_s)) if len(n_s) else 0.0,
        "floor": floor,
    }


def reference_lines(references: dict[str, dict[str, dict]]) -> list[str]:
    """One line per world on its held-out calibration sets' Monte Carlo reference."""
    lines = []
    for world, by_split in references.items():
        parts = [
            f"{split} {r['prefixes']} prefixes, {r['sampled']} of them labelled by "
            f"{r['rollouts']:.0f} rollouts, the rest graded"
            + ("" if math.isnan(r["floor"]) else f" (floor {r['floor']:.3f})")
            for split, r in by_split.items()
        ]
        if parts:
            lines.append(
                f"- {world}: the calibration tables score each prefix against its Monte Carlo "
                f"success estimate, not a known truth: {'; '.join(parts)}. The floor is the "
                "Brier a predictor of the true success probabilities would score against that "
                "noisy reference; Brier differences between methods are measured above it."
            )
    return lines


def scope_lines(
    pools: dict[str, dict[str, pd.DataFrame]],
    references: dict[str, dict[str, dict]] | None = None,
) -> list[str]:
    """The section: per world and split, the numbers of :func:`pool_scope` and what they allow.

    Args:
        pools: ``{world: {split: responses}}`` of the run's best-of-N pools.
        references: ``{world: {split: reference_noise(...)}}`` of the held-out calibration
            sets scored against Monte Carlo estimates (:func:`read_references`), if any.
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
    return [*lines, "", *notes, *reference_lines(references or {}), ""]


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


def read_references(world_dirs: dict[str, Path]) -> dict[str, dict[str, dict]]:
    """``{world: {split: reference_noise(...)}}`` of the held-out calibration sets whose
    reference is a Monte Carlo estimate (sets with a known truth, as synthetic worlds have, are
    left out)."""
    import pyarrow.parquet as pq

    needed = ["success_prob", "n_rollouts"]
    references: dict[str, dict[str, dict]] = {}
    for world, folder in world_dirs.items():
        for split in SCOPE_SPLITS:
            path = Path(folder) / split / "calib" / "records.parquet"
            if not path.is_file():
                continue
            # only the columns the floor needs (the records also hold each prefix's text)
            names = set(pq.read_schema(path).names)
            if {"true_mu", "true_sigma"} <= names or not set(needed) <= names:
                continue
            columns = needed + (["label_source"] if "label_source" in names else [])
            records = pd.read_parquet(path, columns=columns)
            references.setdefault(world, {})[split] = reference_noise(records)
    return references
