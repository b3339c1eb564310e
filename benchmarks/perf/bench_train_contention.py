"""``dprm train`` under CPU contention: two fits side by side vs one on a quiet machine.

With default settings, ``dprm train`` on a loaded machine (two
``dprm train`` in parallel on 2 cores) is within 1.5x of its time on a quiet machine. Prints
the wall time of one fit alone and the mean of two fits run together, for the default
``--threads`` and for torch's own default (one thread per core, ``--threads <cores>``), and
the ratios. Usage::

    python benchmarks/perf/bench_train_contention.py [--steps 300] [--repeats 3] [--size demo]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def fit_command(data: Path, out: Path, steps: int, threads: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "dprm.cli", "train", "--method", "ot", "--data", str(data)]
    cmd += ["--out", str(out), "--overwrite", "--quiet", "--set", f"max_steps={steps}"]
    return cmd + ([] if threads is None else ["--threads", str(threads)])


def run_together(cmds: list[list[str]]) -> list[float]:
    """Start every command at once; the wall time of each."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    start = time.perf_counter()
    procs = [subprocess.Popen(c, env=env) for c in cmds]
    ends = []
    for proc in procs:
        if proc.wait() != 0:
            raise SystemExit(f"{' '.join(proc.args)} failed with exit code {proc.returncode}")
        ends.append(time.perf_counter() - start)
    return ends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements each (default 3)")
    parser.add_argument("--size", default="demo", help="synthetic world size (default demo)")
    parser.add_argument(
        "--no-torch-default",
        action="store_true",
        help="measure only dprm's default --threads (the torch-default rows take minutes)",
    )
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "dprm.cli", "synth", "--preset", "demo", "--size", args.size]
            + ["--out", str(root / "world"), "--quiet"],
            check=True,
        )
        data = root / "world" / "id" / "calib"
        print(f"{cores} usable cores, ot, {args.steps} steps, world size {args.size}")
        print(f"{'threads':<22} {'quiet s':>8} {'2 parallel s':>13} {'ratio':>6}")
        settings = [("default", None), (f"{cores} (torch default)", cores)]
        for label, threads in settings[:1] if args.no_torch_default else settings:
            quiet, loaded = [], []
            for r in range(args.repeats):  # interleaved, so slow drifts hit both alike
                quiet += run_together([fit_command(data, root / f"q{r}", args.steps, threads)])
                loaded.append(
                    statistics.mean(
                        run_together(
                            [
                                fit_command(data, root / f"p{r}{i}", args.steps, threads)
                                for i in "ab"
                            ]
                        )
                    )
                )
            q, p = statistics.median(quiet), statistics.median(loaded)
            print(f"{label:<22} {q:8.2f} {p:13.2f} {p / q:6.2f}")


if __name__ == "__main__":
    main()
