"""The IAS stage's "does it pay?" rows (dprm.orchestrate.ias_units: pays_plan, sweep_one, ias_units)
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
    from dprm.orchestrate.grid import resolve
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
    from dprm.orchestrate.ias_units import ias_units

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
    assert {"C", "tau", "greedy"} <= set(rows["allocation"])
    pays = rows[rows["allocation"].isin(PAYS_SWEEPS)]
    for rule in ("highest-last", "majority"):
        sub = pays[pays["rule"] == rule]
        assert set(sub["allocation"]) == PAYS_SWEEPS, rule
        assert set(sub.loc[sub["allocation"] == "auto", "method"]) == {"base", "truth"}
    oracle = pays[pays["allocation"] == "oracle"].set_index(["rule", "target_cost"])["accuracy"]
    uniform = pays[pays["allocation"] == "uniform"].set_index(["rule", "target_cost"])["accuracy"]
    assert (oracle >= uniform - 1e-12).all()  # the oracle allocation can always be uniform
    assert (out / "pays.csv").exists()


def test_v1_bon_skips_vote_rules_with_a_log_line(pipe_world):
    from dprm.orchestrate.ias_units import ias_units

    pipe, logs = pipe_world
    _make_v1(pipe.world_dir(WORLD) / "ood" / "bon")
    units = ias_units(pipe, WORLD)
    assert len(logs) == 1 and "ood" in logs[0] and "'majority' skipped" in logs[0]
    assert "contract v1" in logs[0] and "\n" not in logs[0]
    assert _reference_unit(units, "ood").inputs["pays"]["rules"] == ["highest-last"]
    assert _reference_unit(units, "id").inputs["pays"]["rules"] == ["highest-last", "majority"]
    _reference_unit(units, "ood").run()
    rows = pd.read_csv(Layout(pipe.out).ias_dir(WORLD, "ood", REFERENCE, 0) / "ias_full.csv")
    assert set(rows.loc[rows["allocation"].isin(PAYS_SWEEPS), "rule"]) == {"highest-last"}


def test_missing_train_bon_skips_auto_keeps_uniform_and_oracle(pipe_world):
    from dprm.orchestrate.ias_units import ias_units

    pipe, logs = pipe_world
    shutil.rmtree(pipe.world_dir(WORLD) / "train" / "bon")
    units = ias_units(pipe, WORLD)
    assert sum("no train/bon" in line for line in logs) == 2  # one per split
    unit = _reference_unit(units, "id")
    assert not any(name.endswith("train/bon") for name in unit.reads)
    unit.run()
    rows = pd.read_csv(Layout(pipe.out).ias_dir(WORLD, "id", REFERENCE, 0) / "ias_full.csv")
    assert set(rows["allocation"]) & PAYS_SWEEPS == {"uniform", "oracle"}


def test_train_bon_is_part_of_the_fingerprint(pipe_world):
    from dprm.orchestrate.ias_units import ias_units

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
    from dprm.orchestrate.grid import resolve

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
    auto = rows[rows["allocation"] == "auto"]
    assert set(auto["method"]) == {"ot"} and set(auto["rule"]) == {"highest-last", "majority"}
    assert not (set(rows["allocation"]) & {"uniform", "oracle"})  # computed once, in the reference
    pays = pd.read_csv(out / "tables" / "pays.csv")
    assert {"uniform", "oracle", "oracle-p", "auto", "C"} <= set(pays["allocation"])
    assert set(pays.loc[pays["allocation"] == "auto", "method"]) == {"base", "truth", "ot", "qr",
                                                               "isotonic"}  # fmt: skip
    text = (out / "report.md").read_text()
    assert "## Does adaptive compute pay?" in text
    summary = pays_summary(pays)
    for allocation, method in (("uniform", "uniform"), ("auto", "ot")):
        r = summary[
            (summary["split"] == "id")
            & (summary["rule"] == "highest-last")
            & (summary["allocation"] == allocation)
            & (summary["method"] == method)
            & np.isclose(summary["cost"], 0.1)
        ].iloc[0]
        assert f"{r['accuracy']:.3f}" in text
    results = json.loads((out / "results.json").read_text())
    assert len(results["pays"]) == len(pays)


def test_resume_does_not_redo_the_pays_units(pipe_world):
    from dprm.orchestrate.ias_units import ias_units

    pipe, _ = pipe_world
    pipe.run_stage("ias", ias_units(pipe, WORLD))
    assert pipe.timing["ias"]["units"] == 2 and not pipe.failures
    units = ias_units(pipe, WORLD)
    assert all(pipe.is_done(u) for u in units)  # same rules, trials and train/bon: reused
    pipe.config.vote_trials = 16  # a setting of the rows changes: the units are redone
    assert not any(pipe.is_done(u) for u in ias_units(pipe, WORLD))


# ----------------------------------------------------------------------------- auto-seq
#: tiny training budgets (seconds per model)
TINY_STEPS = {"max_steps": 20, "eval_every": 10}


@pytest.fixture(scope="module")
def trained_models(tiny_world, tmp_path_factory):
    """The ``models/`` folder of a run that trained OT (reads hidden states) and isotonic (the
    PRM score only) on the tiny world, trained once for this module."""
    from dprm.orchestrate.calibrator_units import train_units
    from dprm.orchestrate.grid import resolve
    from dprm.runner.pipeline import Pipeline

    cfg = resolve("tiny", methods=["ot", "isotonic"], overrides={"ot": dict(TINY_STEPS)})
    pipe = Pipeline(tmp_path_factory.mktemp("trained") / "run", cfg, progress=False, log=print)
    shutil.copytree(Path(tiny_world(WORLD)["id/bon"]).parent.parent, pipe.world_dir(WORLD))
    pipe.run_stage("train", train_units(pipe, WORLD))
    assert not pipe.failures
    return pipe.out / "models"


@pytest.fixture
def trained_world(pipe_world, trained_models):
    """``pipe_world`` with the trained OT and isotonic models (:func:`trained_models`)."""
    pipe, logs = pipe_world
    pipe.config.methods = ["ot", "isotonic"]
    shutil.copytree(trained_models, pipe.out / "models")
    return pipe, logs


def _unit(units, split: str, method: str):
    return next(u for u in units if u.key == f"ias/{WORLD}/{split}/{method}/seed0")


def _rows(pipe, split: str, method: str) -> pd.DataFrame:
    return pd.read_csv(Layout(pipe.out).ias_dir(WORLD, split, method, 0) / "ias_full.csv")


@pytest.mark.slow
def test_sequential_adds_auto_seq_rows_to_the_calibrators_units(trained_world):
    """``ias_sequential``: a calibrator's unit has its auto-seq rows (reading the draws' final
    answers on a twin world), the report's table and text show them; off: none."""
    from dprm.ias.learnt.allocation import REPORT_COSTS
    from dprm.orchestrate.ias_units import ias_units
    from dprm.report.pays import pays_markdown, pays_rows
    from dprm.report.sections.pays import pays_lines

    pipe, logs = trained_world
    off = ias_units(pipe, WORLD)
    pipe.config.ias_sequential = True
    on = ias_units(pipe, WORLD)
    assert not logs  # the twin world has candidate states in both sets
    # a setting of the calibrators' units only: their fingerprints change, the reference's not
    assert _unit(on, "id", "ot").inputs["pays"]["sequential"] is True
    assert "sequential" not in _unit(on, "id", REFERENCE).inputs["pays"]
    assert _unit(on, "id", "ot").fingerprint != _unit(off, "id", "ot").fingerprint
    assert _unit(on, "id", REFERENCE).fingerprint == _unit(off, "id", REFERENCE).fingerprint

    _unit(on, "id", REFERENCE).run()
    assert _unit(on, "id", "ot").run() == {"pays_notes": []}
    reference, rows = _rows(pipe, "id", REFERENCE), _rows(pipe, "id", "ot")
    assert "auto-seq" not in set(reference["allocation"])  # the calibrators' own rows
    seq = rows[rows["allocation"] == "auto-seq"]
    assert set(seq["rule"]) == {"highest-last", "majority"}  # every rule, voting included
    assert set(seq["method"]) == {"ot"}
    assert seq["seq_answers"].astype(bool).all()  # a v2 twin set: the draws' answers are read
    for _, sub in seq.groupby("rule"):
        assert np.allclose(np.sort(sub["target_cost"].to_numpy(float)), sorted(REPORT_COSTS))
    assert np.isfinite(seq["accuracy"]).all() and seq["accuracy"].between(0, 1).all()
    assert (rows["allocation"] == "auto").any()  # auto's rows are still there

    pays = pays_rows(reference, {0: rows}).assign(world=WORLD, split="id")
    assert "auto-seq" in set(pays["allocation"])
    shares = pays.loc[pays["allocation"] == "auto-seq", "share"]
    assert len(shares) == 2 * len(REPORT_COSTS) and np.isfinite(shares).all()
    table = [line for line in pays_markdown(pays, WORLD).splitlines() if "auto-seq, OT" in line]
    assert len(table) == 2  # one row per rule, each cell with its share of the headroom
    assert all(line.count("%") >= len(REPORT_COSTS) for line in table)
    text = "\n".join(pays_lines(pays, pipe.config))
    assert "**auto-seq**" in text and "`auto-seq`:" in text  # defined, and read

    pipe.config.ias_sequential = False
    assert _unit(ias_units(pipe, WORLD), "id", "ot").run() == {"pays_notes": []}
    rows = _rows(pipe, "id", "ot")
    assert "auto-seq" not in set(rows["allocation"]) and (rows["allocation"] == "auto").any()
    pays = pays_rows(reference, {0: rows}).assign(world=WORLD, split="id")
    assert "auto-seq" not in set(pays["allocation"])
    text = "\n".join(pays_lines(pays, pipe.config))
    assert "auto-seq" not in text and "auto-seq" not in pays_markdown(pays, WORLD)


