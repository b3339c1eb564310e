"""Every timing script (benchmarks/perf) runs at its smallest size, so none rots unseen.

What a script prints is not checked beyond a clean exit and a non-empty output: its numbers are
timings, not behaviour under test. Scripts that take more than ~30 s at their smallest size (a
Ray start, a twin world) are marked ``slow``. The experiment drivers: test_experiment_scripts.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
slow = pytest.mark.slow
#: (script, smallest arguments); {tmp} is the test's temporary directory
PERF = [
    ("bench_cli_startup.py", ["--repeats", "1"]),
    ("bench_ias.py", ["--smoke"]),
    ("bench_ot.py", ["--dim", "32", "--steps", "2", "--skip-fit", "--threads", "1"]),
    ("bench_embed_onepass.py", ["--trajectories", "2", "--repeats", "1"]),
    ("bench_synth.py", ["--smoke"]),
    pytest.param("bench_ias_auto.py", ["--smoke"], marks=slow),
    pytest.param("bench_tune.py", ["--smoke", "--out", "{tmp}/tune"], marks=slow),
    pytest.param(
        "bench_train_contention.py",
        ["--steps", "5", "--repeats", "1", "--size", "tiny", "--no-torch-default"],
        marks=slow,
    ),
    pytest.param("bench_peers.py", ["--smoke"], marks=slow),
    pytest.param("bench_api_vs_cli.py", ["--max-steps", "5", "--repeats", "1"], marks=slow),
    pytest.param("bench_serve.py", ["--smoke", "--csv", "{tmp}/runs.csv"], marks=slow),
    pytest.param(
        "bench_train_stop.py",
        ["--methods", "qr", "--seeds", "0", "--size", "tiny", "--work", "{tmp}/stop"],
        marks=slow,
    ),
    pytest.param(
        "bench_executors.py", ["--train", "2", "--test", "1", "--shards", "1"], marks=slow
    ),  # fmt: skip
]


@pytest.mark.parametrize(("script", "args"), PERF)
def test_perf_script_runs_at_its_smallest_size(script, args, tmp_path, run):
    assert run(ROOT / "benchmarks" / "perf" / script, args, tmp_path).strip()


def test_every_perf_script_is_smoke_tested():
    listed = {p.values[0] if hasattr(p, "values") else p[0] for p in PERF}
    assert {p.name for p in (ROOT / "benchmarks" / "perf").glob("*.py")} == listed
