"""Benchmark one-pass PRM extraction against per-prefix forward passes on the tiny model.

For N trajectories of T_i steps, the one-pass path runs one forward per trajectory and reads
the score and hidden state at every step separator; the per-prefix path runs one forward per
prefix (sum_i T_i inputs). Both use the same length-sorted, padded batching (and, as a second
baseline, the reference's one-sequence-at-a-time loop). The printed target is a speed-up of at
least 0.7 x the mean number of prefixes per trajectory. The script also checks that both paths
give the same numbers (to 1e-4).

Usage: python benchmarks/perf/bench_embed_onepass.py [--trajectories 48] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _steps(rng: random.Random, n_steps: int) -> list[str]:
    words = [
        "we",
        "add",
        "the",
        "terms",
        "then",
        "divide",
        "both",
        "sides",
        "by",
        "two",
        "so",
        "x",
        "equals",
        "the",
        "value",
    ]
    steps = []
    for k in range(1, n_steps + 1):
        body = " ".join(rng.choice(words) for _ in range(rng.randint(12, 24)))
        steps.append(f"## Step {k}: {body}. So $x = {rng.randint(1, 99)}$.")
    return steps


def _time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trajectories", type=int, default=48, help="number of trajectories N")
    parser.add_argument("--min-steps", type=int, default=6)
    parser.add_argument("--max-steps", type=int, default=14)
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (best is reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()

    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    from dprm.llm.prm import load_prm
    from llm import tiny_models  # the same tiny models the tests build

    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    from dprm.llm.questions import packaged_path, read_records

    # MATH-500 as packaged with dprm (the file this script once read from a shared folder)
    rows = read_records(packaged_path("math500"))
    questions = [row["problem"] for row in rows][: args.trajectories]
    with tempfile.TemporaryDirectory() as tmp:
        tokenizers = tiny_models.build_tokenizers(Path(tmp))
        prm_dir = tiny_models.build_qwen_prm(
            tokenizers["qwen"], Path(tmp) / "tiny-prm", max_positions=4096
        )
        prm = load_prm(str(prm_dir), device="cpu", dtype="float32")
        items = [(q, _steps(rng, rng.randint(args.min_steps, args.max_steps))) for q in questions]
        one_pass = [prm.prepare(q, steps) for q, steps in items]
        prefixes = [
            prm.prepare(q, steps[:t]) for q, steps in items for t in range(1, len(steps) + 1)
        ]
        mean_prefixes = len(prefixes) / len(items)
        if any(e.truncated for e in one_pass + prefixes):
            raise SystemExit(
                "inputs exceed the tiny model's position limit; use fewer/shorter steps"
            )

        t_one = _time(lambda: prm.forward(one_pass), args.repeats)
        t_prefix = _time(lambda: prm.forward(prefixes), args.repeats)
        t_loop = _time(lambda: [prm.forward([e]) for e in prefixes], 1)

        outs, pref = prm.forward(one_pass), iter(prm.forward(prefixes))
        worst = 0.0
        for out in outs:
            for t in range(len(out.scores)):
                worst = max(worst, float(np.abs(next(pref).hidden[-1] - out.hidden[t]).max()))

    tokens_one = sum(len(e.input_ids) for e in one_pass)
    tokens_prefix = sum(len(e.input_ids) for e in prefixes)
    target = 0.7 * mean_prefixes
    speedup = t_prefix / t_one
    print(
        f"trajectories: {len(items)}, prefixes: {len(prefixes)}, mean prefixes/trajectory: {mean_prefixes:.2f}"
    )
    print(
        f"tokens: one-pass {tokens_one}, per-prefix {tokens_prefix} ({tokens_prefix / tokens_one:.2f}x)"
    )
    print(f"one-pass extraction:            {t_one * 1e3:9.1f} ms")
    print(f"per-prefix forwards (batched):  {t_prefix * 1e3:9.1f} ms")
    print(f"per-prefix forwards (1 by 1):   {t_loop * 1e3:9.1f} ms  (the reference's loop)")
    print(
        f"speed-up vs batched per-prefix: {speedup:.2f}x  (token-count bound {tokens_prefix / tokens_one:.2f}x)"
    )
    print(f"speed-up vs 1-by-1 per-prefix:  {t_loop / t_one:.2f}x")
    print(f"target (0.7 x mean prefixes):   {target:.2f}x")
    for name, value in (("batched per-prefix", speedup), ("1-by-1 per-prefix", t_loop / t_one)):
        print(f"  vs {name}: {'met' if value >= target else 'NOT met'}")
    print(f"max |hidden one-pass - per-prefix|: {worst:.2e}")
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
