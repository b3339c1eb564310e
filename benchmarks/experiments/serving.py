"""``dprm serve`` under load, written to ``docs/results/serving.md``.

Runs the load test ``benchmarks/perf/bench_serve.py`` (a batched and an unbatched server on
the shipped arith PRM, N concurrent loopback clients, a fixed number of requests; the ratio
measured within the one run), stores its rows in ``docs/results/serving/runs.csv`` and the
machine, commit and date in ``source.json``, and renders the page from those files.

Usage:
    nice -n 15 python benchmarks/experiments/serving.py     # run the load test (~3 min), render
    python benchmarks/experiments/serving.py --render        # re-render from the stored rows
    python benchmarks/experiments/serving.py --smoke --out /tmp/serving  # a few requests
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
from pathlib import Path

import results_page as rp

PAGE = "serving"
COMMAND = "nice -n 15 python benchmarks/experiments/serving.py"
BENCH = rp.ROOT / "benchmarks" / "perf" / "bench_serve.py"


def run(out: Path, smoke: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(rp.ROOT / "src"), env.get("PYTHONPATH")]))
    args = ["--csv", str(out / "runs.csv"), *(["--smoke"] if smoke else [])]
    done = subprocess.run([sys.executable, str(BENCH), *args], env=env, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_serve.py exited {done.returncode}")


def _why(speedup: float) -> str:
    """What the measured ratio says, in words that match its sign."""
    shared = (
        "On a CPU the PRM forward costs about the same per token batched or not, while a batch "
        "shares the per-request work (one calibrator call per batch, one hand-off to the model "
        "thread) and pays for padding (length-sorted batches, right-padded to the longest "
        "request; the padded tokens are computed too)."
    )
    if speedup >= 1.05:
        return shared + " Here the shared work outweighs the padding."
    if speedup <= 0.95:
        return (
            shared + " Here batching is slower, so its padding costs more than the work it "
            "shares saves (the two are not measured apart): on this PRM and these request "
            "lengths `--max-batch 1` serves more requests a second on a CPU. A GPU, where a "
            "batch's forward costs little more than one request's, is not measured here."
        )
    return shared + " Here the two balance (within 5 %)."


def render() -> Path:
    with open(rp.folder(PAGE) / "runs.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    batched, single = rows[0], rows[1]
    speedup = float(batched["throughput_rps"]) / float(single["throughput_rps"])
    table = rp.table(
        ["server", "--max-batch", "answered", "throughput (req/s)", "p50 (ms)", "p99 (ms)",
         "mean batch", "batch sizes (size:count)", "RSS after warm-up / at end (MiB)"],
        [
            ["batched" if int(r["max_batch"]) > 1 else "one at a time", r["max_batch"],
             f"{r['answered']} / {r['requests']}", f"{float(r['throughput_rps']):.1f}",
             f"{float(r['p50_ms']):.0f}", f"{float(r['p99_ms']):.0f}",
             f"{float(r['mean_batch']):.2f}", r["batch_sizes"],
             f"{float(r['rss_start_mib']):.0f} / {float(r['rss_end_mib']):.0f}"]
            for r in rows
        ],
        "lrrrrrrlr",
    )  # fmt: skip
    body = (
        f"{batched['clients']} concurrent clients (threads of `dprm.client.Client`) send "
        f"{batched['requests']} `/v1/score` requests (an arith question with two solutions of "
        "1-8 steps) to each of two `dprm serve` processes on the shipped arith PRM and a small "
        "`mono` calibrator fitted by the script: one with micro-batching (`--max-batch "
        f"{batched['max_batch']} --batch-wait-ms {float(batched['batch_wait_ms']):g}`), one "
        "scoring one request per PRM forward (`--max-batch 1`). Both run at once, on loopback "
        "only, with one torch thread each, and get the requests in alternating blocks, so both "
        "see the same machine load; a server's throughput is its requests over the time spent "
        "on its blocks. Latency is a request's round trip as the client sees it; batch sizes "
        "are the server's `/v1/info` counters over the timed requests; RSS is the server "
        "process's resident memory after an untimed warm-up and after the timed requests.\n\n"
        f"{table}\n"
        f"**Speed-up of batching: {speedup:.2f}x** the throughput of one request at a time, "
        "both measured in this one run. Absolute numbers depend on the machine and its load; "
        f"the ratio is the result. {_why(speedup)}\n"
    )
    return rp.write_page(
        PAGE,
        "Serving: `dprm serve` under load",
        "python benchmarks/experiments/serving.py --render",
        body,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render", action="store_true", help="re-render from the stored rows")
    parser.add_argument("--smoke", action="store_true", help="a few requests (needs --out)")
    parser.add_argument("--out", type=Path, default=None, help="where the rows go")
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
