"""Fault matrix (CLI side): outputs that cannot eat inputs, records checked on read.

Every case here failed on the code before commit 3597380: an input, the working directory or
the home folder deleted by ``--overwrite`` with exit code 0, a user's folder replaced or written
into, two writers racing for one ``--out``, duplicate or empty sets accepted, tracebacks instead
of one-line errors, a ``.NAME.old-PID`` left behind, missing ``--quiet`` / ``--no-progress``.

Each case works on copies under ``tmp_path`` (the shared tiny world is never touched, and the
home folder is a temporary one): on the old code the destructive cases really destroy the copy.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprm.cli import COMMANDS, build_parser, main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from fixtures.cli_errors import one_line_error  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------- fixtures, helpers
@pytest.fixture
def mine(world, model_dir, tmp_path):
    """Private copies of a calibration set, a BoN set, a calibrator and a Park JSON file."""
    root = tmp_path / "w"
    paths = {
        "calib": Path(shutil.copytree(world["id/calib"], root / "calib")),
        "bon": Path(shutil.copytree(world["id/bon"], root / "bon")),
        "model": Path(shutil.copytree(model_dir, tmp_path / "model")),
        "json": tmp_path / "park.jsonl",
    }
    records = [
        {"question": "q", "reasoning_prefix": prefix, "success_prob": prob}
        for prefix, prob in [("", 0.5), ("a", 0.25), ("", 0.75), ("a\n\nb", 0.0)]
    ]
    paths["json"].write_text("".join(json.dumps(r) + "\n" for r in records))
    paths["root"] = root
    return paths


def snapshot(root: Path) -> dict[str, str]:
    """relative path -> sha256 (or 'dir') of everything under ``root`` (or of the file)."""
    root = Path(root)
    items = [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]
    return {
        str(p.relative_to(root)): "dir"
        if p.is_dir()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in items
    }


def train(data, out, *extra: str) -> list[str]:
    return ["train", "--method", "base", "--data", str(data), "--out", str(out), "--quiet", *extra]


def ias(bon, out, *extra: str) -> list[str]:
    return ["ias", "--bon", str(bon), "--out", str(out), "--mc-trials", "0", "--quiet", *extra]


def evaluate(data, out, *extra: str) -> list[str]:
    return ["evaluate", "--data", str(data), "--out", str(out), "--quiet", *extra]


# ----------------------------------------------------------------------------- 1. the output guard
#: case -> (argv builder, the path the message must name besides --out, what must survive)
GUARD_CASES = {
    # `dprm train --data W/calib --out W/calib --overwrite` deleted the input
    "train-out-is-data": lambda m: (
        train(m["calib"], m["calib"], "--overwrite"),
        m["calib"],
        m["calib"],
        m["calib"],
    ),
    # `--out W` deleted the whole world
    "train-out-contains-data": lambda m: (
        train(m["calib"], m["root"], "--overwrite"),
        m["root"],
        m["calib"],
        m["root"],
    ),
    # a model written into the calibration set's folder
    "train-out-inside-data": lambda m: (
        train(m["calib"], m["calib"] / "model"),
        m["calib"] / "model",
        m["calib"],
        m["calib"],
    ),
    # `..` in --out: the same folder under another spelling
    "train-out-dotdot-is-data": lambda m: (
        train(m["calib"], m["calib"] / ".." / "calib", "--overwrite"),
        m["calib"] / ".." / "calib",
        m["calib"],
        m["calib"],
    ),
    # `ias --out` = `--bon`
    "ias-out-is-bon": lambda m: (
        ias(m["bon"], m["bon"], "--overwrite"),
        m["bon"],
        m["bon"],
        m["bon"],
    ),
    # `evaluate --out INPUT/records.parquet`
    "evaluate-out-in-data": lambda m: (
        evaluate(m["calib"], m["calib"] / "records.parquet", "--overwrite"),
        m["calib"] / "records.parquet",
        m["calib"],
        m["calib"],
    ),
    # `evaluate --out MODEL/x.json` (the --model directories are inputs too)
    "evaluate-out-in-model": lambda m: (
        evaluate(m["calib"], m["model"] / "config.json", "--model", str(m["model"]), "--overwrite"),
        m["model"] / "config.json",
        m["model"],
        m["model"],
    ),
    # `predict --out MODEL/model.safetensors`
    "predict-out-in-model": lambda m: (
        ["predict", "--model", str(m["model"]), "--data", str(m["calib"]), "--levels", "0.5"]
        + ["--out", str(m["model"] / "model.safetensors"), "--overwrite", "--quiet"],
        m["model"] / "model.safetensors",
        m["model"],
        m["model"],
    ),
    # `import-park --out` = `--json`
    "import-park-out-is-json": lambda m: (
        ["import-park", "--json", str(m["json"]), "--out", str(m["json"]), "--overwrite"],
        m["json"],
        m["json"],
        m["json"],
    ),
}


@pytest.mark.parametrize("case", sorted(GUARD_CASES))
def test_out_never_eats_an_input(mine, capsys, case):
    argv, out, source, keep = GUARD_CASES[case](mine)
    before = snapshot(keep)
    assert main(argv) == 2
    one_line_error(capsys, str(out), str(source))
    assert snapshot(keep) == before


def test_out_symlinked_to_an_input_is_refused(mine, tmp_path, capsys):
    link = tmp_path / "link"
    link.symlink_to(mine["calib"], target_is_directory=True)
    before = snapshot(mine["calib"])
    assert main(train(mine["calib"], link, "--overwrite")) == 2
    one_line_error(capsys, str(link), str(mine["calib"]))
    assert snapshot(mine["calib"]) == before and link.is_symlink()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A throw-away home folder (never the real one) holding a file of the user's."""
    folder = tmp_path / "home"
    folder.mkdir()
    (folder / "thesis.tex").write_text("three years of work")
    monkeypatch.setenv("HOME", str(folder))
    return folder


