"""``dprm run --dry-run`` and the preflight that stops a run before any unit (exit 2, one block
naming every missing requirement and how to get it). Offline: the hub is never contacted."""

from __future__ import annotations

import dataclasses

import pytest

from dprm.cli import main
from dprm.recipe import load_recipe
from dprm.recipe import preflight as P

from .conftest import PARK, tiny_recipe, write_recipe


@pytest.fixture
def cpu_only_machine(monkeypatch):
    """No GPU, no vLLM, no datasets, no hub (HF_HUB_OFFLINE): a laptop without the extras."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(P, "gpu_available", lambda: False)
    real = P.installed_version
    monkeypatch.setattr(
        P, "installed_version", lambda name: None if name in ("vllm", "datasets") else real(name)
    )
    monkeypatch.setattr(P, "hub_cached", lambda repo_id, repo_type="model": False)


def plan_rows(text: str) -> dict[str, int]:
    """The stage table of a printed plan: stage label -> units."""
    import re

    rows = (re.match(r"^  (\S.*?)\s{2,}(\d+)  ", line) for line in text.splitlines())
    return {row[1]: int(row[2]) for row in rows if row}


def test_park_recipe_stops_before_any_unit_with_one_block(cpu_only_machine, tmp_path, capsys):
    out = tmp_path / "park"
    assert main(["run", str(PARK), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert err[0].startswith(f"dprm run: {PARK} cannot run on this machine") and "(4)" in err[0]
    items = [line for line in err if line.startswith("  - ")]
    assert len(items) == 4 and len(err) == 6  # the head, one line per item, the hint
    text = "\n".join(items)
    assert "vllm package" in text and "pip install 'dprm[vllm]'" in text
    assert "datasets package" in text and "math500train" in text
    assert "a CUDA GPU" in text and "prm qwen-prm" in text
    assert "Hugging Face hub: offline mode (HF_HUB_OFFLINE=1)" in text
    assert "Qwen/Qwen2.5-Math-PRM-7B" in text
    assert not out.exists()  # nothing written, no unit ran


def test_dry_run_prints_the_plan_and_exits_0(cpu_only_machine, tmp_path, capsys):
    out = tmp_path / "park"
    assert main(["run", str(PARK), "--out", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert (
        "worlds (3): llama-3.2-1b__qwen-prm, qwen-2.5-1.5b__qwen-prm, r1-qwen-7b__qwen-prm" in text
    )
    assert "generator r1-qwen-7b: deepseek-ai/DeepSeek-R1-Distill-Qwen-7B, backend vllm" in text
    assert "prm qwen-prm: Qwen/Qwen2.5-Math-PRM-7B, cuda (1 GPU per engine)" in text
    rows = plan_rows(text)
    assert rows["generate"] == 15  # 3 generators x (3 splits + 2 BoN pools), 1 shard
    assert rows["embed"] == 15 and rows["train (ot, qr)"] == 18  # 3 worlds x 2 methods x 3 seeds
    assert rows["evaluate"] == 21  # and the raw PRM score per world
    assert rows["ias (id, ood)"] == 42  # the same per pool
    assert "a real run stops here with exit 2" in text
    assert not out.exists()


def test_a_runnable_recipe_passes(tiny_dirs, question_files, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    recipe = load_recipe(write_recipe(tmp_path / "r.toml", tiny_recipe(tiny_dirs, question_files)))
    assert P.missing_requirements(recipe, "local", tmp_path / "out") == []


def test_missing_paths_tuning_and_disk_are_named(tiny_dirs, question_files, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = tiny_recipe(tiny_dirs, question_files)
    data["prms"][0]["model"] = str(tmp_path / "no-such-prm")
    data["calibrators"]["tune_trials"] = 5
    recipe = load_recipe(write_recipe(tmp_path / "r.toml", data))
    real = P.installed_version
    monkeypatch.setattr(P, "installed_version", lambda n: None if n == "optuna" else real(n))
    monkeypatch.setattr(P, "_free_bytes", lambda out: 0)
    lines = [m.line() for m in P.missing_requirements(recipe, "local", tmp_path / "out")]
    assert any("no-such-prm (not found)" in line and "prm tiny-prm" in line for line in lines)
    assert any("optuna" in line and "tune_trials = 5" in line for line in lines)
    assert any(line.startswith("  - disk space") and "0.0 GB free" in line for line in lines)


def test_gpus_are_checked_only_where_units_run_here(cpu_only_machine, tmp_path):
    recipe = load_recipe(PARK)
    local = {m.what for m in P.missing_requirements(recipe, "local", tmp_path)}
    ray = {m.what for m in P.missing_requirements(recipe, "ray", tmp_path)}
    assert "a CUDA GPU (torch sees none)" in local and "a CUDA GPU (torch sees none)" not in ray


def test_the_demo_recipe_needs_nothing_a_cpu_laptop_lacks(cpu_only_machine, tmp_path, capsys):
    """`make demo` (examples/arith.toml): packaged question sets and shipped models, CPU only."""
    demo = PARK.parent / "arith.toml"
    recipe = load_recipe(demo)
    assert P.missing_requirements(recipe, "local", tmp_path / "demo") == []
    assert main(["run", str(demo), "--dry-run", "--out", str(tmp_path / "demo")]) == 0
    assert "preflight: every requirement is met here" in capsys.readouterr().out


def test_the_arith_plan_counts_the_units_its_run_makes(cpu_only_machine, tmp_path, capsys):
    """`--dry-run` of examples/arith.toml planned 5 generate units (the run makes 6: the
    training pool of `[bon] train`) and 21 IAS units (the run makes 44: the raw PRM score's too,
    per pool); tests/recipe/test_arith_recipe.py compares the plan with a real run."""
    demo = PARK.parent / "arith.toml"
    assert main(["run", str(demo), "--dry-run", "--out", str(tmp_path / "demo")]) == 0
    rows = plan_rows(capsys.readouterr().out)
    assert rows["questions"] == 3 and rows["rollout"] == 3
    assert rows["generate"] == 6 and rows["embed"] == 6  # 3 first passes + 3 pools
    fits = 7 * 3  # methods x seeds
    assert rows["evaluate"] == 1 + fits and rows["ias (id, ood + auto-seq)"] == 2 * (1 + fits)


def test_slurm_dry_run_checks_for_the_scheduler(cpu_only_machine, tmp_path, monkeypatch, capsys):
    """`--executor slurm --dry-run` said every requirement was met on a machine without
    `sbatch`; the real run refused at once."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no sbatch, no srun
    demo = PARK.parent / "arith.toml"
    argv = ["run", str(demo), "--executor", "slurm", "--dry-run", "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "a SLURM scheduler (sbatch and srun not on PATH)" in text
    assert "every requirement is met" not in text
    assert main([*argv, "--slurm-cluster", "local"]) == 0  # submitit's local mode needs none
    assert "SLURM scheduler" not in capsys.readouterr().out


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_ray_address_that_does_not_answer_is_a_missing_requirement(
    cpu_only_machine, tmp_path, capsys
):
    address = f"127.0.0.1:{_closed_port()}"
    demo = PARK.parent / "arith.toml"
    argv = ["run", str(demo), "--executor", "ray", "--address", address]
    assert main([*argv, "--dry-run", "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert f"the Ray cluster {address!r}" in text and "does not answer" in text
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2  # the real run: before any work
    err = capsys.readouterr().err.strip()
    assert address in err and len(err.splitlines()) == 1 and not (tmp_path / "o").exists()


def test_a_served_generator_needs_no_gpu_no_vllm_and_no_local_model(
    cpu_only_machine, tmp_path, monkeypatch
):
    """backend = "openai": the server holds the model, so its name is no hub id to look up and
    no GPU or vLLM is needed here; only the HTTP client is."""
    demo = load_recipe(PARK.parent / "arith.toml")
    served = {"backend": "openai", "model": "served-arith", "base_url": "http://127.0.0.1:8000/v1"}
    generators = tuple(dataclasses.replace(g, **served) for g in demo.generators)
    recipe = dataclasses.replace(demo, generators=generators)
    assert P.missing_requirements(recipe, "local", tmp_path / "demo") == []
    assert not P.needs_gpu(dataclasses.replace(generators[0], gpus=1.0), "openai")
    real = P.installed_version
    monkeypatch.setattr(P, "installed_version", lambda n: None if n == "httpx" else real(n))
    [missing] = P.missing_requirements(recipe, "local", tmp_path / "demo")
    assert "httpx" in missing.line() and 'backend = "openai" of' in missing.line()
