"""Content digests of what a unit reads: in-place changes are seen, unchanged files not re-read."""

from __future__ import annotations

import os

from dprm import digests as digests_module
from dprm.runner.fingerprints import FileDigests


def _rewrite_keeping_size_and_mtime(path, text: str) -> None:
    stat = path.stat()
    assert len(text) == stat.st_size
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_content_change_is_seen_even_with_size_and_mtime_restored(tmp_path):
    path = tmp_path / "labels.json"
    path.write_text('[{"success_prob": 0.125}]')
    digests = FileDigests()
    before = digests.file(path)
    _rewrite_keeping_size_and_mtime(path, '[{"success_prob": 0.875}]')
    assert digests.file(path) != before


def test_unchanged_large_files_are_not_read_again(tmp_path, monkeypatch):
    monkeypatch.setattr(digests_module, "FAST_PATH_MIN_BYTES", 100)  # both files count as large
    (tmp_path / "set").mkdir()
    for name in ("records.parquet", "meta.json"):
        (tmp_path / "set" / name).write_bytes(os.urandom(1000))
    cache: dict = {}
    digests = FileDigests(cache)
    first = digests.current(tmp_path / "set")
    assert digests.hashed == 2
    again = FileDigests(cache)  # the cache as stored in state.json
    assert again.current(tmp_path / "set") == first and again.hashed == 0


def test_directory_digest_skips_temporaries_and_names_files(tmp_path):
    root = tmp_path / "calib"
    root.mkdir()
    (root / "records.parquet").write_text("a")
    digests = FileDigests()
    first = digests.current(root)
    (root / ".records.parquet.x1y2.tmp").write_text("half-written")
    assert digests.current(root) == first
    (root / "records.parquet").rename(root / "other.parquet")
    assert digests.current(root) != first


def test_a_deleted_input_stands_for_the_digest_it_had(tmp_path):
    """A synthetic world deleted after use keeps its digest (it is regenerated identically)."""
    run = tmp_path / "run"
    (run / "worlds" / "w").mkdir(parents=True)
    (run / "worlds" / "w" / "x.parquet").write_text("x")
    digests = FileDigests(root=run)
    seen = digests.digest(run / "worlds" / "w")
    (run / "worlds" / "w" / "x.parquet").unlink()
    (run / "worlds" / "w").rmdir()
    assert digests.current(run / "worlds" / "w") is None
    assert digests.digest(run / "worlds" / "w") == seen
    assert digests.name(run / "worlds" / "w") == "worlds/w"  # a moved run keeps its names