@pytest.mark.parametrize("spelling", ["~", "trailing-slash"])
def test_out_is_the_home_folder(mine, home, capsys, spelling):
    """`--out ~ --overwrite` emptied the home folder (the shell expands ~)."""
    out = os.path.expanduser("~") if spelling == "~" else f"{home}/"
    assert Path.home() == home
    before = snapshot(home)
    assert main(ias(mine["bon"], out, "--overwrite")) == 2
    one_line_error(capsys, str(home), "home folder")
    assert snapshot(home) == before


def test_out_contains_the_home_folder(mine, home, capsys):
    before = snapshot(home)
    assert main(ias(mine["bon"], home.parent / ".." / home.parent.name, "--overwrite")) == 2
    one_line_error(capsys, str(home))
    assert snapshot(home) == before


@pytest.mark.parametrize("spelling", [".", "cwd"])
def test_out_is_the_working_directory(mine, tmp_path, monkeypatch, capsys, spelling):
    """`--out "$(pwd)" --overwrite` emptied the working directory; `--out .` was a traceback."""
    cwd = tmp_path / "project"
    cwd.mkdir()
    (cwd / "notes.md").write_text("mine")
    monkeypatch.chdir(cwd)
    out = "." if spelling == "." else str(cwd)
    before = snapshot(cwd)
    assert main(ias(mine["bon"], out, "--overwrite")) == 2
    one_line_error(capsys, out, str(cwd.resolve()))
    assert snapshot(cwd) == before


def test_out_is_a_filesystem_root(mine, tmp_path, monkeypatch, capsys):
    """A mount point (here: a folder the test declares one) is never replaced."""
    mount = tmp_path / "disk"
    mount.mkdir()
    (mount / "data.bin").write_text("a whole disk")
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == mount or real_ismount(p))
    before = snapshot(mount)
    assert main(ias(mine["bon"], mount, "--overwrite")) == 2
    one_line_error(capsys, str(mount), "root")
    assert snapshot(mount) == before


