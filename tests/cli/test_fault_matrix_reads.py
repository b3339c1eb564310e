"""Fault matrix, reads and ends: every input read safely (one line, exit 2), a signal that
ends any command through its cleanup, the calibrator's provenance checked by every command.

Every case works on copies under ``tmp_path``; the signal case runs ``dprm`` in a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dprm.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from fixtures.cli_errors import one_line_error  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def mine(world, model_dir, tmp_path):
    """Private copies of a calibration set, a BoN set and a calibrator."""
    root = tmp_path / "w"
    return {
        "root": root,
        "calib": Path(shutil.copytree(world["id/calib"], root / "calib")),
        "bon": Path(shutil.copytree(world["id/bon"], root / "bon")),
        "model": Path(shutil.copytree(model_dir, tmp_path / "model")),
    }


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}


# ----------------------------------------------------------------------------- signals
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["term", "hup"])
def test_a_signal_ends_train_with_one_line_and_no_lock(mine, tmp_path, sig):
    """SIGTERM to `dprm train` exited 143 silently and left its .lock behind."""
    out = tmp_path / "model-out"
    argv = ["train", "--method", "ot", "--data", str(mine["calib"]), "--out", str(out)]
    argv += ["--set", "max_steps=100000", "--set", "eval_every=100000", "--no-progress"]
    train = subprocess.Popen(
        [sys.executable, "-m", "dprm.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        lock = tmp_path / ".model-out.lock"
        deadline = time.monotonic() + 120
        while not lock.exists():  # it holds --out: it is past its checks
            assert train.poll() is None, train.stderr.read()
            assert time.monotonic() < deadline, "never took its lock"
            time.sleep(0.1)
        time.sleep(1.0)
        train.send_signal(sig)
        _, err = train.communicate(timeout=120)
    finally:
        if train.poll() is None:
            train.kill()
    assert train.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and signal.Signals(sig).name in lines[0], err
    assert "interrupted" in lines[0] and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "w"]  # no lock, no output


# ----------------------------------------------------------------------------- digests
@pytest.fixture
def tmpfs_folder():
    """A folder on tmpfs (/dev/shm), where a rewrite through a held writable memory map changes
    none of size, mtime, ctime and inode; skipped where there is none."""
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


def test_tune_sees_hidden_states_rewritten_through_a_memory_map(
    mine, tmpfs_folder, tmp_path, monkeypatch, capsys
):
    """`tune` resumed over hidden states changed through a writable memory map (the stat
    unchanged on tmpfs): the remembered digest was served. Small files are now always read;
    for large ones (the fast path) `--verify-inputs` reads them."""
    import mmap

    from dprm import digests

    pytest.importorskip("optuna")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calib = Path(shutil.copytree(mine["calib"], tmpfs_folder / "calib"))
    out = tmp_path / "search"
    argv = ["tune", "--data", str(calib), "--out", str(out), "--methods", "qr", "--trials", "1"]
    argv += ["--max-steps", "5", "--quiet"]
    states = calib / "hidden_states.npy"
    with states.open("r+b") as handle, mmap.mmap(handle.fileno(), 0) as mapped:

        def rewrite(at: int) -> None:
            """Flip a byte through the held map; after the first write through it, the stat
            does not change."""
            stat = states.stat()
            mapped[at] ^= 1
            mapped.flush()
            assert at == -1 or digests.stat_key(states.stat()) == digests.stat_key(stat)

        rewrite(-1)  # the first write through the map sets the timestamps
        assert main(argv) == 0
        rewrite(-2)
        assert main(argv) == 2  # small files are read on every run
        one_line_error(capsys, str(out), "changed")

        monkeypatch.setattr(digests, "FAST_PATH_MIN_BYTES", 1)  # every file large: fast path
        assert main([*argv, "--overwrite"]) == 0
        rewrite(-3)
        assert main(argv) == 0  # what the fast path trusts: the stat of a large file
        capsys.readouterr()
        assert main([*argv, "--verify-inputs"]) == 2
        one_line_error(capsys, str(out), "changed")


# ----------------------------------------------------------------------------- inputs read safely
def test_ias_pools_of_different_hidden_sizes_are_one_line(mine, tmp_path, capsys):
    """`ias --bon A --train-bon B` with B's states of another size and no --model: ValueError
    deep in the shift score."""
    import numpy as np

    small = Path(shutil.copytree(mine["bon"], tmp_path / "train-bon"))
    for name in ("hidden_states.npy", "response_hidden_states.npy"):
        if (small / name).exists():
            states = np.load(small / name)
            np.save(small / name, np.ascontiguousarray(states[:, : states.shape[1] // 2]))
    meta = json.loads((small / "meta.json").read_text())
    meta["hidden_dim"] = meta["hidden_dim"] // 2
    (small / "meta.json").write_text(json.dumps(meta))
    argv = ["ias", "--bon", str(mine["bon"]), "--train-bon", str(small)]
    assert main([*argv, "--out", str(tmp_path / "ias"), "--mc-trials", "0", "--quiet"]) == 2
    one_line_error(capsys, str(small), "same PRM")
    assert not (tmp_path / "ias").exists()


def _park_record(**fields) -> str:
    record = {"question": "What is 1+1?", "reasoning_prefix": "", "success_prob": 0.5}
    return json.dumps([{**record, **fields}])


PARK_FAULTS = {
    # a JSON list nested 100,000 deep: RecursionError
    "deep": ("[" * 100_000 + "]" * 100_000, "nested deeper than"),
    # a lone surrogate escape in a question: UnicodeEncodeError when the question is hashed
    "surrogate": (_park_record(question="q").replace('"q"', '"q\\ud800"'), "lone surrogate"),
    # a 5,000-digit number: Python's int conversion limit, as a traceback
    "digits": (_park_record(success_prob=1).replace(": 1}", ": " + "1" * 5000 + "}"), "digits"),
}


@pytest.mark.parametrize("fault", PARK_FAULTS)
def test_import_park_unreadable_json_is_one_line(tmp_path, capsys, fault):
    text, words = PARK_FAULTS[fault]
    source = tmp_path / "park.json"
    source.write_text(text)
    out = tmp_path / "labels.parquet"
    assert main(["import-park", "--json", str(source), "--out", str(out), "--quiet"]) == 2
    one_line_error(capsys, str(source), words)
    assert not out.exists()


def test_import_park_accepts_a_byte_order_mark(tmp_path):
    source = tmp_path / "park.json"
    source.write_bytes(b"\xef\xbb\xbf" + _park_record().encode())
    out = tmp_path / "labels.parquet"
    assert main(["import-park", "--json", str(source), "--out", str(out), "--quiet"]) == 0
    assert out.exists()


def test_a_set_whose_meta_json_has_a_byte_order_mark_is_read(mine, tmp_path):
    """A meta.json saved by an editor that writes a BOM was 'not valid JSON'."""
    meta = mine["calib"] / "meta.json"
    meta.write_bytes(b"\xef\xbb\xbf" + meta.read_bytes())
    out = tmp_path / "model-out"
    assert main(["train", "--method", "base", "--data", str(mine["calib"]), "--out", str(out),
                 "--quiet"]) == 0  # fmt: skip
    assert (out / "config.json").exists()


def test_a_question_file_with_a_byte_order_mark_is_read(tmp_path):
    source = tmp_path / "q.json"
    rows = [{"question": "What is 1+1?", "answer": "2"}]
    source.write_bytes(b"\xef\xbb\xbf" + json.dumps(rows).encode())
    out = tmp_path / "questions.jsonl"
    assert main(["questions", str(source), "--out", str(out), "--quiet"]) == 0
    assert json.loads(out.read_text().splitlines()[0])["question"] == "What is 1+1?"


def test_a_question_over_the_stated_limit_is_refused(tmp_path, capsys):
    """A 10 MB question silently yielded empty answers."""
    from dprm.llm.questions import MAX_QUESTION_CHARS

    source = tmp_path / "q.jsonl"
    rows = [{"question": "1+1?", "answer": "2"}, {"question": "x" * 10_000_000, "answer": "1"}]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "questions.jsonl"
    assert main(["questions", str(source), "--out", str(out), "--quiet"]) == 2
    one_line_error(capsys, str(source), "row 1", f"{MAX_QUESTION_CHARS:,}")
    assert not out.exists()


def test_a_latin1_config_file_is_one_line_naming_the_encoding(mine, tmp_path, capsys):
    config = tmp_path / "qr.toml"
    config.write_bytes("# learning rate, réglé à la main\nlr = 0.001\n".encode("latin-1"))
    out = tmp_path / "model-out"
    argv = ["train", "--method", "qr", "--data", str(mine["calib"]), "--config", str(config)]
    assert main([*argv, "--out", str(out), "--set", "max_steps=2", "--quiet"]) == 2
    one_line_error(capsys, str(config), "not UTF-8")
    assert not out.exists()


def test_a_utf8_config_file_is_read_under_an_ascii_locale(mine, tmp_path):
    """Read with the locale's encoding: UnicodeDecodeError ('ascii' codec) under LC_ALL=C."""
    config = tmp_path / "qr.toml"
    config.write_text("# learning rate, réglé à la main\nlr = 0.00123\n", encoding="utf-8")
    out = tmp_path / "model-out"
    argv = ["train", "--method", "qr", "--data", str(mine["calib"]), "--config", str(config)]
    env = _env() | {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    result = subprocess.run(
        [sys.executable, "-m", "dprm.cli", *argv, "--out", str(out), "--set", "max_steps=2"]
        + ["--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((out / "config.json").read_text())["config"]["lr"] == 0.00123
