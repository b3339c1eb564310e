"""End-to-end ``reproduce`` on the tiny world: outputs, resume, fingerprints, failures, overrides."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from dprm.orchestrate.grid import GRIDS, resolve
from dprm.orchestrate.reproduce import reproduce
from dprm.runner.layout import Layout
from dprm.runner.pipeline import Pipeline
from dprm.runner.state import State
from dprm.runner.units import Unit

WORLD = "r1-qwen-7b__qwen-prm"


def _run_json(out):
    return json.loads((out / "run.json").read_text())


@pytest.mark.slow
def test_reproduce_tiny_end_to_end(tiny_run):
    out, _, outcome, _ = tiny_run
    assert outcome.ok and outcome.report == out / "report.md"
    text = outcome.report.read_text()
    for needle in (
        "## Run",
        "## Checks",
        "## Calibration (Table 1)",
        "## Distance to the truth",
        "Cost-aware allocation (beyond the paper)",
        "](figures/frontiers_qwen-prm.png)",
        "](figures/flexibility.png)",
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
    assert not (out / "worlds" / WORLD).exists()  # deleted after use
    done = State(out).data["done"]
    assert sum(k.startswith("train/") for k in done) == 3
    assert all(v.get("inputs") for k, v in done.items() if not k.startswith("report/"))
    # the IAS outputs are those of ``dprm ias`` (one writer)
    ias_dir = Layout(out).ias_dir(WORLD, "id", "ot", 0)
    for name in ("ias.csv", "ias_full.csv", "budgets.parquet", "ias_meta.json"):
        assert (ias_dir / name).exists(), name


@pytest.mark.slow
def test_resume_redoes_nothing_then_only_what_was_lost(tiny_copy, tiny_config):
    out, cfg = tiny_copy, tiny_config()
    model_cfg = Layout(out).model_dir(WORLD, "ot", 0) / "config.json"
    mtime, report_mtime = model_cfg.stat().st_mtime_ns, (out / "report.md").stat().st_mtime_ns
    outcome = reproduce(out, cfg, progress=False, log=lambda s: None)
    run = _run_json(out)
    assert outcome.ok and run["resumed"] is True
    assert all(t["units"] == 0 for t in run["last_stage_timing"].values())
    assert model_cfg.stat().st_mtime_ns == mtime
    assert (out / "report.md").stat().st_mtime_ns == report_mtime
    assert not (out / "worlds" / WORLD).exists()  # no world regenerated

    # a lost output is recomputed (the world is regenerated for it), nothing else
    (Layout(out).ias_dir(WORLD, "ood", "qr", 0) / "ias_full.csv").unlink()
    reproduce(out, cfg, progress=False, log=lambda s: None)
    run = _run_json(out)
    assert run["stage_timing"]["ias"]["units"] == 1
    assert run["stage_timing"]["train"]["units"] == 0
    assert model_cfg.stat().st_mtime_ns == mtime
    assert (out / "report.md").stat().st_mtime_ns != report_mtime  # the report is redone


@pytest.mark.slow
def test_changed_override_on_resume_reruns_that_methods_units(tiny_copy, tiny_config):
    """A new --set re-trains the model AND re-runs its evaluation and IAS."""
    out = tiny_copy
    before = State(out).data["done"]
    reproduce(out, tiny_config(ot={"max_steps": 30}), progress=False, log=lambda s: None)
    after = State(out).data["done"]
    rerun = {k for k in after if k in before and after[k]["at"] != before[k]["at"]} | (
        set(after) - set(before)
    )
    rerun = {k for k in rerun if not k.startswith("report/")}
    assert rerun == {
        f"train/{WORLD}/ot/seed0",
        f"evaluate/{WORLD}/ot/seed0",
        f"ias/{WORLD}/id/ot/seed0",
        f"ias/{WORLD}/ood/ot/seed0",
    }
    run = _run_json(out)
    assert run["train_configs"]["ot"]["max_steps"] == 30
    text = (out / "report.md").read_text()
    assert "Reused from an earlier invocation" in text
    assert f"`train/{WORLD}/qr/seed0`" in text and f"`evaluate/{WORLD}/ot/seed0`" not in text


def _tiny_demo(monkeypatch):
    """Point the CLI's ``demo`` grid at the tiny world (a test must stay seconds long)."""
    monkeypatch.setitem(GRIDS, "demo", GRIDS["tiny"])


