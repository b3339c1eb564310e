"""Measure the arithmetic world's generator and PRM: solve-rate spread, pass@k, wrong answers.

    python tools/world_stats.py                         # the shipped models, 64 samples/question
    python tools/world_stats.py --models DIR --json out.json

For each split (``arith-id``, ``arith-ood``; ``--questions`` of each) the generator samples
``--samples`` solutions per question at temperature 1.0 (the recipe's); each is graded by
the exact answer (the packaged answer is an integer; the boxed answer must equal it) and
checked step by step (:func:`dprm.llm.tasks.arith.check_steps`). Reported:

- pass@1 and pass@k (the unbiased estimator of Chen et al. 2021) for k = 1, 4, 16, 64;
- the spread of per-question solve rates: share of questions never solved, always solved,
  and in between, and the deciles;
- wrong-answer clustering: among a question's wrong answers, the share taken by its most
  common wrong answer and the mean number of distinct wrong answers, against what as many
  uniform draws from the observed wrong values of all questions would give;
- the kind of the first wrong step (a result off by a power of ten: a dropped or spurious
  carry/borrow; other arithmetic slips; a wrong operand copied; a missing or extra step);
- the PRM (with ``--prm``): its step scores against the exact step labels (Brier, ECE over 10
  bins, mean score vs mean label, AUROC of the last step's score for a correct final answer).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tools"))

from dprm.llm.questions import extract_boxed  # noqa: E402
from dprm.llm.tasks.arith import check_steps, parse_step, step_values  # noqa: E402
from dprm.llm.tasks.arith_sets import set_rows  # noqa: E402

DEFAULT_MODELS = ROOT / "src" / "dprm" / "llm" / "worlds" / "arith"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``c`` correct of ``n`` samples."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def error_kind(row: dict, steps: list[str]) -> str:
    """What the first off-track step got wrong."""
    ops = tuple((op, x) for op, x in row["ops"])
    flags = check_steps(row["start"], ops, steps)
    if all(flags):
        return "none"
    first = flags.index(False)
    values = [row["start"], *step_values(row["start"], ops)]
    if first >= len(ops):
        return "final answer" if first == len(ops) else "extra step"
    parsed = parse_step(steps[first])
    if parsed is None:
        return "missing or unparsable step"
    a, op, x, result = parsed
    if (a, op, x) != (values[first], *ops[first]):
        return "wrong operand or operation"
    true = values[first + 1]
    diff = abs(result - true)
    if diff > 0 and math.log10(diff).is_integer():
        return "off by a power of ten (carry/borrow)"
    return "other arithmetic slip"


def measure(models: Path, questions: int, samples: int, seed: int, prm: bool) -> dict:
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from train_world import sample_solutions

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(models / "generator")
    model = Qwen2ForCausalLM.from_pretrained(models / "generator", dtype=torch.float32).eval()
    report: dict = {"samples_per_question": samples, "questions_per_split": questions}
    scored: list[tuple[list[str], dict, list[str]]] = []
    for split in ("id", "ood"):
        rows = set_rows(split)[:questions]
        t0 = time.time()
        texts = sample_solutions(model, tok, [r["question"] for r in rows], samples, seed)
        correct_counts, kinds, top_share, distinct, wrong_values = [], Counter(), [], [], []
        for row, outs in zip(rows, texts, strict=True):
            answers = [extract_boxed(t) for t in outs]
            right = [a is not None and a.strip() == row["answer"] for a in answers]
            correct_counts.append(sum(right))
            wrong = [a for a, r in zip(answers, right, strict=True) if not r]
            wrong_values.extend(wrong)
            if len(wrong) >= 2:
                counts = Counter(wrong)
                top_share.append(counts.most_common(1)[0][1] / len(wrong))
                distinct.append(len(counts))
            for t in outs:
                kinds[error_kind(row, t.split("\n\n"))] += 1
            scored.append((outs[:8], row, [row["question"]]))
        rates = [c / samples for c in correct_counts]
        ks = [k for k in (1, 4, 16, 64) if k <= samples]
        n_wrong = len(wrong_values)
        uniform_top = []
        # the same number of wrong answers per question, drawn uniformly from all wrong values
        pool = sorted(set(map(str, wrong_values)))
        for c in correct_counts:
            m = samples - c
            if m >= 2 and pool:
                # expected max share of m uniform draws over len(pool) values, by simulation
                import random

                rng = random.Random(seed)
                draws = [Counter(rng.choice(pool) for _ in range(m)).most_common(1)[0][1] / m]
                uniform_top.extend(draws)
        report[split] = {
            "questions": len(rows),
            "pass@k": {
                k: sum(pass_at_k(samples, c, k) for c in correct_counts) / len(rows) for k in ks
            },
            "never_solved": sum(c == 0 for c in correct_counts) / len(rows),
            "always_solved": sum(c == samples for c in correct_counts) / len(rows),
            "in_between": sum(0 < c < samples for c in correct_counts) / len(rows),
            "solve_rates": rates,
            "solve_rate_deciles": [
                sorted(rates)[min(len(rates) - 1, int(q * len(rates)))]
                for q in (0.1, 0.25, 0.5, 0.75, 0.9)
            ],
            "wrong_answers": n_wrong,
            "top_wrong_share": sum(top_share) / max(1, len(top_share)),
            "top_wrong_share_uniform": sum(uniform_top) / max(1, len(uniform_top)),
            "distinct_wrong_per_question": sum(distinct) / max(1, len(distinct)),
            "first_error_kinds": dict(kinds.most_common()),
            "sample_wall_s": round(time.time() - t0, 1),
        }
        print(split, json.dumps(report[split]), flush=True)
    if prm:
        report["prm"] = prm_calibration(models / "prm", scored)
        print("prm", json.dumps(report["prm"]), flush=True)
    return report


def prm_calibration(prm_dir: Path, scored) -> dict:
    """The PRM's step scores against the exact step labels (ID and OOD samples pooled)."""
    from dprm.llm.prm import load_prm

    prm = load_prm(str(prm_dir), device="cpu")
    scores, labels, last_scores, last_labels = [], [], [], []
    for outs, row, _ in scored:
        ops = tuple((op, x) for op, x in row["ops"])
        steps_list = [text.split("\n\n") for text in outs]
        for steps, result in zip(
            steps_list, prm.score_steps(row["question"], steps_list), strict=True
        ):
            flags = check_steps(row["start"], ops, steps)[: len(result.scores)]
            step_scores = [float(s) for s in result.scores]
            scores.extend(step_scores)
            labels.extend(float(f) for f in flags)
            last_scores.append(step_scores[-1])
            last_labels.append(float(flags[-1]))
    n = len(scores)
    brier = sum((s - y) ** 2 for s, y in zip(scores, labels, strict=True)) / n
    bins = [[] for _ in range(10)]
    for s, y in zip(scores, labels, strict=True):
        bins[min(9, int(s * 10))].append((s, y))
    ece = sum(
        len(b) / n * abs(sum(s for s, _ in b) / len(b) - sum(y for _, y in b) / len(b))
        for b in bins
        if b
    )
    pos = [s for s, y in zip(last_scores, last_labels, strict=True) if y == 1]
    neg = [s for s, y in zip(last_scores, last_labels, strict=True) if y == 0]
    auroc = (
        sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))
        if pos and neg
        else float("nan")
    )
    return {
        "steps": n,
        "brier": brier,
        "ece_10_bins": ece,
        "mean_score": sum(scores) / n,
        "mean_label": sum(labels) / n,
        "last_step_auroc": auroc,
        "share_scores_above_0.9_or_below_0.1": sum(s > 0.9 or s < 0.1 for s in scores) / n,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, default=DEFAULT_MODELS)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-prm", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    report = measure(args.models, args.questions, args.samples, args.seed, not args.no_prm)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
