"""Load test of ``dprm serve`` on the shipped arith PRM: batching against one request at a time.

Starts two ``dprm serve`` subprocesses on free loopback ports (127.0.0.1 only): one with
micro-batching (``--max-batch B``) and one without (``--max-batch 1``), on the same PRM,
calibrator and requests. N concurrent clients (threads of :class:`dprm.client.Client`) send a
fixed number of ``/v1/score`` requests to each, in alternating blocks (so that both see the
same machine load) (a question and its solutions, from the arith
world's ``id`` split); every request must be answered (exit 1 otherwise). Prints per run the
throughput, p50 / p99 latency, the batch sizes the server reached (its ``/v1/info``
counters), the server's resident memory after warm-up and at the end, and the speed-up of
batching (the throughput ratio, both measured in this one run). ``--csv PATH`` writes the
rows; ``benchmarks/experiments/serving.py`` runs this script and renders
``docs/results/serving.md`` from them.

The calibrator is a small ``mono`` fitted here on the PRM's own question states (seeded), so
the script needs nothing but the package.

Usage: nice -n 15 python benchmarks/perf/bench_serve.py [--clients 16] [--requests 192]
    [--max-batch 16] [--csv PATH] [--smoke]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fit_calibrator(prm_dir: Path, out: Path) -> Path:
    """A small mono calibrator on the PRM's question states (labels depend on the state)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests"))
    from dprm.llm.prm import load_prm
    from dprm.llm.tasks.arith_sets import set_rows
    from dprm.models.fit import fit
    from fixtures.calibration import labelled_states

    prm = load_prm(str(prm_dir), device="cpu", dtype="float32")
    questions = [r["question"] for r in set_rows("train")[:48]]
    scores, hidden = prm.question_state(questions)
    rng = np.random.default_rng(0)
    z = (hidden - hidden.mean(0)) / (hidden.std(0) + 1e-6) @ rng.normal(size=hidden.shape[1])
    data = labelled_states(scores, hidden, 2.0 * z / np.sqrt(hidden.shape[1]), 6, rng)
    overrides = {"batch_size": 64, "max_steps": 40, "eval_every": 20}
    return fit("mono", data, overrides=overrides, seed=0, progress=False).save(out)