def _reproduce_with_qr_raising(error: Exception, tmp_path, monkeypatch) -> tuple[int, Path]:
    """``dprm reproduce`` on the tiny demo grid (isotonic, qr) whose qr training raises
    ``error``; (exit code, run folder)."""
    from dprm.cli import main
    from dprm.orchestrate import calibrator_units

    _tiny_demo(monkeypatch)
    real = calibrator_units.train_one

    def train_one(calib, method, *args, **kwargs):
        if method == "qr":
            raise error
        return real(calib, method, *args, **kwargs)

    monkeypatch.setattr(calibrator_units, "train_one", train_one)
    out = tmp_path / "run"
    argv = ["reproduce", "--preset", "demo", "--out", str(out), "--quiet", "--jobs", "1"]
    return main(argv + ["--methods", "isotonic,qr", "--set", "qr.max_steps=5"]), out


@pytest.mark.slow
def test_failing_unit_exits_nonzero_and_the_report_lists_it(tmp_path, monkeypatch, capsys):
    """A failed unit -> exit 1, report written and listing the failure."""
    rc, out = _reproduce_with_qr_raising(RuntimeError("injected failure"), tmp_path, monkeypatch)
    assert rc == 1
    assert "1 unit(s) failed" in capsys.readouterr().err
    text = (out / "report.md").read_text()
    assert "## Failures" in text and f"`train/{WORLD}/qr/seed0`: RuntimeError: injected" in text
    results = json.loads((out / "results.json").read_text())
    assert [f["unit"] for f in results["failures"]] == [f"train/{WORLD}/qr/seed0"]
    assert {r["method"] for r in results["metrics"]} == {"base", "isotonic"}


