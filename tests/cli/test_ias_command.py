"""``dprm ias`` end to end on a tiny synthetic world (contract columns, files, names, errors)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from dprm.cli import main
from dprm.ias import BUDGET_COLUMNS, SUMMARY_COLUMNS
from dprm.models import REGISTRY


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_world):
    root = tmp_path_factory.mktemp("ias")
    world = tiny_world("r1-qwen-7b__qwen-prm")
    dim = 32
    torch.manual_seed(0)
    dirs = {}
    for method in ("ot", "qr"):
        dirs[method] = REGISTRY[method](dim, {}).save(root / "models" / method)
    dirs["qr2"] = REGISTRY["qr"](dim, {}).save(root / "models" / "qr_other")
    return root, world, dirs


def test_ias_writes_the_contract(setup, capsys):
    root, world, dirs = setup
    out = root / "out"
    rc = main(
        [
            "ias",
            "--bon",
            str(world["id/bon"]),
            "--model",
            str(dirs["ot"]),
            "--model",
            str(dirs["qr"]),
            "--out",
            str(out),
            "--mc-trials",
            "10",
            "--seed",
            "3",
        ]
    )
    assert rc == 0
    assert "wrote" in capsys.readouterr().out
    summary = pd.read_csv(out / "ias.csv")
    assert list(summary.columns) == SUMMARY_COLUMNS
    assert list(dict.fromkeys(summary["method"])) == ["base", "ot", "qr"]
    assert set(summary["allocation"]) == {
        "C",
        "tau",
        "beta",
        "beta-cal",
    }  # v2 set: candidate states
    assert summary.loc[summary.allocation == "C", "level"].isna().all()  # written as empty cells
    assert summary.loc[summary.allocation != "C", "level"].notna().all()
    assert len(summary[(summary.method == "ot") & (summary.allocation == "tau")]) == 100
    assert len(summary[(summary.method == "qr") & (summary.allocation == "tau")]) == 11
    assert summary[["cost", "accuracy", "accuracy_mc"]].notna().all().all()
    budgets = pq.read_table(out / "budgets.parquet").to_pandas()
    assert list(budgets.columns) == BUDGET_COLUMNS
    assert len(budgets) == len(summary) * 40  # the tiny ID BoN set has 40 questions
    meta = json.loads((out / "ias_meta.json").read_text())
    assert meta["beta"] == 0.1 and meta["mc_trials"] == 10 and "accuracy" in meta["columns"]
    # budgets agree with the summary's cost
    c = (
        budgets[(budgets.allocation == "C") & (budgets.method == "base")].groupby("C")["n"].mean()
        / 64
    )
    got = summary[(summary.allocation == "C") & (summary.method == "base")].set_index("C")["cost"]
    np.testing.assert_allclose(got.loc[c.index], c.to_numpy())
    # a rerun with the same seed is identical (seeded Monte Carlo)
    main(
        [
            "ias",
            "--bon",
            str(world["id/bon"]),
            "--model",
            str(dirs["ot"]),
            "--model",
            str(dirs["qr"]),
            "--out",
            str(root / "again"),
            "--mc-trials",
            "10",
            "--seed",
            "3",
            "--quiet",
        ]
    )
    pd.testing.assert_frame_equal(summary, pd.read_csv(root / "again" / "ias.csv"))


def test_repeated_methods_get_distinct_names(setup):
    root, world, dirs = setup
    out = root / "dup"
    main(
        [
            "ias",
            "--bon",
            str(world["ood/bon"]),
            "--model",
            str(dirs["qr"]),
            "--model",
            str(dirs["qr2"]),
            "--out",
            str(out),
            "--mc-trials",
            "0",
            "--beta",
            "0.2",
            "--quiet",
        ]
    )
    summary = pd.read_csv(out / "ias.csv")
    assert set(summary["method"]) == {"base", "qr:qr", "qr:qr_other"}
    assert summary["accuracy_mc"].isna().all()  # --mc-trials 0 skips the Monte Carlo


def test_bad_arguments(setup, tmp_path):
    _, world, _ = setup
    with pytest.raises(SystemExit):
        main(["ias", "--bon", str(world["id/bon"]), "--out", str(tmp_path), "--beta", "1.5"])
    assert main(["ias", "--bon", str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2


def test_greedy_sweep_matches_cost_and_maximises_the_success_curves(setup):
    """``--greedy`` adds one row per (method, C) at the C rule's cost; its allocation scores at
    least as high on the method's own success curves (the quantity it maximises)."""
    from dprm.data import read_bon_set
    from dprm.ias import estimate_from_model
    from dprm.models import load

    root, world, dirs = setup
    out = root / "greedy"
    argv = ["ias", "--bon", str(world["id/bon"]), "--model", str(dirs["ot"]), "--out", str(out)]
    assert main([*argv, "--mc-trials", "0", "--greedy", "--quiet"]) == 0
    summary = pd.read_csv(out / "ias.csv")
    assert set(summary["allocation"]) == {"C", "tau", "beta", "beta-cal", "greedy"}
    c_rows = summary[summary.allocation == "C"].set_index(["method", "C"])
    greedy = summary[summary.allocation == "greedy"].set_index(["method", "C"])
    assert set(greedy.index) == set(c_rows.index)
    np.testing.assert_allclose(greedy["cost"], c_rows.loc[greedy.index, "cost"], atol=1e-12)
    budgets = pq.read_table(out / "budgets.parquet").to_pandas()
    est = estimate_from_model(load(dirs["ot"]), read_bon_set(world["id/bon"]), "ot")
    curve = est.success_curve()
    rows = np.arange(curve.shape[0])
    for c in summary.loc[summary.allocation == "C", "C"].unique():
        pick = (budgets.method == "ot") & (budgets["C"] == c)
        rule = budgets[pick & (budgets.allocation == "C")]["n"].to_numpy()
        best = budgets[pick & (budgets.allocation == "greedy")]["n"].to_numpy()
        assert curve[rows, best - 1].sum() >= curve[rows, rule - 1].sum() - 1e-9
    # without the flag the contract's three sweeps only (checked above), and meta records it
    assert json.loads((out / "ias_meta.json").read_text())["greedy"] is True


