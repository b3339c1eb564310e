"""Fault-injection matrix of the commands that write: ordinary mistakes and faults.

Each case asserts the exit code, a one-line message naming the file or flag (no traceback), and
that nothing that existed before was lost or altered. Cases marked ``needs models branch``
specify checks made when a calibrator or config is loaded (``dprm.io.DataError`` /
``dprm.config.ConfigError``); the CLI only turns them into exit code 2.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprm.cli import COMMANDS, build_parser, main
from dprm.io import MARKER_FILE, write_json

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from fixtures.cli_errors import one_line_error  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
FAST = ["--set", "max_steps=20", "--set", "eval_every=10", "--set", "warmup_steps=10"]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """relative path -> (sha256 of the content or 'dir', mode) of everything under ``root``."""
    root = Path(root)
    items = [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]
    return {
        str(p.relative_to(root)): (
            "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mode,
        )
        for p in items
    }


def existing_output(tmp_path: Path, kind: str) -> Path:
    """A user's earlier result at the --out path: a directory with a file in it, or a file."""
    path = tmp_path / "precious"
    if kind == "dir":
        path.mkdir()
        (path / "keep.txt").write_text("38 MB of results")
    else:
        path.write_text("results")
    return path


def run_train(world, out, *extra):
    data = str(world["id/calib"])
    return main(["train", "--method", "ot", "--data", data, "--out", str(out), "--quiet", *extra])


def commands_that_write(world, model_dir, out: Path) -> dict[str, list[str]]:
    calib, bon = str(world["id/calib"]), str(world["id/bon"])
    return {
        "train": ["train", "--method", "base", "--data", calib, "--out", str(out), "--quiet"],
        "predict": ["predict", "--model", str(model_dir), "--data", calib, "--levels", "0.5"]
        + ["--out", str(out), "--quiet"],
        "evaluate": ["evaluate", "--data", calib, "--out", str(out), "--quiet"],
        "ias": ["ias", "--bon", bon, "--out", str(out), "--mc-trials", "0", "--quiet"],
        "synth": ["synth", "--preset", "demo", "--size", "tiny", "--out", str(out), "--quiet"],
    }


WRITERS = ["train", "predict", "evaluate", "ias", "synth"]
KIND = {"train": "dir", "predict": "file", "evaluate": "file", "ias": "dir", "synth": "dir"}


# ----------------------------------------------------------------------------- existing outputs
@pytest.mark.parametrize("kind", ["dir", "file"])
@pytest.mark.parametrize("command", WRITERS)
def test_existing_output_is_refused_without_overwrite(
    world, model_dir, tmp_path, capsys, command, kind
):
    """Fails at 62a0d12 (train deleted a directory, the others replaced files silently)."""
    out = existing_output(tmp_path, kind)
    before = snapshot(out)
    rc = main(commands_that_write(world, model_dir, out)[command])
    assert rc == 2
    one_line_error(capsys, str(out))
    assert snapshot(out) == before


@pytest.mark.parametrize("command", WRITERS)
def test_overwrite_replaces_an_output_of_the_same_kind(world, model_dir, tmp_path, command):
    """--overwrite replaces an earlier output of dprm's (and nothing else)."""
    out = tmp_path / "precious"
    argv = commands_that_write(world, model_dir, out)[command]
    assert main(argv) == 0
    if KIND[command] == "dir":
        (out / "keep.txt").write_text("added to dprm's folder")
    inode = out.stat().st_ino
    assert main([*argv, "--overwrite"]) == 0
    assert out.stat().st_ino != inode  # a new output swapped in
    if KIND[command] == "dir":
        assert not (out / "keep.txt").exists() and any(out.iterdir())
    # no temp or lock left; single files are listed in the folder's registry of dprm outputs
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == (
        [] if KIND[command] == "dir" else [".dprm-outputs.json"]
    )