def test_sequential_without_candidate_states_skips_a_hidden_state_calibrator(trained_world):
    """A set without candidate hidden states: the calibrator that reads them gets no auto-seq
    rows and a note (no crash); one that reads the PRM score only still gets them."""
    from dprm.orchestrate.ias_units import ias_units

    pipe, logs = trained_world
    _make_v1(pipe.world_dir(WORLD) / "ood" / "bon")
    pipe.config.ias_sequential = True
    logs.clear()
    units = ias_units(pipe, WORLD)
    states = [line for line in logs if "candidate hidden states" in line]
    assert len(states) == 1 and f"{WORLD}/ood" in states[0] and "auto-seq" in states[0]

    info = _unit(units, "ood", "ot").run()
    assert len(info["pays_notes"]) == 1
    note = info["pays_notes"][0]
    assert note.startswith(f"{WORLD}/ood: no 'auto-seq' rows of ot") and "test BoN set" in note
    rows = _rows(pipe, "ood", "ot")
    assert "auto-seq" not in set(rows["allocation"]) and (rows["allocation"] == "auto").any()
    meta = json.loads(
        (Layout(pipe.out).ias_dir(WORLD, "ood", "ot", 0) / "ias_meta.json").read_text()
    )
    assert meta["pays_notes"] == info["pays_notes"]

    assert _unit(units, "ood", "isotonic").run() == {"pays_notes": []}
    seq = _rows(pipe, "ood", "isotonic").query("allocation == 'auto-seq'")
    assert set(seq["rule"]) == {"highest-last"}  # majority: skipped on the v1 set
    assert not seq["seq_answers"].astype(bool).any()  # the v1 set has no final answers
