"""dprm.io's output safety: the guard, dprm's marks on what it wrote, the one-writer lock."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dprm.io import (
    MARKER_FILE,
    REGISTRY_FILE,
    OutputError,
    atomic_dir,
    check_output,
    guard_output,
    lock_path,
    output_command,
    output_lock,
    read_marker,
    register_file_output,
    write_marker,
    written_by_dprm,
)


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working directory and a home folder of their own, under tmp_path."""
    home, cwd = tmp_path / "home", tmp_path / "work" / "project"
    home.mkdir()
    cwd.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    return tmp_path


@pytest.mark.parametrize(
    ("out", "inputs", "words"),
    [
        ("data", [("--data", "data")], "is the input --data data"),
        ("data/sub", [("--data", "data")], "lies inside the input --data data"),
        (".", [("--data", "data")], "is the working directory"),
        ("..", [], "contains the working directory"),
        ("data/../data", [("--data", "data")], "is the input"),
        ("link", [("--data", "data")], "is the input"),
        ("/", [], "is the filesystem root"),
    ],
)
def test_guard_refuses(place, out, inputs, words):
    Path("data").mkdir()
    Path("link").symlink_to(Path("data").resolve())
    with pytest.raises(OutputError, match=words):
        guard_output(out, inputs)


def test_guard_names_the_home_folder(place):
    home = Path.home()
    with pytest.raises(OutputError, match=f"is the home folder {home}"):
        guard_output(home, [])
    with pytest.raises(OutputError, match=f"contains the home folder {home}"):
        guard_output(place, [])


def test_guard_allows_ordinary_outputs(place):
    Path("data").mkdir()
    assert guard_output("results/model", [("--data", "data"), ("--model", None)]).name == "model"
    assert guard_output("data-copy", [("--data", "data")]).name == "data-copy"


def test_atomic_dir_marks_only_under_a_command(tmp_path):
    with atomic_dir(tmp_path / "plain") as tmp:
        (tmp / "a").write_text("x")
    assert read_marker(tmp_path / "plain") is None
    with output_command("train"), atomic_dir(tmp_path / "marked") as tmp:
        (tmp / "a").write_text("x")
    marker = read_marker(tmp_path / "marked")
    assert marker["command"] == "train" and marker["pid"] == os.getpid()
    assert written_by_dprm(tmp_path / "marked") and not written_by_dprm(tmp_path / "plain")


def test_a_registered_file_stops_being_dprms_once_edited(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text("{}")
    assert not written_by_dprm(path)
    register_file_output(path, "evaluate")
    assert written_by_dprm(path)
    entry = json.loads((tmp_path / REGISTRY_FILE).read_text())["files"]["metrics.json"]
    assert entry["command"] == "evaluate" and entry["size"] == 2
    path.write_text("{ }")
    assert not written_by_dprm(path)


def test_overwrite_needs_dprms_mark(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    (user / "x").write_text("x")
    with pytest.raises(OutputError, match="not written by dprm"):
        check_output(user, overwrite=True, directory=True)
    write_marker(user, "ias")
    assert check_output(user, overwrite=True, directory=True) == user
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_output(empty, overwrite=True, directory=True) == empty


def test_resume_needs_the_commands_own_marker(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "report.md").write_text("mine")
    with pytest.raises(OutputError, match="not a dprm reproduce folder"):
        check_output(out, overwrite=False, directory=True, resumable=True, command="reproduce")
    write_marker(out, "run")
    with pytest.raises(OutputError, match="made by dprm run"):
        check_output(out, overwrite=False, directory=True, resumable=True, command="reproduce")
    assert check_output(out, overwrite=False, directory=True, resumable=True, command="run")
    assert (out / MARKER_FILE).exists()


def test_the_lock_refuses_a_second_writer_and_goes_away(tmp_path):
    out = tmp_path / "model"
    with output_lock(out, "train") as lock:
        assert lock == lock_path(out) and json.loads(lock.read_text())["pid"] == os.getpid()
        second = output_lock(out, "train")
        with pytest.raises(OutputError, match=rf"pid {os.getpid()}, dprm train"):
            second.__enter__()
    assert not lock_path(out).exists()
    with output_lock(out):  # free again
        pass


def test_a_symlink_shares_the_lock_of_its_target(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with output_lock(tmp_path / "real"), pytest.raises(OutputError, match="another process"):
        output_lock(tmp_path / "link").__enter__()


def test_a_link_to_nothing_is_named_as_such(tmp_path):
    """A dangling link reads as neither file nor folder: say where it points, not "is a file"."""
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(OutputError, match=r"is a link to .*gone, which does not exist"):
        check_output(link, overwrite=False, directory=True, resumable=True, command="run")
    (tmp_path / "gone").mkdir()
    assert (
        check_output(link, overwrite=False, directory=True, resumable=True, command="run") == link
    )