@pytest.mark.slow
def test_a_refused_calibrator_is_listed_and_does_not_fail_the_run(tmp_path, monkeypatch, capsys):
    """A collapse guard's refusal is a verdict on the data: exit 0, listed under Refused."""
    from dprm.models.fit import CollapseError

    error = CollapseError("qr (seed 0) collapsed: injected")
    rc, out = _reproduce_with_qr_raising(error, tmp_path, monkeypatch)
    assert rc == 0
    assert "failed" not in capsys.readouterr().err
    text = (out / "report.md").read_text()
    assert "## Failures" not in text
    assert "## Refused" in text and f"`train/{WORLD}/qr/seed0`: CollapseError: qr" in text
    results = json.loads((out / "results.json").read_text())
    assert results["failures"] == [
        {"unit": f"train/{WORLD}/qr/seed0", "error": "CollapseError: qr (seed 0) collapsed: "
         "injected", "refused": True}
    ]  # fmt: skip
    assert {r["method"] for r in results["metrics"]} == {"base", "isotonic"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set", "xx.max_steps=1"], "method 'xx' is not trained in this run"),
        (["--methods", "ot", "--set", "ot.foo=1"], "unknown key(s) ['foo']"),
        (["--methods", "ot", "--set", "ot.max_steps=many"], "max_steps"),
        (["--methods", "ot", "--set", "max_steps=5"], "expected METHOD.KEY=VALUE"),
        (["--methods", "ot,nope"], "unknown or untrainable"),
    ],
)
def test_bad_override_or_method_is_an_error_before_any_work(tmp_path, capsys, extra, message):
    """Unknown methods and keys fail at once, nothing is written."""
    from dprm.cli import main

    out = tmp_path / "run"
    assert main(["reproduce", "--preset", "demo", "--out", str(out), "--quiet", *extra]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_parallel_units_and_failures(tmp_path):
    """--jobs runs picklable units in worker processes; a failing unit is reported, not fatal."""
    from dprm.io import write_json

    cfg = resolve("tiny", methods=["qr"], jobs=2)
    pipe = Pipeline(tmp_path, cfg, progress=False, log=lambda s: None)
    paths = [tmp_path / f"u{i}.json" for i in range(3)]
    units = [
        Unit(
            key=f"x/{i}",
            outputs=[p],
            run=functools.partial(write_json, p, {"i": i}),
            inputs={"i": i},
            parallel=True,
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
    assert pipe.timing["demo"]["skipped"] == 3 and sorted(pipe.reused) == ["x/0", "x/1", "x/2"]
    units[0].inputs = {"i": 99}  # a changed input: that unit runs again
    pipe.run_stage("again", units)
    assert pipe.timing["again"] == pipe.timing["again"] | {"units": 1, "skipped": 2}
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


def test_image_links_are_relative_to_the_report(tmp_path, monkeypatch):
    """With a relative OUT, links still point from report.md to its figures."""
    from dprm.report.document_md import _rel

    monkeypatch.chdir(tmp_path)
    assert _rel("runs/demo/figures/a.png", Path("runs/demo")) == "figures/a.png"
    assert _rel(str(tmp_path / "r" / "figures" / "b.png"), tmp_path / "r") == "figures/b.png"


def test_resolve_and_cli_flags():
    from dprm.cli import build_parser
    from dprm.config import ConfigError
    from dprm.models import REGISTRY

    cfg = resolve("demo")
    assert cfg.methods[:2] == ["ot", "qr"] and "base" not in cfg.methods
    assert set(cfg.methods) <= set(REGISTRY)
    assert cfg.generators and cfg.prms == ["qwen-prm"] and cfg.seeds == [0] and cfg.keep_worlds
    # grid defaults are filtered to keys the method's config knows
    for method, values in cfg.overrides.items():
        assert values, method
    paper = resolve("paper")
    assert len(paper.worlds) == 18 and paper.seeds == [0, 1, 2] and not paper.keep_worlds
    assert paper.overrides == {} and paper.methods == ["ot", "qr"]
    one = resolve("paper", worlds=["r1-qwen-7b__qwen-prm"], seeds=1)
    assert one.worlds == ["r1-qwen-7b__qwen-prm"] and one.seeds == [0]
    with pytest.raises(ConfigError, match="not in grid"):
        resolve("demo", worlds=["r1-qwen-7b__shepherd"])
    with pytest.raises(ConfigError, match="unknown or untrainable"):
        resolve("demo", methods=["ot", "nope"])
    with pytest.raises(ConfigError, match="unknown grid"):
        resolve("huge")
    parser = build_parser()
    for flag in ("--preset", "--grid"):
        args = parser.parse_args(
            ["reproduce", flag, "demo", "--out", "x", "--set", "ot.max_steps=5"]
        )
        assert args.grid == "demo" and args.overrides == ["ot.max_steps=5"] and args.jobs is None


@pytest.mark.slow
def test_calibrators_never_train_on_held_out_questions(tiny_run):
    """Held-out ID / OOD questions are disjoint from those a calibrator trained or
    early-stopped on; the paper protocol's ID set is exactly those training questions."""
    out = tiny_run[0]
    trained = {
        k: set(v["questions"]) for k, v in State(out).data["done"].items() if k.startswith("train/")
    }
    assert len(trained) == 3
    for key, questions in trained.items():
        _, world, method, seed = key.split("/")
        model = json.loads((Layout(out).model_dir(world, method, 0) / "config.json").read_text())
        info = model.get("info", model)
        assert info["n_train_questions"] + info["n_val_questions"] == len(questions)
        splits = json.loads(Layout(out).eval_path(world, method, 0).read_text())["splits"]
        held_out = set(splits["id"]["questions"]) | set(splits["ood"]["questions"])
        assert questions and held_out and not questions & held_out
        assert set(splits["train"]["questions"]) == questions
    text = (out / "report.md").read_text()
    assert "held-out protocol" in text and "paper protocol" in text
    assert "## Paper vs dprm (paper protocol)" in text and "evidence, not proof" in text
    for name in ("paper_vs_dprm_cells", "paper_vs_dprm_improvements"):
        assert (out / "tables" / f"{name}.md").exists() and (
            out / "tables" / f"{name}.csv"
        ).exists()
