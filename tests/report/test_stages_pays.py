"""The IAS stage's "does it pay?" rows (dprm.report.stages: pays_plan, sweep_one, ias_units)
and the report section they feed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprm.runner.layout import REFERENCE, Layout

WORLD = "r1-qwen-7b__qwen-prm"
PAYS_SWEEPS = {"uniform", "oracle", "oracle-p", "auto"}


@pytest.fixture
def pipe_world(tiny_world, tmp_path):
    """A pipeline on ``tmp_path / run`` whose world is a private copy of the tiny synthetic
    world (no trained calibrator: the IAS stage has only its reference units)."""
    from dprm.report.grid import resolve
    from dprm.runner.pipeline import Pipeline

    paths = tiny_world(WORLD)
    source = Path(paths["id/bon"]).parent.parent
    cfg = resolve("tiny", methods=["ot"], keep_worlds=True)
    logs: list[str] = []
    pipe = Pipeline(tmp_path / "run", cfg, progress=False, log=logs.append)
    shutil.copytree(source, pipe.world_dir(WORLD))
    return pipe, logs


def _make_v1(bon_dir: Path) -> None:
    """Rewrite a BoN set as contract v1: no answers, no step scores, no candidate states."""
    responses = pd.read_parquet(bon_dir / "responses.parquet")
    responses = responses.drop(columns=[c for c in ("answer", "step_scores") if c in responses])
    responses.to_parquet(bon_dir / "responses.parquet", index=False)
    meta = json.loads((bon_dir / "meta.json").read_text())
    meta.pop("bon_version", None)
    (bon_dir / "meta.json").write_text(json.dumps(meta))
    (bon_dir / "response_hidden_states.npy").unlink(missing_ok=True)


def _reference_unit(units, split: str):
    return next(u for u in units if u.key == f"ias/{WORLD}/{split}/{REFERENCE}/seed0")


def test_stage_writes_uniform_oracle_and_auto_rows_per_rule(pipe_world):
    from dprm.report.stages import ias_units

    pipe, logs = pipe_world
    units = ias_units(pipe, WORLD)
    assert not logs  # a synthetic world serves both rules and has train/bon
    unit = _reference_unit(units, "id")
    assert unit.inputs["pays"] == {"rules": ["highest-last", "majority"], "vote_trials": 64}
    assert any(name.endswith("train/bon") for name in unit.reads)  # auto learns on it
    info = unit.run()
    assert info == {"pays_notes": []}
    out = Layout(pipe.out).ias_dir(WORLD, "id", REFERENCE, 0)
    rows = pd.read_csv(out / "ias_full.csv")
    # the paper's sweeps are unchanged; the new rows come on top
    assert {"C", "tau", "greedy"} <= set(rows["sweep"])
    pays = rows[rows["sweep"].isin(PAYS_SWEEPS)]
    for rule in ("highest-last", "majority"):
        sub = pays[pays["rule"] == rule]
        assert set(sub["sweep"]) == PAYS_SWEEPS, rule
        assert set(sub.loc[sub["sweep"] == "auto", "method"]) == {"base", "truth"}
    oracle = pays[pays["sweep"] == "oracle"].set_index(["rule", "level"])["accuracy"]
    uniform = pays[pays["sweep"] == "uniform"].set_index(["rule", "level"])["accuracy"]
    assert (oracle >= uniform - 1e-12).all()  # the oracle allocation can always be uniform
    assert (out / "pays.csv").exists()


def test_v1_bon_skips_vote_rules_with_a_log_line(pipe_world):
    from dprm.report.stages import ias_units

    pipe, logs = pipe_world
    _make_v1(pipe.world_dir(WORLD) / "ood" / "bon")
    units = ias_units(pipe, WORLD)
    assert len(logs) == 1 and "ood" in logs[0] and "'majority' skipped" in logs[0]
    assert "contract v1" in logs[0] and "\n" not in logs[0]
    assert _reference_unit(units, "ood").inputs["pays"]["rules"] == ["highest-last"]
    assert _reference_unit(units, "id").inputs["pays"]["rules"] == ["highest-last", "majority"]
    _reference_unit(units, "ood").run()
    rows = pd.read_csv(Layout(pipe.out).ias_dir(WORLD, "ood", REFERENCE, 0) / "ias_full.csv")
    assert set(rows.loc[rows["sweep"].isin(PAYS_SWEEPS), "rule"]) == {"highest-last"}


def test_missing_train_bon_skips_auto_keeps_uniform_and_oracle(pipe_world):
    from dprm.report.stages import ias_units

    pipe, logs = pipe_world
    shutil.rmtree(pipe.world_dir(WORLD) / "train" / "bon")
    units = ias_units(pipe, WORLD)
    assert sum("no train/bon" in line for line in logs) == 2  # one per split
    unit = _reference_unit(units, "id")
    assert not any(name.endswith("train/bon") for name in unit.reads)
    unit.run()
    rows = pd.read_csv(Layout(pipe.out).ias_dir(WORLD, "id", REFERENCE, 0) / "ias_full.csv")
    assert set(rows["sweep"]) & PAYS_SWEEPS == {"uniform", "oracle"}


def test_train_bon_is_part_of_the_fingerprint(pipe_world):
    from dprm.report.stages import ias_units

    pipe, _ = pipe_world
    before = _reference_unit(ias_units(pipe, WORLD), "id").fingerprint
    meta = pipe.world_dir(WORLD) / "train" / "bon" / "meta.json"
    meta.write_text(meta.read_text().replace('"split"', '"note": "edited", "split"'))
    assert _reference_unit(ias_units(pipe, WORLD), "id").fingerprint != before
    pipe.config.ias_rules = []  # no rows: the training set is not read
    unit = _reference_unit(ias_units(pipe, WORLD), "id")
    assert unit.inputs["pays"]["rules"] == []
    assert not any(name.endswith("train/bon") for name in unit.reads)


def test_unknown_rule_or_too_few_vote_trials_is_a_config_error():
    from dprm.config import ConfigError
    from dprm.report.grid import resolve

    cfg = resolve("tiny", methods=["ot"])
    with pytest.raises(ConfigError, match="ias_rules"):
        type(cfg)(**(vars(cfg) | {"ias_rules": ["highest-last", "mode"]}))
    with pytest.raises(ConfigError, match="vote_trials"):
        type(cfg)(**(vars(cfg) | {"vote_trials": 1}))


@pytest.mark.slow
def test_tiny_run_reports_the_pays_table(tiny_run):
    """The reproduction writes the calibrators' auto rows, and the report's table shows the
    numbers of tables/pays.csv."""
    from dprm.report.pays import pays_summary

    out, _, outcome, _ = tiny_run
    assert outcome.ok
    rows = pd.read_csv(Layout(out).ias_dir(WORLD, "id", "ot", 0) / "ias_full.csv")
    auto = rows[rows["sweep"] == "auto"]
    assert set(auto["method"]) == {"ot"} and set(auto["rule"]) == {"highest-last", "majority"}
    assert not (set(rows["sweep"]) & {"uniform", "oracle"})  # computed once, in the reference
    pays = pd.read_csv(out / "tables" / "pays.csv")
    assert {"uniform", "oracle", "oracle-p", "auto", "C"} <= set(pays["kind"])
    assert set(pays.loc[pays["kind"] == "auto", "method"]) == {"base", "truth", "ot", "qr",
                                                               "isotonic"}  # fmt: skip
    text = (out / "report.md").read_text()
    assert "## Does adaptive compute pay?" in text
    summary = pays_summary(pays)
    for kind, method in (("uniform", "uniform"), ("auto", "ot")):
        r = summary[
            (summary["split"] == "id")
            & (summary["rule"] == "highest-last")
            & (summary["kind"] == kind)
            & (summary["method"] == method)
            & np.isclose(summary["cost"], 0.1)
        ].iloc[0]
        assert f"{r['accuracy']:.3f}" in text
    results = json.loads((out / "results.json").read_text())
    assert len(results["pays"]) == len(pays)


def test_resume_does_not_redo_the_pays_units(pipe_world):
    from dprm.report.stages import ias_units

    pipe, _ = pipe_world
    pipe.run_stage("ias", ias_units(pipe, WORLD))
    assert pipe.timing["ias"]["units"] == 2 and not pipe.failures
    units = ias_units(pipe, WORLD)
    assert all(pipe.is_done(u) for u in units)  # same rules, trials and train/bon: reused
    pipe.config.vote_trials = 16  # a setting of the rows changes: the units are redone
    assert not any(pipe.is_done(u) for u in ias_units(pipe, WORLD))
