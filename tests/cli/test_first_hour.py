"""What a new user meets first: printed summaries, names that work everywhere, warnings and
messages where they are seen (evaluate's table, named question sets, doctor's one-line help,
the Ctrl-C line, applying a calibrator to another world's data)."""

from __future__ import annotations

import json
import sys

import pytest

from dprm.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = ["--set", "max_steps=20", "--set", "eval_every=10", "--set", "warmup_steps=10"]


def _train(calib, out, method="qr") -> None:
    argv = ["train", "--method", method, "--data", str(calib), "--out", str(out), "--quiet"]
    assert main([*argv, *(FAST if method != "base" else [])]) == 0


def test_evaluate_prints_a_metrics_table_and_writes_json(tiny_world, tmp_path, capsys):
    world = tiny_world("r1-qwen-7b__qwen-prm")
    _train(world["train/calib"], tmp_path / "qr")
    out = tmp_path / "metrics.json"
    argv = ["evaluate", "--data", str(world["id/calib"]), "--model", str(tmp_path / "qr")]
    assert main([*argv, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert not text.lstrip().startswith("{")  # a table, not the raw JSON
    results = json.loads(out.read_text())
    lines = text.splitlines()
    header = lines[0].split()
    assert header[:5] == ["method", "Brier", "PosBrier", "ECE", "WQL"] and "err.true" in header
    for method in ("base", "qr"):
        row = next(line.split() for line in lines if line.split()[:1] == [method])
        assert row[1] == f"{results[method]['brier']:.4f}"
        wql = results[method]["wql"]
        assert row[4] == ("-" if wql is None else f"{wql:.4f}")
    assert f"-> {out}" in text


def test_a_calibrator_applied_to_another_world_warns(tiny_world, tmp_path, capsys):
    trained_on = tiny_world("r1-qwen-7b__qwen-prm")
    other = tiny_world("llama-3.2-1b__qwen-prm")
    model = tmp_path / "qr"
    _train(trained_on["train/calib"], model)
    config = json.loads((model / "config.json").read_text())
    assert config["info"]["trained_on"] == {"generator": "r1-qwen-7b", "prm": "qwen-prm"}
    same = ["evaluate", "--data", str(trained_on["id/calib"]), "--model", str(model)]
    assert main([*same, "--out", str(tmp_path / "a.json"), "--no-progress"]) == 0
    assert "warning" not in capsys.readouterr().err
    argv = ["evaluate", "--data", str(other["id/calib"]), "--model", str(model)]
    assert main([*argv, "--out", str(tmp_path / "b.json"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "'r1-qwen-7b'" in err and "'llama-3.2-1b'" in err
    assert len(err.strip().splitlines()) == 1
    argv = ["predict", "--model", str(model), "--data", str(other["id/bon"]), "--levels", "0.5"]
    assert main([*argv, "--out", str(tmp_path / "q.npy")]) == 0
    assert "trained on generator 'r1-qwen-7b'" in capsys.readouterr().err


def test_questions_math500train_error_names_math500train(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed: import fails
    assert main(["questions", "math500train", "--out", str(tmp_path / "q.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "math500train" in err and "math-train" not in err
    assert "dprm questions math500train --out" in err


def test_generate_accepts_a_packaged_set_name_like_solve():
    from dprm.cli.generate import read_question_source

    frame = read_question_source("math500")
    assert len(frame) == 500 and list(frame.columns[:3]) == ["question_id", "question", "answer"]
    from dprm.io import DataError

    with pytest.raises(DataError, match="math500"):  # an unknown name lists the known ones
        read_question_source("no-such-set.jsonl")


def test_top_level_help_describes_doctor_as_it_is(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.strip().startswith("doctor"))
    text = " ".join(" ".join(lines[at : at + 3]).split())
    assert "extras installed, then the real PRMs vs published step rewards" in text
    assert "installation and the optional extras" not in text


def test_the_interrupt_message_starts_its_own_line(monkeypatch, tiny_world, tmp_path, capsys):
    import dprm.models.fit as fit_module

    def interrupted(*args, **kwargs):
        sys.stderr.write("\r train:  40%|####      | 8/20")  # a progress bar, no newline
        raise KeyboardInterrupt

    monkeypatch.setattr(fit_module, "fit", interrupted)
    world = tiny_world("r1-qwen-7b__qwen-prm")
    argv = ["train", "--method", "qr", "--data", str(world["id/calib"])]
    assert main([*argv, "--out", str(tmp_path / "m")]) == 130
    err = capsys.readouterr().err
    assert any(line.startswith("dprm train: interrupted") for line in err.split("\n"))
