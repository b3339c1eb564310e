"""One question's best-of-N record: the pick of a selection rule among its first n candidates.

Shared by every allocation of ``dprm solve --mode bon`` (:mod:`dprm.live.bon`, the sequential
:mod:`dprm.live.bon_seq`, the peers of :mod:`dprm.live.bon_peers`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dprm.ias.selection.rules import CONTRACT_RULE, select_candidate
from dprm.live.run import SolveConfig


def candidate_answer(cand: dict) -> str:
    """A candidate's canonical final answer (logged since voting; else read from its text)."""
    if "answer" in cand:
        return str(cand["answer"] or "")
    from dprm.llm.answers import canonical_answer

    return canonical_answer(str(cand.get("text") or ""))


def first_n_pick(cands: list[dict], n: int, rule: str = CONTRACT_RULE) -> dict[str, Any]:
    """The pick of ``rule`` among the first ``n`` candidates (:func:`select_candidate`: the
    highest uncalibrated PRM score, or the vote on final answers, ties to the higher score)."""
    first = cands[:n]
    scores = [c["prm_score"] for c in first]
    index = select_candidate(
        rule, scores, None if rule == CONTRACT_RULE else [candidate_answer(c) for c in first]
    )
    chosen = {"index": index, "prm_score": cands[index]["prm_score"], "text": cands[index]["text"]}
    if rule != CONTRACT_RULE:
        chosen["answer"] = candidate_answer(cands[index])
    return {
        "n": n,
        "samples": n,
        "tokens": int(sum(c["n_tokens"] for c in first)),
        "chosen": chosen,
        "correct": cands[index]["correct"],
    }


def question_record(
    row: dict,
    config: SolveConfig,
    question_score: float,
    p_hat: float,
    levels: np.ndarray,
    quantiles: np.ndarray,
    cands: list[dict],
    budget: int,
    base_n: int,
    **extra: Any,
) -> dict[str, Any]:
    """One question's ``bon.jsonl`` record: its adaptive pick from the first ``budget``
    candidates, the fixed baseline's from the first ``base_n`` (none when 0), and ``extra``
    (allocation details) after the question's calibrated reading."""
    adaptive = first_n_pick(cands, budget, config.rule)
    return {
        "question_id": row["question_id"],
        "mode": "bon",
        **({"allocation": extra.pop("allocation")} if "allocation" in extra else {}),
        "gold": row["answer"] or None,
        "C": float(config.C),
        "question_prm_score": float(question_score),
        "question_p_hat": float(p_hat),
        "question_quantiles": {"levels": levels.tolist(), "values": quantiles.tolist()},
        **extra,
        "budget": int(budget),
        "samples": adaptive["samples"],
        "tokens": adaptive["tokens"],
        "chosen": adaptive["chosen"],
        "correct": adaptive["correct"],
        "baseline": first_n_pick(cands, base_n, config.rule) if base_n else None,
        "candidates": cands,
    }