def test_vote_rules_refuse_a_v1_set_and_auto_writes_pays(setup, tmp_path, capsys):
    from dprm.data import read_bon_set
    from dprm.data.contract import write_bon_set

    root, world, dirs = setup
    bon = read_bon_set(world["id/bon"])
    v1 = write_bon_set(
        tmp_path / "v1",
        bon.questions,
        np.asarray(bon.hidden),
        bon.responses[["question_id", "response_id", "prm_score", "correct"]],
    )
    rc = main(["ias", "--bon", str(v1), "--rule", "majority", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "contract v1" in err and "\n" not in err
    assert main(["ias", "--bon", str(v1), "--out", str(tmp_path / "plain"), "--quiet",
                 "--mc-trials", "0"]) == 0  # fmt: skip
    out = tmp_path / "auto"
    argv = ["ias", "--bon", str(world["id/bon"]), "--train-bon", str(world["train/bon"]),
            "--rule", "highest-last", "--rule", "majority", "--model", str(dirs["ot"]),
            "--out", str(out), "--mc-trials", "0", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    summary = pd.read_csv(out / "ias.csv")
    assert {"auto", "uniform", "oracle", "beta-cal"} <= set(summary["allocation"])
    pays = pd.read_csv(out / "pays.csv")
    assert set(pays.loc[pays["allocation"] == "auto", "method"]) == {"base", "ot"}


def test_sequential_rows_and_its_missing_training_set(setup, tmp_path, capsys):
    root, world, dirs = setup
    out = tmp_path / "nope"
    argv = ["ias", "--bon", str(world["id/bon"]), "--sequential", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--sequential needs --train-bon" in err and "\n" not in err
    assert not out.exists()  # refused before --out was claimed
    out = tmp_path / "seq"
    argv = ["ias", "--bon", str(world["id/bon"]), "--train-bon", str(world["train/bon"]),
            "--sequential", "--model", str(dirs["ot"]), "--out", str(out),
            "--mc-trials", "0", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    summary = pd.read_csv(out / "ias.csv")
    seq = summary[summary["allocation"] == "auto-seq"]
    assert set(seq["method"]) >= {"ot"} and seq["accuracy"].between(0, 1).all()
    assert json.loads((out / "ias_meta.json").read_text())["sequential"] is True


def test_peers_beside_auto_seq(setup, tmp_path, capsys):
    root, world, dirs = setup
    out = tmp_path / "nope"
    argv = ["ias", "--bon", str(world["id/bon"]), "--peers", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--peers needs --train-bon" in err and "\n" not in err
    assert not out.exists()
    out = tmp_path / "peers"
    argv = ["ias", "--bon", str(world["id/bon"]), "--train-bon", str(world["train/bon"]),
            "--peers", "--model", str(dirs["ot"]), "--out", str(out), "--mc-trials", "0",
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    # the peers' table is printed, and the wrote line names every file written
    assert "peers beside auto-seq, rule highest-last" in printed
    assert "auto-seq[none]" in printed and "PRM passes/q (500 / 5000)" in printed
    wrote = next(line for line in printed.splitlines() if line.startswith("wrote"))
    for name in ("ias.csv", "ias_full.csv", "budgets.parquet", "uniform.csv", "pays.csv",
                 "peers.csv", "peer_curves.csv", "ias_meta.json"):  # fmt: skip
        assert name in wrote and (out / name).exists(), name
    meta = json.loads((out / "ias_meta.json").read_text())
    assert "separate Monte Carlo from pays.csv" in meta["extra_files"]["peers.csv"]
    peers = pd.read_csv(out / "peers.csv")
    # the costs beside the draws: the vote peers read no labels; calibrated auto-seq reads
    # the training pools' labels (the calibrator here records no training-set size: NaN)
    by = peers.set_index("method")
    assert by.loc["adaptive-consistency", "labelled_samples"] == 0
    assert np.isnan(by.loc["auto-seq[calibrated]", "labelled_samples"])
    assert by.loc["auto-seq[none]", "labelled_samples"] > 0
    expected = {"uniform", "adaptive-consistency", "esc-4", "esc-8", "vote-lead", "score-raw",
                "score-calibrated", "beacon", "pandora", "auto-seq[calibrated]", "auto-seq[base]",
                "auto-seq[none]", "auto-seq[truth]"}  # fmt: skip
    assert set(peers["method"]) == expected and set(peers["rule"]) == {"highest-last"}
    assert peers["acc_at_0.25"].between(0, 1).all()
    curves = pd.read_csv(out / "peer_curves.csv")
    uni = curves[curves["method"] == "uniform"]
    assert np.allclose(uni["draws"], np.minimum(uni["knob"], 64))  # exactly matched budgets


def test_ias_prints_the_equal_cost_table(setup, tmp_path, capsys):
    root, world, dirs = setup
    out = tmp_path / "printed"
    argv = ["ias", "--bon", str(world["id/bon"]), "--train-bon", str(world["train/bon"]),
            "--sequential", "--model", str(dirs["ot"]), "--out", str(out),
            "--mc-trials", "0", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "does adaptive compute pay? accuracy at equal cost, rule highest-last" in text
    header = next(line for line in text.splitlines() if "allocation" in line)
    assert header.split()[2:] == ["cost", "0.05", "cost", "0.1", "cost", "0.25"]
    pays = pd.read_csv(out / "pays.csv")
    pays = pays[pays["rule"] == "highest-last"]
    rows = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in ("uniform", "oracle"):
            rows[(parts[0], "")] = parts[1:]
        elif parts and parts[0] in ("C", "auto", "auto-seq"):
            rows[(parts[0], parts[1])] = parts[2:]
    assert {("uniform", ""), ("oracle", ""), ("auto", "ot"), ("auto-seq", "ot")} <= set(rows)
    assert any(allocation == "C" for allocation, _ in rows)
    for (allocation, method), cells in rows.items():
        values = [c for c in cells if not c.startswith("(")]
        for cost, shown in zip((0.05, 0.1, 0.25), values, strict=True):
            at = pays[(pays["allocation"] == allocation) & np.isclose(pays["cost"], cost)]
            if method:
                at = at[at["method"] == method]
            if shown == "-":
                assert at.empty or at["accuracy"].isna().all()
            else:
                assert shown == f"{at['accuracy'].iloc[0]:.3f}", (allocation, method, cost)


def test_the_printed_peers_table_marks_a_fallback():
    from dprm.cli.ias import peers_table

    rows = pd.DataFrame({
        "rule": ["majority", "majority"], "method": ["vote-lead", "auto-seq[calibrated]"],
        "falls_back_to": [np.nan, "vote-lead"], "draws_to_u64": [20.0, np.nan],
        "acc_at_0.1": [0.81, 0.81], "labelled_samples": [0.0, 1200.0],
        "prm_passes_q500": [0.0, 3.4], "prm_passes_q5000": [0.0, 1.24],
    })  # fmt: skip
    text = peers_table(rows)
    line = next(x for x in text.splitlines() if "auto-seq[calibrated]" in x)
    assert "(falls back to vote-lead)" in line and "not reached" in line
    assert "3.4 / 1.2" in line and "1200" in line
    assert "falls back" not in next(x for x in text.splitlines() if "vote-lead " in x[:20])