@pytest.mark.parametrize("command", WRITERS)
def test_overwrite_never_swaps_a_file_for_a_directory(world, model_dir, tmp_path, capsys, command):
    other = "file" if KIND[command] == "dir" else "dir"
    out = existing_output(tmp_path, other)
    before = snapshot(out)
    assert main([*commands_that_write(world, model_dir, out)[command], "--overwrite"]) == 2
    one_line_error(capsys, str(out))
    assert snapshot(out) == before


# ----------------------------------------------------------------------------- unwritable targets
@pytest.mark.parametrize("command", WRITERS)
def test_unwritable_target_fails_before_any_work(
    world, model_dir, tmp_path, capsys, monkeypatch, command
):
    """An --out below a regular file cannot be created: refused before data is even read."""
    import pyarrow.parquet

    blocker = tmp_path / "a_file"
    blocker.write_text("x")

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the output was checked")

    # every contract reader opens its tables through read_schema (dprm.data.validation)
    monkeypatch.setattr(pyarrow.parquet, "read_schema", no_work)
    monkeypatch.setattr("dprm.data.synth.write_world", no_work)
    rc = main(commands_that_write(world, model_dir, blocker / "sub" / "out")[command])
    assert rc == 2
    one_line_error(capsys, "a_file")
    assert blocker.read_text() == "x"


