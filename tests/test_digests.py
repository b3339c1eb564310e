"""Content digests: the fast path, folders, models by content or hub revision, the disk cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dprm import digests
from dprm.digests import FileDigests, model_digest


def _rewrite_same_size(path: Path, text: str) -> None:
    stat = path.stat()
    path.write_text(text)
    assert path.stat().st_size == stat.st_size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_file_rewritten_in_place_is_hashed_again_an_untouched_one_is_not(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("a,1\n")
    files = FileDigests()
    first = files.file(path)
    assert files.file(path) == first and files.hashed == 1  # the fast path
    _rewrite_same_size(path, "a,2\n")
    assert files.file(path) != first and files.hashed == 2


def test_a_folder_digest_covers_names_and_bytes_but_not_hidden_files(tmp_path):
    folder = tmp_path / "set"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "x.bin").write_bytes(b"123")
    before = digests.digest(folder)
    assert before.startswith("dir:")
    (folder / ".tmp-part").write_bytes(b"unfinished")
    (folder / "sub" / ".lock").write_bytes(b"")
    assert digests.digest(folder) == before
    (folder / "sub" / "x.bin").rename(folder / "sub" / "y.bin")
    assert digests.digest(folder) != before
    assert digests.digest(tmp_path / "missing") is None


def test_a_local_model_is_its_content_a_hub_id_its_cached_revision(tmp_path, monkeypatch):
    model = tmp_path / "prm"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 16)
    local = model_digest(model)
    assert local == digests.digest(model)
    (model / "model.safetensors").write_bytes(b"\1" * 16)
    assert model_digest(model) != local

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert model_digest("org/prm") == "hub:org/prm@main"  # not downloaded: the revision asked
    refs = tmp_path / "hub" / "models--org--prm" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text("0123abcd" * 5)
    assert model_digest("org/prm") == "hub:org/prm@" + "0123abcd" * 5
    assert model_digest("org/prm", revision="v2") == "hub:org/prm@v2"


def test_large_files_are_remembered_across_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(digests, "DISK_CACHE_MIN_BYTES", 8)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"w" * 64)
    one = FileDigests(disk=True)
    value = one.file(weights)
    assert one.hashed == 1 and digests.disk_cache().exists()
    other = FileDigests(disk=True)  # a new process: its own memory, the same disk cache
    assert other.file(weights) == value and other.hashed == 0
    _rewrite_same_size(weights, "v" * 64)
    assert other.file(weights) != value and other.hashed == 1


@pytest.mark.parametrize("broken", ["", "not json", "[1, 2]"])
def test_an_unreadable_disk_cache_is_ignored(tmp_path, monkeypatch, broken):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(digests, "DISK_CACHE_MIN_BYTES", 1)
    digests.disk_cache().parent.mkdir(parents=True)
    digests.disk_cache().write_text(broken)
    path = tmp_path / "f"
    path.write_bytes(b"xyz")
    assert FileDigests(disk=True).file(path) == digests.hash_file(path)
