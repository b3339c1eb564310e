"""Content digests: the fast path, folders, models by content or hub revision, the disk cache."""

from __future__ import annotations

import contextlib
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
    monkeypatch.setattr(digests, "FAST_PATH_MIN_BYTES", 8)
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
    monkeypatch.setattr(digests, "FAST_PATH_MIN_BYTES", 1)
    digests.disk_cache().parent.mkdir(parents=True)
    digests.disk_cache().write_text(broken)
    path = tmp_path / "f"
    path.write_bytes(b"xyz")
    assert FileDigests(disk=True).file(path) == digests.hash_file(path)


@pytest.fixture
def tmpfs_folder():
    """A folder on tmpfs (/dev/shm), where a rewrite through a held writable memory map changes
    none of size, mtime, ctime and inode; skipped where there is none."""
    import shutil
    import subprocess
    import tempfile

    shm = Path("/dev/shm")
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(shm)], capture_output=True, text=True)
    if not shm.is_dir() or not os.access(shm, os.W_OK) or kind.stdout.strip() != "tmpfs":
        pytest.skip("no writable tmpfs at /dev/shm")
    folder = Path(tempfile.mkdtemp(dir=shm, prefix="dprm-test-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def held_map(path: Path):
    """A writable memory map of ``path`` held open (its pages stay writable: later writes
    through it touch no timestamp on tmpfs)."""
    import mmap

    with path.open("r+b") as handle, mmap.mmap(handle.fileno(), 0) as mapped:
        yield mapped


def test_a_rewrite_through_a_memory_map_is_seen_by_the_next_run(tmpfs_folder, monkeypatch):
    """The fast path (size, mtime, ctime, inode) missed an in-place rewrite through a writable
    memory map, and the recorded digest (state.json, the on-disk cache) was served again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmpfs_folder / "cache"))
    states = tmpfs_folder / "hidden_states.npy"
    states.write_bytes(b"\1" * 4096)
    cache: dict = {}
    with held_map(states) as mapped:
        mapped[:] = b"\2" * 4096
        mapped.flush()
        first = FileDigests(cache, disk=True).file(states)
        stat = states.stat()
        mapped[:] = b"\3" * 4096  # the same pages again: no fault, no timestamp
        mapped.flush()
    assert digests.stat_key(states.stat()) == digests.stat_key(stat)  # nothing in the stat
    again = FileDigests(cache, disk=True)  # the next run: the records as stored
    assert again.file(states) == digests.hash_file(states) != first
    assert digests.digest(states) == again.file(states)  # the per-process digest as well


def test_a_small_file_is_read_whatever_its_record_says(tmp_path, monkeypatch):
    """A record whose stat matches (what an undetected rewrite leaves) is not trusted below
    the fast path's threshold, on any filesystem."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    states = tmp_path / "hidden_states.npy"
    states.write_bytes(b"\1" * 4096)
    key = str(states.resolve())
    stale = {"files": {key: digests.stat_key(states.stat()) + ["0" * 16]}}
    files = FileDigests(stale, disk=True)
    assert files.file(states) == digests.hash_file(states) and files.hashed == 1
    assert key not in stale["files"]  # small files' digests are not recorded for later


def test_a_large_file_takes_the_fast_path_unless_inputs_are_verified(tmp_path, monkeypatch):
    """What the fast path trusts for large files: the stat; `--verify-inputs` reads them."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(digests, "FAST_PATH_MIN_BYTES", 1024)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\1" * 4096)
    value = FileDigests(disk=True).file(weights)
    # a stale record for the same stat (what an undetected rewrite leaves behind)
    stale = {"files": {str(weights.resolve()): digests.stat_key(weights.stat()) + ["0" * 16]}}
    assert FileDigests(stale).file(weights) == "0" * 16  # the fast path trusts the stat
    with digests.verify_inputs():
        assert os.environ[digests.VERIFY_ENV] == "1"  # worker processes inherit it
        checked = FileDigests(stale, disk=True)
        assert checked.file(weights) == value and checked.hashed == 1
        assert checked.file(weights) == value and checked.hashed == 1  # read once per object
    assert digests.VERIFY_ENV not in os.environ
    assert stale["files"][str(weights.resolve())][4] == value  # the record is refreshed
