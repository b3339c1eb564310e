"""Retrain the arithmetic world's models and check they match the shipped ones within noise.

    python benchmarks/experiments/world_training.py [--work DIR] [--questions 100 --samples 64]

Runs ``tools/train_world.py all`` (the shipped seed and arguments, read from the shipped
PRM's provenance) into ``--work``, then ``tools/world_stats.py``'s measurement on the shipped
models and on the retrained ones, with the same questions, samples and sampling seed, and prints
both side by side: pass@1 per split with its standard error (over questions), and the PRM's
within-question AUROC. A retrained pass@1 more than 3 standard errors from the shipped one
fails (exit 1). This is a
benchmark, not a test: it trains for minutes. ``--smoke`` trains for a handful of steps on a few
questions and measures 4 questions x 4 samples: it checks that the driver runs, and does not
judge the comparison (a model trained for 5 steps is far from the shipped one).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from world_metrics import summarise  # noqa: E402
from world_stats import DEFAULT_MODELS, collect  # noqa: E402

#: tools/train_world.py arguments of ``--smoke``: a handful of steps, a few PRM questions
SMOKE_TRAINING = ["--steps", "5", "--policy-step", "3", "--body-steps", "3",
                  "--prm-questions", "4", "--prm-samples", "2", "--prm-rollouts", "2",
                  "--prm-epochs", "1", "--prm-policy", "checkpoint"]  # fmt: skip


def measure(models: Path, questions: int, samples: int, seed: int) -> dict:
    """pass@1 per split with per-question solve rates, and the PRM's numbers."""
    data = collect(models, questions, samples, seed, prm=True, workers=2)
    summary = summarise(data, samples, None, seed=seed)
    for split, block in data.items():
        summary["splits"][split]["solve_rates"] = [
            sum(r["correct"]) / len(r["correct"]) for r in block["records"]
        ]
    return summary["splits"]


def shipped_arguments() -> list[str]:
    """The shipped PRM's training command's arguments, less ``--out`` / ``--work``."""
    import json
    import shlex

    record = json.loads((DEFAULT_MODELS / "prm" / "provenance.json").read_text())
    words = shlex.split(record["command"])[3:]
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("--out", "--work"):
            skip = True
        else:
            kept.append(word)
    return kept


def standard_error(report: dict, split: str) -> float:
    """Standard error of pass@1 over questions (per-question rates are the unit)."""
    rates = report[split]["solve_rates"]
    mean = sum(rates) / len(rates)
    var = sum((r - mean) ** 2 for r in rates) / max(1, len(rates) - 1)
    return math.sqrt(var / len(rates))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, default=Path("runs/world-training"))
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--skip-training", action="store_true", help="reuse --work's models")
    parser.add_argument("--smoke", action="store_true", help="5 steps, 4 questions x 4 samples")
    args = parser.parse_args(argv)
    if args.smoke:
        args.questions, args.samples = 4, 4
    import torch

    torch.set_num_threads(1)
    if not args.skip_training:
        started = time.time()
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "tools" / "train_world.py"),
                "all",
                "--out",
                str(args.work),
                "--work",
                str(args.work / "work"),
                *(SMOKE_TRAINING if args.smoke else shipped_arguments()),
            ],
            check=True,
        )
        print(f"retrained in {time.time() - started:.0f} s wall")
    shipped = measure(DEFAULT_MODELS, args.questions, args.samples, 0)
    retrained = measure(args.work, args.questions, args.samples, 0)
    ok = True
    print(f"{'':18}{'shipped':>18}{'retrained':>18}")
    for split in ("id", "ood"):
        a, b = shipped[split]["pass@1"], retrained[split]["pass@1"]
        se = math.hypot(standard_error(shipped, split), standard_error(retrained, split))
        within = abs(a - b) <= 3 * se
        ok &= within
        print(
            f"pass@1 {split:<11}{a:>18.3f}{b:>18.3f}   diff {b - a:+.3f} "
            f"({'within' if within else 'OUTSIDE'} 3 s.e. = {3 * se:.3f})"
        )
    for split in ("id", "ood"):
        a = shipped[split].get("within_question_auroc", float("nan"))
        b = retrained[split].get("within_question_auroc", float("nan"))
        print(f"{'PRM AUROC ' + split:<18}{a:>18.3f}{b:>18.3f}")
    if args.smoke:
        print("smoke run: the comparison is not judged")
        return 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