def test_guard_refuses_the_root_itself():
    from dprm.io import OutputError, guard_output

    with pytest.raises(OutputError, match="filesystem root"):
        guard_output("/")
    with pytest.raises(OutputError, match="filesystem root"):
        guard_output("/tmp/../")


# ----------------------------------------------------------------------------- 2. only dprm's own
@pytest.mark.parametrize("kind", ["dir", "file"])
def test_overwrite_refuses_what_dprm_did_not_write(mine, tmp_path, capsys, kind):
    """--overwrite replaced any folder or file the user named."""
    out = tmp_path / "results"
    if kind == "dir":
        out.mkdir()
        (out / "figure.pdf").write_text("the user's")
        argv = train(mine["calib"], out, "--overwrite")
    else:
        out = out.with_suffix(".json")
        out.write_text('{"brier": 0.1}')
        argv = evaluate(mine["calib"], out, "--overwrite")
    before = snapshot(out)
    assert main(argv) == 2
    one_line_error(capsys, str(out), "not written by dprm")
    assert snapshot(out) == before


def test_overwrite_refuses_a_dprm_file_the_user_edited(mine, tmp_path, capsys):
    out = tmp_path / "metrics.json"
    assert main(evaluate(mine["calib"], out)) == 0
    out.write_text(out.read_text().replace("base", "my-edit"))
    before = snapshot(out)
    assert main(evaluate(mine["calib"], out, "--overwrite")) == 2
    one_line_error(capsys, str(out))
    assert snapshot(out) == before


@pytest.fixture
def fake_pipelines(monkeypatch):
    """reproduce / run with their pipelines replaced by a writer of report.md: the CLI's own
    checks are what is tested (the real pipelines take minutes)."""
    calls: list[Path] = []

    def fake(out, *args, **kwargs):
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text("# dprm reproduction\n")
        calls.append(out)
        return types.SimpleNamespace(failures=[], report=out / "report.md")

    import dprm.orchestrate.reproduce
    import dprm.recipe

    monkeypatch.setattr(dprm.orchestrate.reproduce, "reproduce", fake)
    monkeypatch.setattr(dprm.recipe, "run_recipe", lambda recipe, out, **kw: fake(out))
    return calls


def _recipe(tmp_path, monkeypatch, out: Path) -> Path:
    import dprm.recipe

    path = tmp_path / "recipe.toml"
    path.write_text("[run]\n")
    recipe = types.SimpleNamespace(run=types.SimpleNamespace(out=str(out)))
    monkeypatch.setattr(dprm.recipe, "load_recipe", lambda p: recipe)
    # a stand-in recipe has no stages, so nothing for the preflight to check
    monkeypatch.setattr("dprm.recipe.preflight.missing_requirements", lambda *a, **k: [])
    return path


def _user_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "paper"
    (folder / "tables").mkdir(parents=True)
    (folder / "report.md").write_text("my draft")
    (folder / "results.json").write_text("{}")
    (folder / "tables" / "t1.csv").write_text("a,b\n")
    return folder


@pytest.mark.parametrize("command", ["reproduce", "run"])
def test_resumable_runs_refuse_a_folder_they_did_not_create(
    tmp_path, monkeypatch, capsys, fake_pipelines, command
):
    """reproduce wrote report.md, results.json and tables/ into any existing folder."""
    out = _user_folder(tmp_path)
    before = snapshot(out)
    if command == "reproduce":
        argv = ["reproduce", "--grid", "demo", "--out", str(out), "--quiet"]
    else:
        argv = ["run", str(_recipe(tmp_path, monkeypatch, out)), "--out", str(out), "--quiet"]
    assert main(argv) == 2
    one_line_error(capsys, str(out))
    assert snapshot(out) == before and fake_pipelines == []


