"""``dprm tune`` and ``dprm train --method best-tuned`` (CLI contract)."""

from __future__ import annotations

import csv
import json
import re

import pytest

pytest.importorskip("optuna")

from dprm.cli import main  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = ["--trials", "2", "--max-steps", "20", "--quiet"]


@pytest.fixture(scope="module")
def calib(tiny_world):
    return str(tiny_world()["train/calib"])


@pytest.fixture(scope="module")
def search(calib, tmp_path_factory):
    out = tmp_path_factory.mktemp("tune") / "search"
    assert main(["tune", "--data", calib, "--out", str(out), "--methods", "qr,mono", *FAST]) == 0
    return out


def test_tune_writes_best_trials_and_tuned_calibrators(search, calib):
    best = json.loads((search / "best.json").read_text())
    assert set(best["methods"]) == {"qr", "mono"}
    assert best["select"] == "wql" and best["settings"]["trials"] == 2
    scores = {m: e["validation"]["wql"] for m, e in best["methods"].items()}
    assert best["best_method"] == min(scores, key=scores.get)
    for method, entry in best["methods"].items():
        assert entry["trials"]["complete"] + entry["trials"]["pruned"] == 2
        config = json.loads((search / method / "config.json").read_text())
        assert config["method"] == method and config["info"]["tune"]["trial"] == entry["trial"]
        assert (search / method / "run.json").exists()
    with open(search / "trials.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 and {r["method"] for r in rows} == {"qr", "mono"}
    assert (search / "study.db").exists()


def test_rerun_resumes_and_adds_only_missing_trials(search, calib):
    args = ["tune", "--data", calib, "--out", str(search), "--methods", "qr,mono", *FAST]
    assert main(args) == 0  # nothing to do: the search is complete
    with open(search / "trials.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 4
    more = [a if a != "2" else "3" for a in args]  # --trials 3: one more trial per method
    assert main(more) == 0
    best = json.loads((search / "best.json").read_text())
    assert all(
        e["trials"]["complete"] + e["trials"]["pruned"] == 3 for e in best["methods"].values()
    )
    with open(search / "trials.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 6


def test_changed_settings_need_overwrite(search, calib, tmp_path, capsys):
    other = tmp_path / "s"
    base = ["tune", "--data", calib, "--out", str(other), "--methods", "qr", "--trials", "1"]
    assert main([*base, "--max-steps", "20", "--quiet"]) == 0
    capsys.readouterr()
    assert main([*base, "--max-steps", "10", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other settings" in err[0] and "--overwrite" in err[0]
    assert main([*base, "--max-steps", "10", "--quiet", "--overwrite"]) == 0
    best = json.loads((other / "best.json").read_text())
    assert best["methods"]["qr"]["overrides"]["max_steps"] == 10


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--methods", "qr,platt"], "tunable methods"),
        (["--data", "/nonexistent/calib"], "/nonexistent/calib"),
    ],
)
def test_bad_input_is_one_line(calib, tmp_path, capsys, extra, message):
    args = ["tune", "--data", calib, "--out", str(tmp_path / "o"), *FAST]
    for i in range(0, len(extra), 2):
        if extra[i] in args:
            args[args.index(extra[i]) + 1] = extra[i + 1]
        else:
            args += extra[i : i + 2]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("dprm tune: error:")


def test_out_that_is_a_file_is_refused_before_work(calib, tmp_path, capsys):
    path = tmp_path / "file"
    path.write_text("x")
    assert main(["tune", "--data", calib, "--out", str(path), *FAST]) == 2
    assert "expected a directory" in capsys.readouterr().err


def test_train_best_tuned_picks_the_best_validation_method(search, calib, tmp_path):
    best = json.loads((search / "best.json").read_text())
    out = tmp_path / "best-tuned"
    args = ["train", "--method", "best-tuned", "--tune", str(search), "--data", calib]
    assert main([*args, "--out", str(out), "--quiet"]) == 0
    config = json.loads((out / "config.json").read_text())
    chosen = best["best_method"]
    assert config["method"] == chosen == config["info"]["best_tuned"]["chosen"]
    scores = config["info"]["best_tuned"]["scores"]
    assert scores == {m: e["validation"]["wql"] for m, e in best["methods"].items()}
    assert all(scores[chosen] <= s for s in scores.values())
    for key, value in best["methods"][chosen]["overrides"].items():
        assert config["config"][key] == value
    # same data and seed as the search: the refit is the tuned calibrator itself
    tuned = json.loads((search / chosen / "config.json").read_text())
    assert config["weights_sha256"] == tuned["weights_sha256"]


def test_train_method_auto_is_the_earlier_spelling_of_best_tuned(search, calib, tmp_path, capsys):
    """``--method auto`` (the spelling before ``best-tuned``) still trains the same calibrator,
    and ``--help`` lists only the name now."""
    args = ["train", "--tune", str(search), "--data", calib, "--quiet"]
    assert main([*args, "--method", "auto", "--out", str(tmp_path / "old")]) == 0
    assert main([*args, "--method", "best-tuned", "--out", str(tmp_path / "new")]) == 0
    old, new = (json.loads((tmp_path / d / "config.json").read_text()) for d in ("old", "new"))
    assert old["method"] == new["method"] and "best_tuned" in old["info"]
    assert old["weights_sha256"] == new["weights_sha256"]
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = capsys.readouterr().out
    # the method's choices, not the whole text (``--do-no-harm auto`` is another flag's value)
    methods = re.search(r"--method\s*\{([^}]*)\}", help_text).group(1).replace("\n", "")
    methods = {m.strip() for m in methods.split(",")}
    assert "best-tuned" in methods and "auto" not in methods


def test_train_best_tuned_flags(search, calib, tmp_path, capsys):
    base = ["train", "--data", calib, "--out", str(tmp_path / "m"), "--quiet"]
    assert main([*base, "--method", "best-tuned", "--tune", str(search), "--set", "lr=1e-3"]) == 2
    assert "--method best-tuned" in capsys.readouterr().err
    assert main([*base, "--method", "qr", "--tune", str(search)]) == 2
    assert "--tune is only read with --method best-tuned" in capsys.readouterr().err
    (tmp_path / "no_search").mkdir()
    assert main([*base, "--method", "best-tuned", "--tune", str(tmp_path / "no_search")]) == 2
    assert "best.json" in capsys.readouterr().err
    # the model's --out may not lie inside the search it reads
    inside = ["train", "--data", calib, "--out", str(search / "m"), "--quiet"]
    assert main([*inside, "--method", "best-tuned", "--tune", str(search)]) == 2
    assert "lies inside the input --tune" in capsys.readouterr().err


def test_objective_wql_is_stored_and_a_resume_with_another_is_refused(calib, tmp_path, capsys):
    out = tmp_path / "s"
    base = ["tune", "--data", calib, "--out", str(out), "--methods", "qr", "--trials", "1"]
    assert main([*base, "--max-steps", "20", "--quiet"]) == 0  # the default objective: wql
    best = json.loads((out / "best.json").read_text())
    assert best["settings"]["objective"] == "wql"
    assert best["methods"]["qr"]["metric"] == "wql"
    capsys.readouterr()
    assert main([*base, "--max-steps", "20", "--quiet", "--objective", "checkpoint"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other settings (objective)" in err[0] and "--overwrite" in err[0]
    with pytest.raises(SystemExit) as exit_info:  # argparse: usage and one error line
        main([*base, "--max-steps", "20", "--quiet", "--objective", "nll"])
    assert exit_info.value.code == 2
    assert "argument --objective: invalid choice" in capsys.readouterr().err


def test_the_parser_defaults_are_the_library_defaults():
    """cli/tune.py spells them out so that building the parser imports no torch."""
    from dprm.cli import tune as cli_tune
    from dprm.models import tune as T

    assert cli_tune.DEFAULT_METHODS.split(",") == list(T.TUNED_METHODS)
    assert set(cli_tune.OBJECTIVES) == set(T.OBJECTIVES)
    assert cli_tune.DEFAULT_OBJECTIVE == T.DEFAULT_OBJECTIVE


def test_train_best_tuned_prints_the_scores_it_compared(search, calib, tmp_path, capsys):
    best = json.loads((search / "best.json").read_text())
    out = tmp_path / "best-tuned-printed"
    args = [
        "train",
        "--method",
        "best-tuned",
        "--tune",
        str(search),
        "--data",
        calib,
        "--no-progress",
    ]
    assert main([*args, "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if "best-tuned compared validation wql" in line)
    rows = {line.split()[0]: line.split()[1] for line in lines[head + 1 : head + 3]}
    for method, entry in best["methods"].items():
        assert rows[method] == f"{entry['validation']['wql']:.4f}"
    chosen = next(line for line in lines if line.endswith("<- chosen"))
    assert chosen.split()[0] == best["best_method"]


def test_tune_says_why_the_refit_score_differs(search, calib, capsys):
    args = ["tune", "--data", calib, "--out", str(search), "--methods", "qr,mono"]
    assert main([*args, *FAST[:4]]) == 0  # resumed: nothing to train, the summary again
    text = capsys.readouterr().out
    best = json.loads((search / "best.json").read_text())
    for method, entry in best["methods"].items():
        line = next(
            x for x in text.splitlines() if x.startswith(f"dprm tune: {method}: best trial")
        )
        assert f"{entry['value']:.4f}" in line and f"refit {entry['refit_value']:.4f}" in line
        assert "float rounding" in line  # qr, mono: no trial-only setting


def test_refit_note_names_the_trial_only_setting():
    from dprm.cli.tune import refit_note

    note = refit_note("ot", {"trial": 3, "value": 0.0733, "refit_value": 0.0709, "metric": "wql"})
    assert "0.0733" in note and "0.0709" in note and "ensemble_size=1" in note
    assert refit_note("qr", {"trial": 1}) is None
