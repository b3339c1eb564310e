"""The pre-registered draws (benchmarks/experiments/draws.toml) and the guard that refuses a
results page from development draws."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "experiments"))
import preregistration as pr  # noqa: E402


def test_the_draws_file_lists_every_twin_preset_and_the_trained_world():
    from dprm.data.synth.fitted_presets import fitted_preset_names
    from dprm.data.synth.presets import preset_names

    worlds = pr.read_draws()
    for name in [*fitted_preset_names(), *preset_names()]:
        entry = worlds[name]
        assert len(entry.report["world_seeds"]) >= 5, name
        # every seed the results pages used so far is development
        assert {11, 12, 13, 21, 22, 23} <= set(entry.development["world_seeds"]), name
    assert all(worlds[n].kind == "fitted-twin" for n in fitted_preset_names())
    arith = worlds["arith"]
    assert arith.kind == "trained" and len(arith.report["calibrator_seeds"]) >= 3
    assert not set(arith.report["question_resamples"]) & set(
        arith.development["question_resamples"]
    )


def test_development_draws_are_refused_with_one_line_and_exit_2(capsys):
    world = "qwen2.5-math-7b-instruct__qwen2.5-math-prm-7b"
    with pytest.raises(SystemExit) as exit_:
        pr.require_report("adaptive_peers.py", world, {"world_seeds": [101, 11]})
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "world_seeds [11]" in err and "development" in err
    assert (
        pr.require_report("adaptive_peers.py", world, {"world_seeds": [101, 102]})["world"] == world
    )


@pytest.mark.parametrize(
    ("world", "draws", "why"),
    [
        ("nowhere", {"world_seeds": [101]}, "not pre-registered"),
        ("demo", {"world_seeds": [7]}, "not pre-registered report draws"),
        ("arith", {"calibrator_seeds": [3], "question_resamples": [0]}, "development"),
        ("arith", {"world_seeds": [101]}, "has no world_seeds"),
    ],
)
def test_unlisted_draws_and_worlds_are_refused(world, draws, why):
    assert why in pr.check_report(world, draws)


def test_a_draw_both_development_and_report_is_a_malformed_file(tmp_path):
    bad = tmp_path / "draws.toml"
    bad.write_text('[worlds.w]\nkind = "twin"\ndevelopment = { world_seeds = [1] }\n'
                   'report = { world_seeds = [1, 2] }\n')  # fmt: skip
    with pytest.raises(pr.PreregistrationError, match=r"\[1\] are both development and report"):
        pr.read_draws(bad)


def test_adaptive_peers_refuses_development_world_seeds_before_computing(tmp_path):
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    script = ROOT / "benchmarks" / "experiments" / "adaptive_peers.py"
    done = subprocess.run(
        [sys.executable, str(script), "--root", str(tmp_path / "peers"), "--world-seeds", "11,12"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "world_seeds [11, 12]" in lines[0] and "development" in lines[0]
    assert not (tmp_path / "peers").exists()  # refused before computing anything