def test_reproduce_refuses_a_run_folder(tmp_path, monkeypatch, capsys, fake_pipelines):
    """reproduce over a `dprm run` output wrote into it."""
    out = tmp_path / "run-out"
    recipe = _recipe(tmp_path, monkeypatch, tmp_path / "elsewhere")
    assert main(["run", str(recipe), "--out", str(out), "--quiet"]) == 0
    before = snapshot(out)
    assert main(["reproduce", "--grid", "demo", "--out", str(out), "--quiet"]) == 2
    one_line_error(capsys, str(out), "run")
    assert snapshot(out) == before and fake_pipelines == [out]


def test_reproduce_claims_an_empty_folder_and_resumes_its_own(tmp_path, fake_pipelines):
    out = tmp_path / "empty"
    out.mkdir()
    argv = ["reproduce", "--grid", "demo", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    marker = json.loads((out / ".dprm-output.json").read_text())
    assert marker["command"] == "reproduce" and marker["written_by"] == "dprm"
    assert main(argv) == 0  # its own folder: resumed
    assert fake_pipelines == [out, out]


# ----------------------------------------------------------------------------- 3. one writer
def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_second_writer_to_one_out_is_refused_naming_the_first(mine, tmp_path, capsys):
    """Two writers to one new --out: the last to finish silently replaced the other's model."""
    out = tmp_path / "model-out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    argv = ["train", "--method", "ot", "--data", str(mine["calib"]), "--out", str(out)]
    first = subprocess.Popen(
        [sys.executable, "-m", "dprm.cli", *argv, "--set", "max_steps=100000"]
        + ["--set", "eval_every=100000"],
        preexec_fn=_default_sigint,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        seen = ""
        while "step" not in seen:  # the first writer is training: it holds --out
            chunk = first.stderr.read(1)
            assert chunk, "the first dprm train ended before training started"
            seen += chunk
        assert main(train(mine["calib"], out)) == 2
        one_line_error(capsys, str(out), f"pid {first.pid}")
        assert not out.exists()  # the second wrote nothing
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
    assert first.returncode == 130


# ----------------------------------------------------------------------------- 4. records on read
def _rewrite_calibration(path: Path, edit) -> None:
    records = pd.read_parquet(path / "records.parquet")
    hidden = np.load(path / "hidden_states.npy")
    records, hidden = edit(records, hidden)
    records.to_parquet(path / "records.parquet", index=False)
    np.save(path / "hidden_states.npy", hidden)


def _repeat_row(records, hidden):
    return (
        pd.concat([records, records.iloc[[3]]], ignore_index=True),
        np.concatenate([hidden, hidden[[3]]]),
    )


def _conflicting_row(records, hidden):
    records, hidden = _repeat_row(records, hidden)
    last = len(records) - 1
    n = int(records.loc[last, "n_rollouts"])
    old = float(records.loc[last, "success_prob"])
    records.loc[last, "success_prob"] = np.float32(0.0 if old > 0 else 1.0 / n)
    return records, hidden


def _empty(records, hidden):
    return records.iloc[:0], hidden[:0]


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (_repeat_row, ["records.parquet", "repeated", "rows 3 and"]),
        (_conflicting_row, ["records.parquet", "conflicting", "success_prob"]),
        (_empty, ["records.parquet", "no rows"]),
    ],
    ids=["repeated-step", "conflicting-step", "empty"],
)
def test_bad_calibration_records_are_refused(mine, tmp_path, capsys, edit, words):
    """Duplicates passed silently; an empty set gave exit 0 with every metric null."""
    _rewrite_calibration(mine["calib"], edit)
    out = tmp_path / "metrics.json"
    assert main(evaluate(mine["calib"], out)) == 2
    one_line_error(capsys, str(mine["calib"]), *words)
    assert not out.exists()


