"""``dprm train`` / ``dprm predict`` (contract) and the Python API that mirrors them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import dprm
from dprm.cli import build_parser, main
from dprm.data import read_calibration_set
from dprm.models import REGISTRY

pytestmark = pytest.mark.usefixtures("one_thread")


FAST = ["--set", "max_steps=40", "--set", "eval_every=20", "--set", "warmup_steps=20"]


def train(world, out, method, *extra):
    args = [
        "train",
        "--method",
        method,
        "--data",
        str(world["id/calib"]),
        "--out",
        str(out),
        "--quiet",
    ]
    return main(args + list(extra))


@pytest.mark.parametrize("method", ["ot", "qr", "mono", "base"])
def test_train_writes_calibrator_dir_and_predict_matches_api(world, tmp_path, method):
    out = tmp_path / method
    assert train(world, out, method, "--seed", "2", *([] if method == "base" else FAST)) == 0
    files = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "history.json", "run.json"} <= files
    run = json.loads((out / "run.json").read_text())
    assert run["seed"] == 2 and run["method"] == method and run["dprm_version"] == dprm.__version__
    assert run["data"] == str(world["id/calib"])
    if method != "base":
        assert run["resolved_config"]["max_steps"] == 40
        assert json.loads((out / "history.json").read_text())[-1]["step"] == 40
    levels = "0,0.5,1" if method == "qr" else "0,0.25,0.5,0.9"
    npy = tmp_path / "q.npy"
    assert (
        main(
            [
                "predict",
                "--model",
                str(out),
                "--data",
                str(world["ood/calib"]),
                "--levels",
                levels,
                "--out",
                str(npy),
                "--batch-size",
                "50",
                "--quiet",
            ]
        )
        == 0
    )
    pred = np.load(npy)
    data = read_calibration_set(world["ood/calib"])
    model = dprm.load(out)
    expected = model.quantiles(
        data.hidden,
        [float(t) for t in levels.split(",")],
        data.records["prm_score"].to_numpy(),
        batch_size=50,
    )
    assert pred.dtype == np.float32 and pred.shape == (len(data), len(levels.split(",")))
    np.testing.assert_array_equal(pred, expected)
    assert (
        main(
            [
                "evaluate",
                "--data",
                str(world["ood/calib"]),
                "--model",
                str(out),
                "--out",
                str(tmp_path / "m.json"),
                "--quiet",
            ]
        )
        == 0
    )


def test_method_choices_come_from_the_registry():
    parser = build_parser()
    train_parser = parser._subparsers._group_actions[0].choices["train"]
    method = next(a for a in train_parser._actions if a.dest == "method")
    assert set(method.choices) == set(REGISTRY) | {"best-tuned"}  # dprm tune's best


def test_config_file_and_overrides(world, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(
        "[mono]\nmax_steps = 30\neval_every = 10\nwarmup_steps = 10\ncontext_dim = 8\n"
    )
    out = tmp_path / "m"
    assert train(world, out, "mono", "--config", str(config), "--set", "max_steps=20") == 0
    resolved = json.loads((out / "run.json").read_text())["resolved_config"]
    assert resolved["max_steps"] == 20 and resolved["context_dim"] == 8
    assert train(world, tmp_path / "bad", "mono", "--set", "no_such_key=1") == 2
    assert not (tmp_path / "bad").exists()


def test_predict_rejects_untrained_levels_for_qr(world, tmp_path):
    out = tmp_path / "qr"
    assert train(world, out, "qr", *FAST) == 0
    npy = tmp_path / "q.npy"
    code = main(
        [
            "predict",
            "--model",
            str(out),
            "--data",
            str(world["id/calib"]),
            "--levels",
            "0.25",
            "--out",
            str(npy),
            "--quiet",
        ]
    )
    assert code == 2 and not npy.exists()


def test_collapse_exits_nonzero_and_writes_nothing(world, tmp_path, monkeypatch, capsys):
    cls = REGISTRY["ot"]
    original = cls.fit_model.__func__

    def collapsing(klass, train_set, val, config, seed, progress):
        model, history = original(klass, train_set, val, config, seed, progress)
        with torch.no_grad():
            for net, _ in model.potentials:  # every member of the ensemble (Q is their mean)
                for p in net.parameters():
                    p.zero_()
                net.marginal_scale.bias.fill_(-60.0)
                net.picnn.curvature.bias.fill_(-60.0)
        return model, history

    monkeypatch.setattr(cls, "fit_model", classmethod(collapsing))
    out = tmp_path / "collapsed"
    assert train(world, out, "ot", *FAST) == 3
    assert not out.exists()
    assert "collapsed" in capsys.readouterr().err


#: a mono map that never leaves the identity T(tau) = tau: worse than the raw score
BAD_MONO = {"max_steps": "1", "eval_every": "1", "init_marginal": "false"}


def test_train_prints_the_comparison_with_the_raw_score(world, tmp_path, capsys):
    out = tmp_path / "platt"
    assert main(["train", "--method", "platt", "--data", str(world["id/calib"]),
                 "--out", str(out), "--no-progress"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "validation Brier" in text and "raw PRM" in text and "platt" in text
    assert "not worse beyond noise" in text


def test_best_tuned_never_returns_a_calibrator_worse_than_the_raw_score(
    exact_raw_set, tmp_path, capsys
):
    """A search whose best method is an untrained map, on data where the raw score is the
    label itself: best-tuned saves the raw score and says so."""
    search = tmp_path / "search"
    search.mkdir()
    best = {"select": "wql", "data": str(exact_raw_set),
            "methods": {"mono": {"overrides": BAD_MONO, "validation": {"wql": 0.01}, "trial": 0}}}  # fmt: skip
    (search / "best.json").write_text(json.dumps(best))
    out = tmp_path / "m"
    args = ["train", "--method", "best-tuned", "--tune", str(search), "--data",
            str(exact_raw_set), "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "mono is worse than the raw PRM score" in text
    assert "saved the raw-score calibrator (base) instead; use the raw score here" in text
    config = json.loads((out / "config.json").read_text())
    assert config["method"] == "base"
    assert (
        config["info"]["do_no_harm"]["fell_back"]
        and config["info"]["best_tuned"]["chosen"] == "mono"
    )
    run = json.loads((out / "run.json").read_text())
    assert run["method"] == "base" and run["fitted_method"] == "mono"
    # --do-no-harm off keeps the fit (and still says it is worse)
    keep = tmp_path / "keep"
    sets = [x for k, v in BAD_MONO.items() for x in ("--set", f"{k}={v}")]
    assert main(["train", "--method", "mono", *sets, "--data", str(exact_raw_set),
                 "--out", str(keep), "--no-progress"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "consider the raw score" in text
    assert json.loads((keep / "config.json").read_text())["method"] == "mono"
