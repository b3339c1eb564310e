"""Measure the arithmetic world's generator and PRM and write its results page.

    python tools/world_stats.py                  # shipped models, all packaged ID/OOD questions
    python tools/world_stats.py --models DIR --questions 50 --samples 16 --no-page

For each split (``arith-id``, ``arith-ood``) the generator draws ``--samples`` solutions per
question at temperature 1 (the recipe's) with the KV-cached sampler of
``tools/world_sampler.py``, which runs the generator's own transformers modules; a subset is
drawn again through dprm's transformers generator (``dprm.llm.generate``, the code path of
``dprm generate``) and the two pass@1 are compared. Every solution is scored by dprm's
``QwenPRM`` (``dprm.llm.prm``, the code path of ``dprm embed``). Computed (world_metrics.py):
pass@k, majority and PRM best-of-n curves to 64 with paired bootstrap intervals over
questions, within-question and pooled AUROC of the PRM's last-step score for a correct
answer, raw ECE / Brier, the first-error taxonomy, the spread of per-question solve rates, and
the targets the world is built to meet. ``--page`` (default) writes CSVs and a reliability
diagram under ``docs/results/arith-world/`` and the page ``docs/results/arith-world.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tools"))

from dprm.llm.questions import extract_boxed  # noqa: E402
from dprm.llm.tasks.arith import check_steps  # noqa: E402
from dprm.llm.tasks.arith_sets import set_rows  # noqa: E402
from world_metrics import error_kind  # noqa: E402

DEFAULT_MODELS = ROOT / "src" / "dprm" / "llm" / "worlds" / "arith"
SPLITS = ("id", "ood")


def _score_job(job: tuple[str, list[tuple[str, list[list[str]]]]]) -> list[list[list[float]]]:
    import torch

    from dprm.llm.prm import load_prm

    prm_dir, items = job
    torch.set_num_threads(1)
    prm = load_prm(prm_dir, device="cpu")
    return [[[float(s) for s in out.scores] for out in prm.score_steps(q, sl)] for q, sl in items]


def score_all(prm_dir: Path, items, workers: int, job: int = 25):
    """dprm's QwenPRM step scores of every (question, [steps, ...]) item, in worker processes."""
    import multiprocessing

    jobs = [(str(prm_dir), items[i : i + job]) for i in range(0, len(items), job)]
    if workers <= 1:
        results = [_score_job(j) for j in jobs]
    else:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            results = pool.map(_score_job, jobs, chunksize=1)
    return [scores for chunk in results for scores in chunk]


def dprm_generator_check(models: Path, rows: list[dict], n: int, seed: int) -> list[float]:
    """Per-question solve rates of ``n`` draws through dprm's transformers generator."""
    from dprm.llm.generate import load_generator
    from dprm.llm.prompts import build_prompt

    generator = load_generator("transformers", str(models / "generator"), device="cpu")
    prompts = [build_prompt(r["question"], str(models / "generator")) for r in rows]
    outs = generator.generate(
        prompts, n, temperature=1.0, max_new_tokens=160, seeds=[seed + i for i in range(len(rows))]
    )
    rates = []
    for row, completions in zip(rows, outs, strict=True):
        right = [(extract_boxed(c.text) or "").strip() == row["answer"] for c in completions]
        rates.append(sum(right) / len(right))
    return rates


def collect(
    models: Path,
    questions: int | None,
    samples: int,
    seed: int,
    prm: bool,
    workers: int,
    split_rows: dict[str, list[dict]] | None = None,
) -> dict:
    """Draw, grade and score: per split, one record per question (the packaged test splits,
    or ``split_rows``: question rows by split name)."""
    from dprm.llm.prompts import build_prompt
    from world_prm import parallel_sample

    data: dict = {}
    if split_rows is None:
        split_rows = {split: set_rows(split) for split in SPLITS}
    for split, all_rows in split_rows.items():
        rows = all_rows[:questions] if questions else all_rows
        t0 = time.time()
        prompts = [build_prompt(r["question"], "qwen", template="qwen") for r in rows]
        texts = parallel_sample(models / "generator", prompts, samples, seed, workers, job=25)
        sample_s = time.time() - t0
        records = []
        for row, outs in zip(rows, texts, strict=True):
            ops = tuple((op, x) for op, x in row["ops"])
            steps_list = [t.split("\n\n") for t in outs]
            answers = [(extract_boxed(t) or "").strip() or None for t in outs]
            flags = [check_steps(row["start"], ops, s) for s in steps_list]
            records.append(
                {
                    "question_id": row["question_id"],
                    "level": row["level"],
                    "gold": row["answer"],
                    "answers": answers,
                    "correct": [a == row["answer"] for a in answers],
                    "genuine": [all(f) for f in flags],
                    "step_flags": flags,
                    "kinds": [error_kind(row, s) for s in steps_list],
                    "steps": steps_list,
                    "question": row["question"],
                }
            )
        t1 = time.time()
        if prm:
            scores = score_all(
                models / "prm", [(r["question"], r["steps"]) for r in records], workers
            )
            for record, s in zip(records, scores, strict=True):
                record["scores"] = s
        data[split] = {
            "records": records,
            "sample_s": round(sample_s, 1),
            "score_s": round(time.time() - t1, 1),
        }
        print(f"{split}: {len(rows)} questions x {samples} ({sample_s:.0f}s sampling)", flush=True)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, default=DEFAULT_MODELS)
    parser.add_argument("--questions", type=int, default=None, help="per split (default: all)")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--check-questions", type=int, default=24, help="dprm generator check")
    parser.add_argument("--check-samples", type=int, default=8)
    parser.add_argument("--no-prm", action="store_true")
    parser.add_argument("--no-page", action="store_true", help="print the summary only")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    import torch

    from world_metrics import summarise

    torch.set_num_threads(1)
    started = time.time()
    data = collect(
        args.models, args.questions, args.samples, args.seed, not args.no_prm, args.workers
    )
    check = None
    if args.check_questions:
        rows = set_rows("id")[: args.check_questions]
        t0 = time.time()
        rates = dprm_generator_check(args.models, rows, args.check_samples, args.seed)
        check = {
            "questions": len(rows),
            "samples": args.check_samples,
            "dprm_rates": rates,
            "seconds": round(time.time() - t0, 1),
        }
    summary = summarise(data, args.samples, check, seed=args.seed)
    summary["wall_s"] = round(time.time() - started, 1)
    print(json.dumps(summary["targets"], indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if not args.no_page:
        from world_page import write_page

        command = "python tools/world_stats.py" + (
            "" if argv is None and len(sys.argv) == 1 else " " + " ".join(sys.argv[1:])
        )
        write_page(summary, data, args.out, command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
