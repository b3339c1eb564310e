"""Adaptive best-of-N on a live generator, with a fixed-N baseline on the same samples.

For each question: the question-only PRM state gives the calibrated distribution of p, the
IAS rule of ``dprm ias`` sets N_i, the generator samples candidates, the PRM scores each
complete response (its last step, as in the reference) and the candidate with the highest
uncalibrated score is the answer (docs/design.md §4), or, with ``rule`` ``weighted-last`` /
``majority``, the vote on the candidates' final answers (:func:`dprm.ias.selection.rules.select_candidate`;
each candidate's canonical ``answer`` is in the log). The fixed baseline (``baseline_n`` = B)
uses the same pool: each question draws max(N_i, B) i.i.d. samples once; the adaptive pick
looks at the first N_i, the baseline at the first B, and each method is charged only for the
samples (and their tokens) it looks at. The summary adds the fixed-n curve (first n samples,
n = 1, 2, 4, ..., B) so the fixed n that matches the adaptive accuracy can be read off.

N_i comes from the C rule, from ``dprm ias``'s ``auto`` allocation (``auto_cost``: every
budget fixed before sampling, :func:`dprm.live.bon_auto.auto_budgets`), or from the sequential ``auto-seq``
(``auto_seq``: budgets grow as the candidates are read, :mod:`dprm.live.bon_seq`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dprm.ias.selection.rules import CONTRACT_RULE
from dprm.live.bon_auto import auto_budgets
from dprm.live.bon_peers import solve_peer
from dprm.live.bon_record import first_n_pick, question_record
from dprm.live.bon_seq import solve_sequential
from dprm.live.calibrated_prm import CalibratedPRM, States
from dprm.live.run import SolveConfig, question_states, write_bon_export
from dprm.live.run_frame import grade_texts, open_run, solving
from dprm.live.runlog import ResultLog, read_results
from dprm.live.summary import (
    add_baseline,
    grading_totals,
    mean_or_none,
    side_totals,
    write_summary,
)


def solve_chunk(
    rows: list[dict],
    budgets: list[int],
    states: States,
    cprm: CalibratedPRM,
    generator: Any,
    config: SolveConfig,
    pool: Any,
) -> list[dict]:
    """Sample, score, grade and pick for a few questions; one finished record per question."""
    from dprm.llm.answers import canonical_answer
    from dprm.llm.generate import derive_seed
    from dprm.llm.prompts import build_prompt, split_steps

    base_n = int(config.baseline_n or 0)
    draws = [max(int(b), base_n) for b in budgets]
    completions: list[list] = [[] for _ in rows]
    for n in sorted(set(draws)):
        idx = [i for i, d in enumerate(draws) if d == n]
        outs = generator.generate(
            [build_prompt(rows[i]["question"], generator.model_name) for i in idx],
            n,
            temperature=config.temperature,
            top_p=config.top_p,
            max_new_tokens=config.max_new_tokens,
            seeds=[derive_seed(config.seed, "solve-bon", rows[i]["question_id"]) for i in idx],
        )
        for i, out in zip(idx, outs, strict=True):
            completions[i] = list(out)[:n]
    levels = cprm.default_levels
    q_levels = cprm.quantiles(states, levels)
    p_hat = cprm.mean(states)
    graded = [i for i, r in enumerate(rows) if r["answer"].strip()]
    grades = grade_texts(
        pool,
        [rows[i]["answer"] for i in graded for _ in completions[i]],
        [c.text for i in graded for c in completions[i]],
    )
    grade_at = {}
    pos = 0
    for i in graded:
        grade_at[i] = grades[pos : pos + len(completions[i])]
        pos += len(completions[i])
    records = []
    for i, row in enumerate(rows):
        scored = cprm.path_states(row["question"], [split_steps(c.text) for c in completions[i]])
        cands = [
            {
                "text": c.text,
                "n_tokens": int(c.n_tokens),
                "finish_reason": c.finish_reason,
                "prm_score": float(scored.scores[j]),
                "truncated": bool(scored.truncated[j]),
                "correct": grade_at[i][j][0] if i in grade_at else None,
                "grade_failed": grade_at[i][j][1] if i in grade_at else None,
                "answer": canonical_answer(c.text),
            }
            for j, c in enumerate(completions[i])
        ]
        records.append(
            question_record(
                row,
                config,
                states.scores[i],
                p_hat[i],
                levels,
                q_levels[i],
                cands,
                int(budgets[i]),
                base_n,
            )  # fmt: skip
        )
    return records


def run_bon(
    config: SolveConfig,
    cprm: CalibratedPRM,
    generator: Any,
    out: str | Path,
    *,
    progress: bool = True,
    pool: Any = None,
) -> dict[str, Any]:
    """Adaptive best-of-N over this shard's questions; resumable; returns the summary.

    Writes ``OUT/bonSFX.jsonl`` (one line per question), ``OUT/bon_set/`` (the run as a
    BoN set) and ``OUT/summary.json`` (over every finished question of every shard).
    """
    from dprm.llm.shard import chunked

    out = Path(out)
    questions, suffix, provenance = open_run(out, config, cprm, generator)
    states, budgets = question_states(out, suffix, questions, cprm, float(config.C))
    if config.auto_seq:  # the sequential allocation reads candidates as they arrive
        records = solve_sequential(
            config, cprm, generator, out, suffix, questions, states, progress=progress, pool=pool,
            run_peer=solve_peer,
        )  # fmt: skip
        write_bon_export(out, suffix, records, {"source": "dprm solve --mode bon", **provenance})
        return write_summary(out, summarize_bon(read_results(out, "bon"), config))
    if config.peer is not None:  # a calibrator-free peer reads candidates as they arrive
        records = solve_peer(
            config, cprm, generator, out, suffix, questions, states, progress=progress, pool=pool
        )
        write_bon_export(out, suffix, records, {"source": "dprm solve --mode bon", **provenance})
        return write_summary(out, summarize_bon(read_results(out, "bon"), config))
    if config.auto_cost is not None:  # dprm ias's auto rule over this shard's questions
        budgets = auto_budgets(cprm, states, config.train_bon, float(config.auto_cost), config.rule)
    log = ResultLog(out / f"bon{suffix}.jsonl")
    rows = questions.to_dict("records")
    pending = [i for i, r in enumerate(rows) if r["question_id"] not in log]
    session = solving(len(rows), len(pending), "solve bon", config, progress=progress, pool=pool)
    with session as (bar, pool):
        for part in chunked(pending, config.batch_questions):
            sub = States(states.scores[part], states.hidden[part], states.truncated[part])
            for record in solve_chunk(
                [rows[i] for i in part],
                [int(budgets[i]) for i in part],
                sub,
                cprm,
                generator,
                config,
                pool,
            ):
                log.append(record)
                bar.update(1)
    mine = [log.records[r["question_id"]] for r in rows if r["question_id"] in log]
    write_bon_export(out, suffix, mine, {"source": "dprm solve --mode bon", **provenance})
    return write_summary(out, summarize_bon(read_results(out, "bon"), config))


def check_training_answers(train_bon: str, rule: str) -> None:
    """Fail fast (one line) when ``rule`` votes on final answers and ``train_bon`` has none.

    Raises:
        DataError: a voting rule and a BoN contract v1 training set (no ``answer`` column).
    """
    from dprm.data import read_bon_set
    from dprm.ias.selection.rules import uses_answers
    from dprm.io import DataError

    if not uses_answers(rule):
        return
    train = read_bon_set(train_bon, check_hidden=False)
    if "answer" not in train.responses.columns:
        raise DataError(
            train.path,
            f"--rule {rule} votes on final answers, but this training set is BoN contract v1 "
            "(no 'answer' column); rebuild it with this dprm version",
        )


def fixed_curve(records: list[dict], n_top: int, rule: str = CONTRACT_RULE) -> list[dict[str, Any]]:
    """The pick of ``rule`` from the first n samples, n = 1, 2, 4, ... and ``n_top``: accuracy,
    samples, tokens."""
    ns = sorted({n for n in (2**k for k in range(12)) if n < n_top} | {n_top})
    rows = []
    for n in ns:
        picks = [first_n_pick(r["candidates"], n, rule) for r in records]
        rows.append({"n": n, **side_totals(picks, None)})
    return rows


def summarize_bon(records: list[dict], config: SolveConfig) -> dict[str, Any]:
    """Accuracy vs compute of the adaptive run and the fixed baseline (JSON-ready)."""
    adaptive = side_totals(records, None)
    adaptive["mean_budget"] = mean_or_none([r["budget"] for r in records])
    adaptive["cost"] = (
        None if adaptive["mean_budget"] is None else adaptive["mean_budget"] / config.n_max
    )
    summary: dict[str, Any] = {
        "mode": "bon",
        "allocation": f"peer:{config.peer}"
        if config.peer
        else "auto-seq"
        if config.auto_seq
        else "auto"
        if config.auto_cost
        else "C",
        "rule": config.rule,
        "C": config.C,
        "n_max": config.n_max,
        "n_questions": len(records),
        "adaptive": adaptive,
        "baseline": None,
        "grading": grading_totals(c for r in records for c in r["candidates"]),
    }
    backs = sorted({str(r["falls_back_to"]) for r in records if r.get("falls_back_to")})
    if backs:  # auto-seq under a detected shift ran a calibrator-free peer (or uniform)
        summary["falls_back_to"] = ",".join(backs)
    if add_baseline(summary, records, adaptive, int(config.baseline_n)) is not None:
        curve = fixed_curve(records, int(config.baseline_n), config.rule)
        summary["fixed_curve"] = curve
        match = next(
            (
                c
                for c in curve
                if adaptive["accuracy"] is not None and c["accuracy"] >= adaptive["accuracy"]
            ),
            None,
        )
        summary["fixed_n_matching_adaptive_accuracy"] = match
    return summary
