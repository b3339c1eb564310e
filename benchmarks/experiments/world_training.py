"""Retrain the arithmetic world's models and check they match the shipped ones within noise.

    python benchmarks/experiments/world_training.py [--work DIR] [--questions 100 --samples 64]

Runs ``tools/train_world.py all`` (the shipped seed and defaults) into ``--work``, then
``tools/world_stats.py`` on the shipped models and on the retrained ones, with the same
questions, samples and sampling seed, and prints both side by side: pass@1 per split with its
standard error (over questions), and the PRM's Brier score on the exact step labels. A
retrained pass@1 more than 3 standard errors from the shipped one fails (exit 1). This is a
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

from world_stats import DEFAULT_MODELS, measure  # noqa: E402

#: tools/train_world.py arguments of ``--smoke``: a handful of steps, a few PRM questions
SMOKE_TRAINING = ["--steps", "5", "--prm-questions", "4", "--prm-samples", "2", "--prm-epochs", "1"]


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
                *(SMOKE_TRAINING if args.smoke else []),
            ],
            check=True,
        )
        print(f"retrained in {time.time() - started:.0f} s wall")
    shipped = measure(DEFAULT_MODELS, args.questions, args.samples, 0, prm=True)
    retrained = measure(args.work, args.questions, args.samples, 0, prm=True)
    ok = True
    print(f"{'':18}{'shipped':>18}{'retrained':>18}")
    for split in ("id", "ood"):
        a, b = shipped[split]["pass@k"][1], retrained[split]["pass@k"][1]
        se = math.hypot(standard_error(shipped, split), standard_error(retrained, split))
        within = abs(a - b) <= 3 * se
        ok &= within
        print(
            f"pass@1 {split:<11}{a:>18.3f}{b:>18.3f}   diff {b - a:+.3f} "
            f"({'within' if within else 'OUTSIDE'} 3 s.e. = {3 * se:.3f})"
        )
    print(f"{'PRM Brier':<18}{shipped['prm']['brier']:>18.3f}{retrained['prm']['brier']:>18.3f}")
    if args.smoke:
        print("smoke run: the comparison is not judged")
        return 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