def workload(count: int) -> list[tuple[str, list[list[str]]]]:
    """``count`` score requests: an arith question, its solution and the solution's first half
    (2 solutions, 2-8 steps each), cycling through the id split."""
    from dprm.llm.prompts import split_steps
    from dprm.llm.tasks.arith_sets import set_rows

    rows = set_rows("id")
    jobs = []
    for i in range(count):
        row = rows[i % len(rows)]
        steps = split_steps(row["solution"])
        jobs.append((row["question"], [steps, steps[: max(1, len(steps) // 2)]]))
    return jobs


class Server:
    """``dprm serve`` in a subprocess on a free loopback port."""

    def __init__(self, prm_dir: Path, calibrator: Path, max_batch: int, wait_ms: float):
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")])
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dprm.cli", "serve", "--prm", str(prm_dir),
             "--calibrator", str(calibrator), "--host", "127.0.0.1", "--port", "0",
             "--prm-device", "cpu", "--threads", "1", "--log-level", "warning",
             "--max-batch", str(max_batch), "--batch-wait-ms", str(wait_ms)],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
        )  # fmt: skip
        line = ""
        while "listening on" not in line:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                sys.exit(f"dprm serve exited {self.proc.returncode} before listening")
        self.url = line.split("listening on ")[1].strip()
        # drain stderr so the server never blocks on a full pipe
        self.log: list[str] = []
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def rss_mib(self) -> float:
        import psutil

        return psutil.Process(self.proc.pid).memory_info().rss / 2**20

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(60)


def run_load(url: str, jobs, clients: int) -> tuple[list[float], int, float]:
    """Send every job from ``clients`` threads: (latencies in s, failures, wall seconds)."""
    from dprm.client import Client, ServeError

    client = Client(url, timeout=120, retries=0)
    latencies: list[float] = []
    failures = [0]
    lock = threading.Lock()

    def one(job):
        started = time.perf_counter()
        try:
            answer = client.score(*job)
            ok = len(answer["solutions"]) == len(job[1])
        except ServeError:
            ok = False
        with lock:
            latencies.append(time.perf_counter() - started)
            failures[0] += not ok

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, jobs))
    return latencies, failures[0], time.perf_counter() - started


def measure(prm_dir, calibrator, settings, wait_ms, warm, jobs, clients, blocks) -> list[dict]:
    """Both servers at once (``settings``: their ``--max-batch``), warmed up on ``warm``,
    then ``jobs`` in ``blocks`` blocks sent to each server in turn (order alternating), so
    that both runs see the same machine load; one row per server."""
    import numpy as np

    from dprm.client import Client

    servers = [Server(prm_dir, calibrator, max_batch, wait_ms) for max_batch in settings]
    try:
        state = []
        for server in servers:
            Client(server.url).wait_ready(
                600
            )  # a loaded machine can take minutes to start a server
            run_load(server.url, warm, clients)  # warm-up: allocator, kernels, caches
            state.append(
                {"rss": server.rss_mib(), "before": Client(server.url).info()["batching"],
                 "latencies": [], "failures": 0, "wall": 0.0}
            )  # fmt: skip
        size = -(-len(jobs) // blocks)
        for b in range(blocks):
            chunk = jobs[b * size : (b + 1) * size]
            order = range(len(servers)) if b % 2 == 0 else reversed(range(len(servers)))
            for k in order:
                latencies, failures, wall = run_load(servers[k].url, chunk, clients)
                print(
                    f"block {b + 1}/{blocks}, --max-batch {settings[k]}: {len(chunk)} requests "
                    f"in {wall:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
                state[k]["latencies"] += latencies
                state[k]["failures"] += failures
                state[k]["wall"] += wall
        for server, st in zip(servers, state, strict=True):
            st["after"] = Client(server.url).info()["batching"]
            st["rss_end"] = server.rss_mib()
    finally:
        codes = [server.stop() for server in servers]
    rows = []
    for max_batch, st, code in zip(settings, state, codes, strict=True):
        before, after = st["before"], st["after"]
        lat = np.asarray(st["latencies"]) * 1e3
        sizes = {
            int(k): v - before["batch_sizes"].get(k, 0) for k, v in after["batch_sizes"].items()
        }
        sizes = {k: v for k, v in sizes.items() if v > 0}
        batches = after["batches"] - before["batches"]
        rows.append(
            {
                "max_batch": max_batch,
                "batch_wait_ms": wait_ms,
                "clients": clients,
                "requests": len(jobs),
                "answered": len(jobs) - st["failures"],
                "failures": st["failures"],
                "wall_s": round(st["wall"], 3),
                "throughput_rps": round(len(jobs) / st["wall"], 2),
                "p50_ms": round(float(np.percentile(lat, 50)), 2),
                "p99_ms": round(float(np.percentile(lat, 99)), 2),
                "mean_batch": round(
                    (after["batched_requests"] - before["batched_requests"]) / batches, 2
                ),
                "largest_batch": max(sizes) if sizes else 0,
                "batch_sizes": " ".join(f"{k}:{v}" for k, v in sorted(sizes.items())),
                "rss_start_mib": round(st["rss"], 1),
                "rss_end_mib": round(st["rss_end"], 1),
                "exit_code": code,
            }
        )
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    """The rows as CSV (written whole, then moved into place)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(buffer.getvalue())
    os.replace(tmp, path)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients N")
    parser.add_argument("--requests", type=int, default=192, help="timed requests per run")
    parser.add_argument("--warmup", type=int, default=16, help="untimed requests first")
    parser.add_argument("--max-batch", type=int, default=16, help="the batched run's --max-batch")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0)
    parser.add_argument(
        "--blocks", type=int, default=4,
        help="the timed requests go to the two servers in this many alternating blocks",
    )  # fmt: skip
    parser.add_argument("--csv", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--smoke", action="store_true", help="a few requests, 4 clients")
    args = parser.parse_args()
    if args.smoke:
        args.clients, args.requests, args.warmup, args.blocks = 4, 16, 4, 2

    from importlib import resources

    prm_dir = Path(str(resources.files("dprm.llm") / "worlds" / "arith" / "prm"))
    jobs = workload(args.requests + args.warmup)
    warm, timed = jobs[: args.warmup], jobs[args.warmup :]
    with tempfile.TemporaryDirectory() as tmp:
        calibrator = fit_calibrator(prm_dir, Path(tmp) / "mono")
        rows = measure(
            prm_dir, calibrator, (args.max_batch, 1), args.batch_wait_ms, warm, timed,
            args.clients, args.blocks,
        )  # fmt: skip
    print(f"workload: {args.clients} clients x {args.requests} /v1/score requests, arith PRM")
    for r in rows:
        name = "batched" if r["max_batch"] > 1 else "one at a time"
        print(
            f"{name:>13} (--max-batch {r['max_batch']:>2}): {r['throughput_rps']:8.1f} req/s  "
            f"p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  mean batch "
            f"{r['mean_batch']:5.2f}  sizes {r['batch_sizes']}  answered "
            f"{r['answered']}/{r['requests']}  RSS {r['rss_start_mib']:.0f} -> "
            f"{r['rss_end_mib']:.0f} MiB"
        )
    speedup = rows[0]["throughput_rps"] / rows[1]["throughput_rps"]
    print(f"speed-up of batching: {speedup:.2f}x")
    if args.csv is not None:
        write_csv(args.csv, rows)
    failed = sum(r["failures"] for r in rows) or any(r["exit_code"] != 0 for r in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
