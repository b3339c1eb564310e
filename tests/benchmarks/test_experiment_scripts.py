"""Every experiment driver (benchmarks/experiments) runs at its smallest size, and every page
it writes under docs/results re-renders byte for byte from the CSVs stored beside it.

What a driver prints is not checked beyond a clean exit and a non-empty output (paper_rows.py
excepted: its arithmetic on a hand-made run is). Drivers that take more than ~30 s at their
smallest size are marked ``slow``. The timing scripts: test_perf_scripts.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
slow = pytest.mark.slow
EXPERIMENTS = [
    pytest.param("regime_map.py", ["--smoke", "--out", "{tmp}/fits.csv"], marks=slow),
    pytest.param("ias_pays_grid.py", ["--smoke", "--root", "{tmp}/grid"], marks=slow),
    ("performance.py", ["--smoke", "--out", "{tmp}/perf"]),
    ("adaptive_peers.py", ["--smoke", "--root", "{tmp}/peers"]),
    ("real_world.py", ["--smoke", "--work", "{tmp}/real-world"]),
    ("warmup_selection.py", ["--smoke", "--work", "{tmp}/warmup"]),
    pytest.param("recommendation.py", ["--smoke", "--work", "{tmp}/recommend"], marks=slow),
    pytest.param("world_training.py", ["--smoke", "--work", "{tmp}/world"], marks=slow),
    pytest.param("serving.py", ["--smoke", "--out", "{tmp}/serving"], marks=slow),
    pytest.param("do_no_harm.py", ["--smoke", "--work", "{tmp}/dnh"], marks=slow),
    ("arith_world.py", ["--smoke", "--out", "{tmp}/arith-world"]),
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
#: page name -> the script that renders it (or the script and its arguments after --render)
PAGES = {
    "paper-vs-dprm": "paper_rows.py",
    "regime-map": "regime_map.py",
    "adaptive-compute": "ias_pays_grid.py",
    "performance": "performance.py",
    "adaptive-peers": "adaptive_peers.py",
    "adaptive-peers-arith": ("adaptive_peers.py", "--out", "{tmp}/results/adaptive-peers-arith.md"),
    "real-world": "real_world.py",
    "serving": "serving.py",
    "arith-world": "arith_world.py",
    "do-no-harm": "do_no_harm.py",
}


@pytest.mark.parametrize(("script", "args"), EXPERIMENTS)
def test_experiment_script_runs_at_its_smallest_size(script, args, tmp_path, run):
    assert run(ROOT / "benchmarks" / "experiments" / script, args, tmp_path).strip()


def test_every_experiment_script_is_smoke_tested():
    listed = {p.values[0] if hasattr(p, "values") else p[0] for p in EXPERIMENTS}
    # paper_rows: below; results_page, preregistration, peer_stats: libraries (tested in
    # test_preregistration.py and through adaptive_peers.py); peer_sets: adaptive_peers.py
    # --bon's half
    listed |= {"paper_rows.py", "results_page.py", "peer_sets.py", "preregistration.py",
               "peer_stats.py"}  # fmt: skip
    assert {p.name for p in (ROOT / "benchmarks" / "experiments").glob("*.py")} == listed


def test_the_real_world_page_lists_the_calibrators_a_guard_refused(tmp_path, run):
    run(ROOT / "benchmarks" / "experiments" / "real_world.py", ["--smoke", "--work", "{tmp}/w"],
        tmp_path)  # fmt: skip
    page = (tmp_path / "w" / "results" / "real-world.md").read_text()
    assert "Refused by their collapse guard" in page
    assert "- `train/w/mono/seed0`: CollapseError: mono (seed 0) collapsed" in page


def test_paper_rows_reads_a_reproduce_output(tmp_path, run):
    """The smallest ``dprm reproduce`` output paper_rows.py reads: one world's eval files."""
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
    text = run(ROOT / "benchmarks" / "experiments" / "paper_rows.py", [str(out)], tmp_path)
    # OT's improvement over Base: 100 (0.30 - 0.10) / 0.30 = +66.7 %; QR's +33.3 %
    assert "| qwen-prm | MATH500, held out | brier |" in text
    assert "+66.7 | +33.3 | OT / OT |" in text


@pytest.mark.parametrize("page", sorted(p.stem for p in RESULTS.glob("*.md")))
def test_results_page_rerenders_byte_for_byte(page, tmp_path, run):
    assert page in PAGES, f"docs/results/{page}.md has no renderer in PAGES"
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    (copy / f"{page}.md").unlink()
    script, *args = (PAGES[page],) if isinstance(PAGES[page], str) else PAGES[page]
    run(ROOT / "benchmarks" / "experiments" / script, ["--render", *args], tmp_path,
         env={"DPRM_RESULTS_DIR": str(copy)})  # fmt: skip
    assert (copy / f"{page}.md").read_bytes() == (RESULTS / f"{page}.md").read_bytes()


def test_every_results_page_has_its_renderer_and_its_command():
    pages = {p.stem for p in RESULTS.glob("*.md")}
    assert pages <= set(PAGES)
    for name in pages:
        head = (RESULTS / f"{name}.md").read_text().splitlines()[:8]
        assert any(line.startswith("- Regenerate this page") for line in head), name
        assert any(line.startswith("- Data computed at commit") for line in head), name
