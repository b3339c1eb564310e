"""Every timing (benchmarks/perf) and experiment driver (benchmarks/experiments) runs at its
smallest size, so none of them rots unseen; every docs/results page re-renders byte for byte.

The scripts are run as a user runs them (a subprocess, ``python benchmarks/...``); what they
print is not checked beyond a clean exit and a non-empty output: their numbers are timings or
experiment results, not behaviour under test. Scripts that take more than ~30 s at their
smallest size (a Ray start, a twin grid) are marked ``slow``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"

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
    pytest.param(
        "bench_executors.py", ["--train", "2", "--test", "1", "--shards", "1"], marks=slow
    ),  # fmt: skip
]
EXPERIMENTS = [
    pytest.param("regime_map.py", ["--smoke", "--out", "{tmp}/fits.csv"], marks=slow),
    pytest.param("ias_pays_grid.py", ["--smoke", "--root", "{tmp}/grid"], marks=slow),
    pytest.param("performance.py", ["--smoke", "--out", "{tmp}/perf"], marks=slow),
    pytest.param(
        "twin_residuals.py",
        ["--size", "tiny", "--generators", "llama-3.2-1b", "--prms", "qwen-prm"],
        marks=slow,
    ),
    pytest.param(
        "grid_beyond.py",
        [
            "--size",
            "tiny",
            "--presets",
            "llama-3.2-1b__qwen-prm",
            "--seeds",
            "0",
            "--methods",
            "platt",
            "--threads",
            "1",
            "--conformal-inner",
            "none",
            "--work",
            "{tmp}/work",
            "--out",
            "{tmp}/beyond.json",
        ],
        marks=slow,
    ),  # fmt: skip
]
#: page name -> the script that renders it
PAGES = {
    "paper-vs-dprm": "paper_rows.py",
    "regime-map": "regime_map.py",
    "adaptive-compute": "ias_pays_grid.py",
    "performance": "performance.py",
}


def _run(path: Path, args: list[str], tmp_path: Path, env: dict | None = None) -> str:
    env = {**os.environ, **(env or {}), "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = subprocess.run(
        [sys.executable, str(path), *args], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"{path.name} {args} exited {done.returncode}:\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.mark.parametrize(("script", "args"), PERF)
def test_perf_script_runs_at_its_smallest_size(script, args, tmp_path):
    assert _run(ROOT / "benchmarks" / "perf" / script, args, tmp_path).strip()


@pytest.mark.parametrize(("script", "args"), EXPERIMENTS)
def test_experiment_script_runs_at_its_smallest_size(script, args, tmp_path):
    assert _run(ROOT / "benchmarks" / "experiments" / script, args, tmp_path).strip()


def test_every_script_is_smoke_tested():
    listed = {p.values[0] if hasattr(p, "values") else p[0] for p in PERF + EXPERIMENTS}
    listed.add("paper_rows.py")  # test_paper_rows_reads_a_reproduce_output
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*/*.py")} - {"results_page.py"}
    assert scripts == listed


def test_paper_rows_reads_a_reproduce_output(tmp_path):
    """The smallest ``dprm reproduce`` output paper_rows.py reads: one world's eval files."""
    import json

    out = tmp_path / "out"
    world = "llama-3.1-8b__qwen-prm"
    values = {"base": 0.30, "ot": 0.10, "qr": 0.20}
    for method, value in values.items():
        metrics = {"brier": value, "pos_brier": value / 2, "ece": value / 3,
                   "wql": None if method == "base" else value / 4,
                   "wql_interior": None if method == "base" else value / 5}  # fmt: skip
        record = {"world": world, "method": method,
                  "splits": {s: {"metrics": metrics} for s in ("train", "id", "ood")}}  # fmt: skip
        path = out / "eval" / world / method / "seed0.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(record))
    text = _run(ROOT / "benchmarks" / "experiments" / "paper_rows.py", [str(out)], tmp_path)
    # OT's improvement over Base: 100 (0.30 - 0.10) / 0.30 = +66.7 %; QR's +33.3 %
    assert "| qwen-prm | MATH500, held out | brier |" in text
    assert "+66.7 | +33.3 | OT / OT |" in text


@pytest.mark.parametrize("page", sorted(p.stem for p in RESULTS.glob("*.md")))
def test_results_page_rerenders_byte_for_byte(page, tmp_path):
    assert page in PAGES, f"docs/results/{page}.md has no renderer in PAGES"
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    (copy / f"{page}.md").unlink()
    _run(ROOT / "benchmarks" / "experiments" / PAGES[page], ["--render"], tmp_path,
         env={"DPRM_RESULTS_DIR": str(copy)})  # fmt: skip
    assert (copy / f"{page}.md").read_bytes() == (RESULTS / f"{page}.md").read_bytes()


def test_every_results_page_has_its_renderer_and_its_command():
    pages = {p.stem for p in RESULTS.glob("*.md")}
    assert pages <= set(PAGES)
    for name in pages:
        head = (RESULTS / f"{name}.md").read_text().splitlines()[:8]
        assert any(line.startswith("- Regenerate this page") for line in head), name
        assert any(line.startswith("- Data computed at commit") for line in head), name
