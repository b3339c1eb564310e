"""``dprm solve --mode beam``: run the adaptive beam search and its fixed-width baseline.

Questions go in parts of ``batch_questions``; inside a part every search (adaptive and, with
``baseline_n`` > 0, fixed) advances in lockstep so one generator call serves all beams that
need the same number of samples. A finished part is appended to ``OUT/beamSFX.jsonl``; the
summary covers every finished question of every shard.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from dprm.live.beam import Scorer, Search, absorb, generate_steps, plan_step
from dprm.live.calibrated_prm import CalibratedPRM
from dprm.live.run import SolveConfig
from dprm.live.run_frame import grade_texts, open_run, solving
from dprm.live.runlog import ResultLog, read_results
from dprm.live.summary import add_baseline, grading_totals, side_totals, write_summary


def new_searches(row: dict, config: SolveConfig) -> list[Search]:
    """The adaptive search of a question, plus the fixed-width one when a baseline is asked."""
    adaptive = config.adaptive
    common = dict(
        question_id=row["question_id"],
        question=row["question"],
        m_max=config.beam_width,
        freq=config.freq,
    )
    out = [
        Search(
            n=config.n_max,
            adaptive_k="k" in adaptive,
            adaptive_m="m" in adaptive,
            tag="adaptive",
            **common,
        )
    ]
    if config.baseline_n:
        out.append(
            Search(
                n=int(config.baseline_n),
                adaptive_k=False,
                adaptive_m=False,
                tag="baseline",
                **common,
            )
        )
    return out


def run_searches(
    searches: list[Search], scorer: Scorer, generator: Any, config: SolveConfig
) -> None:
    """Advance all searches step by step until each is finished."""
    from dprm.llm.generate import derive_seed
    from dprm.llm.prompts import build_prompt

    while True:
        for search in searches:
            if not search.finished:
                plan_step(search, scorer, float(config.C), config.max_steps)
        active = [s for s in searches if not s.finished]
        if not active:
            return
        groups: dict[int, list[tuple[int, int]]] = defaultdict(list)  # n -> [(search, beam)]
        for a, search in enumerate(active):
            for b, beam in enumerate(search.beams):
                if not beam.done:
                    groups[search.per_beam].append((a, b))
        results: dict[tuple[int, int], list] = {}
        for n, keys in groups.items():
            prompts, seeds = [], []
            for a, b in keys:
                search, beam = active[a], active[a].beams[b]
                prefix = None if search.step == 0 else beam.steps
                prompts.append(
                    build_prompt(search.question, generator.model_name, prefix_steps=prefix)
                )
                seeds.append(
                    derive_seed(
                        config.seed, "solve-beam", search.tag, search.question_id, search.step, b
                    )
                )
            outs = generate_steps(
                generator,
                prompts,
                n,
                temperature=config.temperature,
                top_p=config.top_p,
                max_new_tokens=config.max_new_tokens,
                seeds=seeds,
            )
            for key, out in zip(keys, outs, strict=True):
                results[key] = list(out)[:n]
        for a, search in enumerate(active):
            outs = [results[(a, b)] for b, beam in enumerate(search.beams) if not beam.done]
            absorb(search, outs, config.max_beam_tokens)


def final_choice(search: Search, scorer: Scorer) -> dict[str, Any]:
    """The best-ranked beam of a finished search, with the search's compute."""
    from dprm.llm.prompts import join_steps

    values = scorer(search.question_id, search.question, search.beams)
    best = int(np.argmax(values[:, 2]))
    beam = search.beams[best]
    return {
        "samples": int(sum(e.get("samples", 0) for e in search.log)),
        "tokens": int(sum(e.get("tokens", 0) for e in search.log)),
        "n": search.n,
        "steps": search.log,
        "n_final_beams": len(search.beams),
        "chosen": {
            "text": join_steps(beam.steps),
            "n_steps": len(beam.steps),
            "finish": beam.finish,
            "prm_score": float(values[best, 0]),
            "lower": float(values[best, 1]),
            "rank_score": float(values[best, 2]),
            "truncated": bool(values[best, 3]),
        },
        "correct": None,
    }


def run_beam(
    config: SolveConfig,
    cprm: CalibratedPRM,
    generator: Any,
    out: str | Path,
    *,
    progress: bool = True,
    pool: Any = None,
) -> dict[str, Any]:
    """Beam search over this shard's questions; resumable; returns the summary."""
    from dprm.llm.shard import chunked

    out = Path(out)
    questions, suffix, _ = open_run(out, config, cprm, generator)
    log = ResultLog(out / f"beam{suffix}.jsonl")
    rows = questions.to_dict("records")
    pending = [r for r in rows if r["question_id"] not in log]
    scorer = Scorer(cprm, config.lower_level, config.rank_by)
    cprm.check_levels([config.lower_level, 0.5], "--lower-level / the median")
    session = solving(len(rows), len(pending), "solve beam", config, progress=progress, pool=pool)
    with session as (bar, pool):
        for part in chunked(pending, config.batch_questions):
            searches = [new_searches(r, config) for r in part]
            run_searches([s for group in searches for s in group], scorer, generator, config)
            picks = [[final_choice(s, scorer) for s in group] for group in searches]
            graded = [
                (i, j)
                for i, r in enumerate(part)
                if r["answer"].strip()
                for j in range(len(picks[i]))
            ]
            verdicts = grade_texts(
                pool,
                [part[i]["answer"] for i, _ in graded],
                [picks[i][j]["chosen"]["text"] for i, j in graded],
            )
            for (i, j), (ok, failed) in zip(graded, verdicts, strict=True):
                picks[i][j]["correct"], picks[i][j]["grade_failed"] = ok, failed
            for row, pair in zip(part, picks, strict=True):
                adaptive = pair[0]
                log.append(
                    {
                        "question_id": row["question_id"],
                        "mode": "beam",
                        "gold": row["answer"] or None,
                        "C": float(config.C),
                        "budget": adaptive["samples"],
                        **adaptive,
                        "baseline": pair[1] if len(pair) > 1 else None,
                    }
                )
                bar.update(1)
            scorer.cache.clear()
    return write_summary(out, summarize_beam(read_results(out, "beam"), config))


def summarize_beam(records: list[dict], config: SolveConfig) -> dict[str, Any]:
    """Accuracy vs compute of the adaptive search and the fixed-width baseline."""
    adaptive = side_totals(records, None)
    summary: dict[str, Any] = {
        "mode": "beam",
        "C": config.C,
        "n_max": config.n_max,
        "beam_width": config.beam_width,
        "adaptive_rules": config.adaptive,
        "n_questions": len(records),
        "adaptive": adaptive,
        "baseline": None,
        # the final picks graded (adaptive and baseline), and those the grader failed on
        "grading": grading_totals(
            [*records, *(r["baseline"] for r in records if r.get("baseline"))]
        ),
    }
    add_baseline(summary, records, adaptive, int(config.baseline_n))
    return summary