def test_duplicate_bon_responses_are_refused(mine, tmp_path, capsys):
    path = mine["bon"] / "responses.parquet"
    responses = pd.read_parquet(path)
    pd.concat([responses, responses.iloc[[5]]], ignore_index=True).to_parquet(path, index=False)
    out = tmp_path / "ias"
    assert main(ias(mine["bon"], out)) == 2
    one_line_error(capsys, str(path), "repeated", "rows 5 and", "question_id", "response_id")
    assert not out.exists()


def test_empty_bon_set_is_refused_with_its_path(mine, tmp_path, capsys):
    """An empty BoN set was a traceback."""
    bon = mine["bon"]
    for name in ("questions.parquet", "responses.parquet"):
        pd.read_parquet(bon / name).iloc[:0].to_parquet(bon / name, index=False)
    np.save(bon / "hidden_states.npy", np.load(bon / "hidden_states.npy")[:0])
    out = tmp_path / "ias"
    assert main(ias(bon, out)) == 2
    one_line_error(capsys, str(bon), "no rows")
    assert not out.exists()


# ----------------------------------------------------------------------------- 5. one-line errors
@pytest.mark.parametrize("fault", ["SafetensorError", "ENOSPC"])
def test_full_disk_during_train_is_one_line_naming_the_out(
    mine, tmp_path, monkeypatch, capsys, fault
):
    """A full disk while saving the model was a SafetensorError traceback."""
    import safetensors.torch
    from safetensors import SafetensorError

    def full_disk(*args, **kwargs):
        if fault == "ENOSPC":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        raise SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No '
            'space left on device" })'
        )

    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    out = tmp_path / "trained"
    assert main(train(mine["calib"], out)) == 2
    one_line_error(capsys, str(out), "space left on device")
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp, no lock


def test_solve_vllm_without_vllm_is_one_line(tmp_path, monkeypatch, capsys):
    """`solve --backend vllm` without vLLM: exit 1 and a traceback."""
    monkeypatch.setitem(sys.modules, "vllm", None)  # not installed, whatever this machine has
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": "a", "question": "1+1?", "answer": "2"}) + "\n")
    argv = ["solve", "--mode", "bon", "--questions", str(questions), "--generator", "gen"]
    argv += ["--prm", "prm", "--calibrator", "cal", "--out", str(tmp_path / "run")]
    assert main([*argv, "--backend", "vllm"]) == 2
    one_line_error(capsys, "vllm", "vLLM is not installed", "--backend transformers")
    assert not (tmp_path / "run").exists()


def test_symlinked_out_leaves_nothing_behind(mine, tmp_path):
    """A symlinked --out left `.NAME.old-PID` after the swap."""
    real = tmp_path / "real"
    assert main(ias(mine["bon"], real)) == 0
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    assert main(ias(mine["bon"], link, "--overwrite", "--beta", "0.2")) == 0
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert json.loads((real / "ias_meta.json").read_text())["beta"] == 0.2  # replaced in place
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert left == [], left


# ----------------------------------------------------------------------------- 6. flags
def _subparsers() -> dict[str, object]:
    parser = build_parser()
    return parser._subparsers._group_actions[0].choices


def test_every_command_has_quiet_and_no_progress():
    """docs/cli.md: every command has both (reproduce lacked --no-progress, import-park
    --quiet, the pipeline stages, run, merge and doctor one or both)."""
    parsers = _subparsers()
    missing = {
        name: sorted({"--quiet", "--no-progress"} - flags)
        for name in COMMANDS
        if {"--quiet", "--no-progress"}
        - (flags := {s for a in parsers[name]._actions for s in a.option_strings})
    }
    assert missing == {}


def test_import_park_quiet_prints_nothing(mine, tmp_path, capsys):
    out = tmp_path / "labels.parquet"
    assert main(["import-park", "--json", str(mine["json"]), "--out", str(out), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "" and out.exists()
