"""End-to-end ``reproduce`` on a tiny world with a tiny step budget, then resume behaviour."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")

from dprm.report.reproduce import State, reproduce, resolve  # noqa: E402


@pytest.mark.slow
def test_reproduce_tiny_end_to_end_and_resume(tmp_path):
    steps = {"max_steps": 20, "eval_every": 10}
    cfg = resolve(
        "tiny",
        methods=["ot", "qr", "isotonic"],
        overrides={"ot": steps, "qr": steps},
        keep_worlds=False,
        jobs=2,
    )
    cfg.mc_trials = 10
    out = tmp_path / "run"
    logs: list[str] = []
    report = reproduce(out, cfg, progress=False, log=logs.append)
    text = report.read_text()
    for needle in (
        "## Run",
        "## Checks",
        "## Calibration (Table 1)",
        "## Distance to the truth",
        "Cost-aware allocation (beyond the paper)",
        "figures/frontiers_qwen-prm.png",
        "figures/flexibility.png",
        "torch",
        "Wall time",
    ):
        assert needle in text, needle
    for name in (
        "frontiers_qwen-prm",
        "beta_qwen-prm",
        "tau_qwen-prm_r1-qwen-7b",
        "coverage_qwen-prm",
        "reliability_qwen-prm",
        "flexibility",
    ):
        assert (out / "figures" / f"{name}.png").exists() and (
            out / "figures" / f"{name}.pdf"
        ).exists()
    for ext in ("md", "tex", "csv"):
        assert (out / "tables" / f"calibration_qwen-prm.{ext}").exists()
    results = json.loads((out / "results.json").read_text())  # strict JSON: no NaN
    assert {r["method"] for r in results["metrics"]} == {"base", "ot", "qr", "isotonic"}
    assert {r["method"] for r in results["ias"]} >= {"base", "truth", "ot", "qr", "isotonic"}
    assert results["run"]["config"]["seeds"] == [0] and results["run"]["versions"]["torch"]
    assert results["run"]["train_configs"]["ot"]["max_steps"] == 20
    assert not (out / "worlds" / "r1-qwen-7b__qwen-prm").exists()  # deleted after use
    done = State(out).data["done"]
    assert sum(k.startswith("train/") for k in done) == 3
    model_cfg = out / "models" / "r1-qwen-7b__qwen-prm" / "ot" / "seed0" / "config.json"
    mtime = model_cfg.stat().st_mtime_ns

    # resume: nothing to redo (not even the report), no world regenerated, models untouched
    report_mtime = report.stat().st_mtime_ns
    reproduce(out, cfg, progress=False, log=logs.append)
    run = json.loads((out / "run.json").read_text())
    assert run["resumed"] is True
    assert all(t["units"] == 0 for t in run["last_stage_timing"].values())
    assert model_cfg.stat().st_mtime_ns == mtime and report.stat().st_mtime_ns == report_mtime
    assert not (out / "worlds" / "r1-qwen-7b__qwen-prm").exists()

    # a lost output is recomputed (the world is regenerated for it), nothing else
    (out / "ias" / "r1-qwen-7b__qwen-prm" / "ood" / "qr" / "seed0.csv").unlink()
    reproduce(out, cfg, progress=False, log=logs.append)
    run = json.loads((out / "run.json").read_text())
    assert run["stage_timing"]["ias"]["units"] == 1
    assert run["stage_timing"]["train"]["units"] == 0
    assert model_cfg.stat().st_mtime_ns == mtime
    assert report.stat().st_mtime_ns != report_mtime  # results changed: the report is redone


def test_parallel_units_and_failures(tmp_path):
    """--jobs runs picklable units in worker processes; a failing unit is reported, not fatal."""
    import functools

    from dprm.io import write_json
    from dprm.report.reproduce import Pipeline, Unit

    cfg = resolve("tiny", methods=["qr"], jobs=2)
    pipe = Pipeline(tmp_path, cfg, progress=False, log=lambda s: None)
    paths = [tmp_path / f"u{i}.json" for i in range(3)]
    units = [
        Unit(
            key=f"x/{i}", outputs=[p], run=functools.partial(write_json, p, {"i": i}), parallel=True
        )
        for i, p in enumerate(paths)
    ]
    bad = Unit(
        key="x/bad",
        outputs=[tmp_path / "never"],
        run=functools.partial(write_json, tmp_path / "no" / "\0", object()),
        parallel=True,
    )
    pipe.run_stage("demo", units + [bad])
    assert all(p.exists() for p in paths)
    assert pipe.timing["demo"]["units"] == 3
    assert [f["unit"] for f in pipe.failures] == ["x/bad"]
    assert "x/bad" not in State(tmp_path).data["done"]
    pipe.run_stage("demo", units)  # all done: skipped
    assert pipe.timing["demo"]["skipped"] == 3
    from dprm.report.document_md import render_report

    run = {
        "versions": {"dprm": "x", "torch": "x", "numpy": "x", "pandas": "x", "python": "x"},
        "wall_time_s": 1.0,
        "resumed": False,
        "unit_seconds_total": 1.0,
        "stage_timing": pipe.timing,
    }
    text = render_report(cfg, run, {}, [], {"frontier": [], "tables": []}, tmp_path, pipe.failures)
    assert "## Failures" in text and "`x/bad`" in text


def test_resolve_and_cli_flags(monkeypatch):
    from dprm.cli import build_parser
    from dprm.config import ConfigError
    from dprm.models import REGISTRY

    cfg = resolve("demo")
    assert cfg.methods[:2] == ["ot", "qr"] and "base" not in cfg.methods
    assert set(cfg.methods) <= set(REGISTRY)
    assert cfg.generators and cfg.prms == ["qwen-prm"] and cfg.seeds == [0] and cfg.keep_worlds
    # preset overrides are filtered to keys the method's config knows
    for method, values in cfg.overrides.items():
        assert values, method
    paper = resolve("paper")
    assert len(paper.worlds) == 18 and paper.seeds == [0, 1, 2] and not paper.keep_worlds
    assert paper.overrides == {}
    with pytest.raises(ConfigError, match="unknown or untrainable"):
        resolve("demo", methods=["ot", "nope"])
    with pytest.raises(ConfigError, match="unknown preset"):
        resolve("huge")
    args = build_parser().parse_args(
        ["reproduce", "--preset", "demo", "--out", "x", "--set", "ot.max_steps=5"]
    )
    assert args.overrides == ["ot.max_steps=5"] and args.jobs is None
    from dprm.cli import main

    assert main(["reproduce", "--preset", "demo", "--out", "x", "--set", "max_steps=5"]) == 2