@pytest.mark.skipif(IS_ROOT, reason="root writes into read-only directories")
def test_read_only_directory_is_refused_before_training(world, tmp_path, capsys):
    """Fails at 62a0d12 (discovered only after the whole training run, as a traceback)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert run_train(world, ro / "model", *FAST) == 2
        one_line_error(capsys, "read-only")
    finally:
        ro.chmod(0o755)


# ----------------------------------------------------------------------------- permissions
def test_outputs_follow_the_umask(world, model_dir, tmp_path):
    """Fails at 62a0d12: files came out 0600 and directories 0700 under umask 022."""
    old = os.umask(0o022)
    try:
        assert run_train(world, tmp_path / "model", *FAST) == 0
        assert main([*commands_that_write(world, model_dir, tmp_path / "q.npy")["predict"]]) == 0
        assert main([*commands_that_write(world, model_dir, tmp_path / "e.json")["evaluate"]]) == 0
    finally:
        os.umask(old)
    assert (tmp_path / "model").stat().st_mode & 0o777 == 0o755
    for path in [*(tmp_path / "model").iterdir(), tmp_path / "q.npy", tmp_path / "e.json"]:
        assert path.stat().st_mode & 0o777 == 0o644, path


# ----------------------------------------------------------------------------- interrupts
def _default_sigint() -> None:
    # pytest-xdist workers ignore SIGINT, and an ignored signal stays ignored across exec:
    # give the child the disposition a user's terminal gives it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _dprm(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "dprm.cli", *args],
        preexec_fn=_default_sigint,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,
    )


@pytest.mark.slow
def test_sigint_mid_train_then_rerun(world, tmp_path):
    """Fails at 62a0d12: the message claimed 'finished work is kept, rerun to resume'."""
    out = tmp_path / "precious"  # an earlier result of dprm's (--overwrite replaces no other)
    data = str(world["id/calib"])
    assert main(["train", "--method", "base", "--data", data, "--out", str(out), "--quiet"]) == 0
    before = snapshot(out)
    argv = ["train", "--method", "ot", "--data", data, "--out", str(out), "--overwrite"]
    proc = _dprm(*argv, "--set", "max_steps=100000", "--set", "eval_every=100000")
    # Wait until the progress bar counts steps: the training loop is under way (on a loaded
    # machine the first bytes on stderr can come long before it).
    seen = ""
    while "step" not in seen:
        chunk = proc.stderr.read(1)
        assert chunk, "dprm train ended before training started"
        seen += chunk
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    err = seen + err
    assert proc.returncode == 130
    messages = [line for line in err.replace("\r", "\n").splitlines() if "dprm train" in line]
    assert "Traceback" not in err and len(messages) == 1, err
    message = "dprm train:" + messages[0].split("dprm train:", 1)[1]  # after the bar's last \r
    assert message.startswith("dprm train: interrupted; nothing was written")
    assert snapshot(out) == before  # the earlier result is intact
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    rerun = _dprm(*argv, *FAST, "--quiet")
    assert rerun.wait(timeout=120) == 0
    assert (out / "model.safetensors").exists()


# ----------------------------------------------------------------------------- bad settings
@pytest.mark.parametrize(
    ("setting", "key"),
    [("batch_size=0", "batch_size"), ("max_steps=-5", "max_steps"), ("lr=-1", "lr")],
)
def test_bad_numeric_settings_exit_2(world, tmp_path, capsys, setting, key):
    """Needs models branch (range checks in the config dataclasses)."""
    rc = run_train(world, tmp_path / "m", "--set", setting)
    assert rc == 2
    one_line_error(capsys, key)
    assert not (tmp_path / "m").exists()


def test_synth_unknown_preset_is_one_line(tmp_path, capsys):
    """Fails at 62a0d12 (a raw ValueError traceback)."""
    assert main(["synth", "--preset", "foo__bar", "--out", str(tmp_path / "w")]) == 2
    one_line_error(capsys, "foo__bar")
    assert not (tmp_path / "w").exists()


def test_synth_hidden_dim_zero_is_a_usage_error(tmp_path, capsys):
    """Fails at 62a0d12 (accepted)."""
    with pytest.raises(SystemExit) as info:
        main(["synth", "--preset", "demo", "--hidden-dim", "0", "--out", str(tmp_path / "w")])
    assert info.value.code == 2
    assert "--hidden-dim" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


# ----------------------------------------------------------------------------- corrupted models
def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _zero(path: Path) -> None:
    path.write_bytes(b"")


def _bitflip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    header = 8 + int.from_bytes(data[:8], "little")
    for i in range(header, len(data), 7):
        data[i] ^= 0xFF  # same length, garbage weights (NaN / huge values)
    path.write_bytes(bytes(data))


def _shape_mismatch(path: Path) -> None:
    config_path = path.parent / "config.json"
    config = json.loads(config_path.read_text())
    config["hidden_dim"] = int(config["hidden_dim"]) + 3
    config_path.write_text(json.dumps(config))


CORRUPTIONS = {
    "truncated": _truncate,
    "zero-length": _zero,
    "bit-flipped": _bitflip,
    "shape-mismatch": _shape_mismatch,
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
@pytest.mark.parametrize("command", ["predict", "evaluate", "ias"])
def test_corrupted_model_is_refused(world, model_dir, tmp_path, capsys, command, corruption):
    """Needs models branch (header, shape, hash and finiteness checks when loading)."""
    import shutil

    bad = tmp_path / "bad_model"
    shutil.copytree(model_dir, bad)
    CORRUPTIONS[corruption](bad / "model.safetensors")
    before = snapshot(bad)
    out = tmp_path / "out"
    argv = {
        "predict": ["predict", "--model", str(bad), "--data", str(world["id/calib"])]
        + ["--levels", "0.5", "--out", str(out)],
        "evaluate": ["evaluate", "--model", str(bad), "--data", str(world["id/calib"])]
        + ["--out", str(out)],
        "ias": ["ias", "--model", str(bad), "--bon", str(world["id/bon"]), "--out", str(out)]
        + ["--mc-trials", "0"],
    }[command]
    assert main([*argv, "--quiet"]) == 2
    one_line_error(capsys, "bad_model")
    assert not out.exists()
    assert snapshot(bad) == before


# ----------------------------------------------------------------------------- predict on unlabelled data
def test_predict_on_unlabelled_records_and_on_a_bon_set(world, model_dir, tmp_path):
    """Fails at 62a0d12 (labels required; a BoN set rejected)."""
    import shutil

    unlabelled = tmp_path / "unlabelled"
    shutil.copytree(world["id/calib"], unlabelled)
    records = pd.read_parquet(unlabelled / "records.parquet")
    records.drop(columns=["success_prob", "n_rollouts"]).to_parquet(unlabelled / "records.parquet")
    base = ["predict", "--model", str(model_dir), "--levels", "0.1,0.5,0.9", "--quiet"]
    labelled_out, unlabelled_out, bon_out = (tmp_path / f"{n}.npy" for n in "lub")
    assert main([*base, "--data", str(world["id/calib"]), "--out", str(labelled_out)]) == 0
    assert main([*base, "--data", str(unlabelled), "--out", str(unlabelled_out)]) == 0
    np.testing.assert_array_equal(np.load(labelled_out), np.load(unlabelled_out))
    assert main([*base, "--data", str(world["id/bon"]), "--out", str(bon_out)]) == 0
    n_questions = len(pd.read_parquet(world["id/bon"] / "questions.parquet"))
    assert np.load(bon_out).shape == (n_questions, 3)


# ----------------------------------------------------------------------------- errors and help
def test_user_error_has_no_traceback_but_debug_shows_it(tmp_path):
    missing = str(tmp_path / "missing")
    argv = ["train", "--method", "base", "--data", missing, "--out", str(tmp_path / "m")]
    plain = _dprm(*argv)
    _, err = plain.communicate(timeout=120)
    assert plain.returncode == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"dprm train: error: {missing}: not a directory")
    debug = _dprm("--debug", *argv)
    _, err = debug.communicate(timeout=120)
    assert debug.returncode != 0 and "Traceback" in err


def test_strict_json_writes_nan_as_null(tmp_path):
    """Fails at 62a0d12 (bare NaN: invalid JSON for strict parsers)."""
    write_json(tmp_path / "x.json", {"ece": float("nan"), "rows": [1.0, float("inf")]})
    text = (tmp_path / "x.json").read_text()
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {
        "ece": None,
        "rows": [1.0, None],
    }


def test_help_shows_each_default_once_and_never_none():
    """Fails at 62a0d12 ('(default: ...) (default: None)' in the pipeline commands)."""
    parser = build_parser()
    sub = parser._subparsers._group_actions[0]
    for name, subparser in sub.choices.items():
        formatter = subparser._get_formatter()
        for action in subparser._actions:
            text = formatter._expand_help(action) if action.help else ""
            assert "default: None" not in text, (name, text)
            assert text.count("default") <= 1, (name, text)


def test_ias_help_lists_every_file_it_writes(world, tmp_path):
    from dprm.ias.outputs import FILE_DOC as OUTPUT_FILES

    help_text = build_parser(["ias"])._subparsers._group_actions[0].choices["ias"].format_help()
    assert (
        main(
            ["ias", "--bon", str(world["id/bon"]), "--out", str(tmp_path / "o"), "--quiet"]
            + ["--mc-trials", "0"]
        )
        == 0
    )
    written = {p.name for p in (tmp_path / "o").iterdir()} - {MARKER_FILE}  # dprm's own mark
    # pays.csv needs --train-bon (the auto allocation learns on the training pools); the peers'
    # files need --peers
    assert written == set(OUTPUT_FILES) - {"pays.csv", "peers.csv", "peer_curves.csv"}
    assert all(name in help_text for name in written)


@pytest.mark.parametrize("command", ["train", "predict", "evaluate", "ias"])
def test_compute_commands_take_threads_and_one_progress_flag(command):
    sub = build_parser([command])._subparsers._group_actions[0].choices[command]
    flags = {s for a in sub._actions for s in a.option_strings}
    assert {"--threads", "--no-progress", "--overwrite"} <= flags
    assert COMMANDS[command].module.endswith(command)
