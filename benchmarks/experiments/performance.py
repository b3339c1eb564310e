"""Timings of dprm's hot paths, written to ``docs/results/performance.md``.

Runs a fixed set of the timing scripts in ``benchmarks/perf/`` (each prints its measurements
and the ratios it is judged by), stores each script's output in
``docs/results/performance/<script>.txt`` and the machine, commit and date in ``source.json``,
and renders the page from those files. The ratios are measured within one run (interleaved or
side by side), so they carry from machine to machine better than the absolute times.

Usage:
    python benchmarks/experiments/performance.py            # run the timings (minutes), render
    python benchmarks/experiments/performance.py --render   # re-render from the stored outputs
    python benchmarks/experiments/performance.py --smoke --out /tmp/perf  # one script, smallest
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import results_page as rp

PERF = rp.ROOT / "benchmarks" / "perf"
PAGE = "performance"
#: script -> (what it measures, arguments of the page's run, arguments of the smallest run)
RUNS = {
    "bench_ias.py": (
        "The exact IAS C sweep against a plain-Python Monte Carlo loop (10 C x 3 methods x 500 "
        "questions x pools of 64); target: at least 100x, and the exact accuracies within the "
        "Monte Carlo's standard errors.",
        [],
        ["--smoke"],
    ),
    "bench_cli_startup.py": (
        "Start-up of the command line against a bare `python -c 'import argparse'`; target: "
        "`dprm --help` and `dprm questions --help` within 0.5 s.",
        ["--repeats", "5"],
        ["--repeats", "1"],
    ),
    "bench_ot.py": (
        "One `ot` training step (D = 3584): dprm's forward-mode slope against CondOT's double "
        "backward, whole step and map heads alone.",
        ["--skip-fit", "--threads", "2"],
        ["--skip-fit", "--threads", "1", "--dim", "32", "--steps", "2"],
    ),
    "bench_embed_onepass.py": (
        "One-pass PRM extraction (one forward per trajectory) against one forward per prefix, "
        "on a tiny model; target: at least 0.7x the mean number of prefixes per trajectory.",
        [],
        ["--trajectories", "2", "--repeats", "1"],
    ),
    "bench_synth.py": (
        "`dprm synth` at paper size (D = 3584) for one instruct and one R1 world: wall time and "
        "peak memory against one float16 copy of the hidden states.",
        ["--presets", "llama-3.1-8b__qwen-prm,r1-qwen-7b__qwen-prm"],
        ["--smoke"],
    ),
}
COMMAND = "python benchmarks/experiments/performance.py"


def run(out: Path, smoke: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    src = str(rp.ROOT / "src")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    # the smoke run checks this driver only: every timing script has a smoke test of its own
    for script, (_, full, small) in list(RUNS.items())[:1] if smoke else RUNS.items():
        args = small if smoke else full
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, str(PERF / script), *args], env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            sys.exit(f"{script} exited {done.returncode}:\n{done.stderr[-2000:]}")
        text = f"$ python benchmarks/perf/{script} {' '.join(args)}".rstrip() + "\n" + done.stdout
        (out / f"{script.removesuffix('.py')}.txt").write_text(text)
        print(f"{script}: {time.perf_counter() - started:.0f} s", flush=True)


def render() -> Path:
    data = rp.folder(PAGE)
    parts = [
        "Each section is one timing script of `benchmarks/perf/` as it printed on the machine "
        "named above (`make bench` runs every timing script at its full size). Timings vary "
        "from run to run; compare the ratios, which each script measures within one run.\n"
    ]
    for script, (what, _, _) in RUNS.items():
        text = (data / f"{script.removesuffix('.py')}.txt").read_text().rstrip()
        parts.append(f"## `{script}`\n\n{what}\n\n```text\n{text}\n```\n")
    return rp.write_page(PAGE, "Performance", f"{COMMAND} --render", "\n".join(parts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render", action="store_true", help="re-render from stored outputs")
    parser.add_argument("--smoke", action="store_true", help="smallest sizes (needs --out)")
    parser.add_argument("--out", type=Path, default=None, help="where the outputs go")
    args = parser.parse_args()
    if args.render:
        print(render())
        return 0
    if args.smoke and args.out is None:
        parser.error("--smoke writes to --out, never to docs/results")
    run(args.out or rp.folder(PAGE), args.smoke)
    if args.out is None:
        rp.record_source(PAGE, COMMAND)
        print(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
