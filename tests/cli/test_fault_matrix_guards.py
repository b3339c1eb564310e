"""Fault matrix, guards: check before delete, paths compared as files, a full disk is an error,
records checked on read, workers that end with their driver.

Every case works on copies under ``tmp_path``. Bind mounts and small tmpfs disks need the
right to mount (root in a container that allows it): those cases are skipped elsewhere. The
full-disk and signal cases run ``dprm`` in a subprocess: on a sparse memory map a full disk
is a SIGBUS, which must not take the test session with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dprm.cli import main
from dprm.io import DataError, write_marker

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from fixtures.cli_errors import one_line_error  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------- fixtures, helpers
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


def snapshot(root: Path) -> dict[str, bytes | str]:
    """relative path -> bytes (or 'dir') of everything under ``root``."""
    items = [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]
    return {str(p.relative_to(root)): "dir" if p.is_dir() else p.read_bytes() for p in items}


def left_behind(folder: Path) -> list[str]:
    """Temporaries and locks dprm would leave in ``folder`` (hidden names other than dprm's
    markers and registries, any depth)."""
    kept = {".dprm-output.json", ".dprm-outputs.json"}
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*") if p.name not in kept)


def dprm(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    """``python -m dprm.cli ARGV`` in a subprocess importing the code under test."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "dprm.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        **kwargs,
    )


def one_line(result: subprocess.CompletedProcess, *names: str) -> str:
    err = result.stderr.strip()
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    for name in names:
        assert name in err, (name, err)
    return err


def full_disk_line(result: subprocess.CompletedProcess, out: Path) -> str:
    """Exit 2 and one line naming ``out`` and the full disk."""
    assert result.returncode == 2, result.stderr[-2000:]
    err = one_line(result, str(out))
    assert "no space left on device" in err.lower(), err
    return err


def _mount(*argv: str) -> None:
    try:
        subprocess.run(["mount", *argv], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        pytest.skip(f"cannot mount here ({err})")


@contextlib.contextmanager
def mounted(*argv: str, at: Path):
    _mount(*argv, str(at))
    try:
        yield at
    finally:
        subprocess.run(["umount", "-l", str(at)], capture_output=True, timeout=30)


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk(free)``: a 2 MiB tmpfs filled up to ``free`` bytes, as a folder."""
    with contextlib.ExitStack() as stack:

        def make(free: int) -> Path:
            disk = tmp_path / "disk"
            disk.mkdir()
            stack.enter_context(mounted("-t", "tmpfs", "-o", "size=2m", "tmpfs", at=disk))
            stat = os.statvfs(disk)
            filler = stat.f_bavail * stat.f_frsize - free
            with open(disk / "filler", "wb") as handle:
                handle.write(b"\1" * filler)
            return disk

        yield make


def fake_tune_folder(out: Path) -> dict[str, bytes | str]:
    """A finished `dprm tune` folder (marker, study, best, trials, a refitted model)."""
    write_marker(out, "tune")
    (out / "study.db").write_bytes(b"SQLite format 3\0 the old study")
    (out / "best.json").write_text('{"methods": {}}\n')
    (out / "trials.csv").write_text("method,number\not,0\n")
    (out / "ot").mkdir()
    (out / "ot" / "config.json").write_text("{}")
    return snapshot(out)


# ----------------------------------------------------------------------------- 2. check, then delete
@pytest.mark.parametrize("fault", ["missing-data", "misspelled-method"])
def test_tune_overwrite_checks_before_it_deletes(mine, tmp_path, capsys, fault):
    """`tune --overwrite` deleted study.db, best.json, trials.csv and the models, then exit 2."""
    out = tmp_path / "search"
    before = fake_tune_folder(out)
    data, methods = mine["calib"], "ot,qr"
    if fault == "missing-data":
        data = tmp_path / "no-such-set"
    else:
        methods = "ot,qrr"
    argv = ["tune", "--data", str(data), "--out", str(out), "--methods", methods]
    assert main([*argv, "--overwrite", "--quiet"]) == 2
    one_line_error(capsys, str(data) if fault == "missing-data" else "qrr")
    assert snapshot(out) == before


def test_tune_overwrite_replaces_a_symlinked_out(mine, tmp_path, monkeypatch):
    """`tune --overwrite` on a symlinked --out: "Cannot call rmtree on a symbolic link"."""
    import dprm.models.tune

    calls = []

    def fake_tune(data, out, **kwargs):  # the search itself is not what is tested
        calls.append(Path(out))
        assert not (Path(out) / "study.db").exists()  # the earlier search was discarded
        (Path(out) / "best.json").write_text('{"methods": {}, "best_method": null}\n')
        return {"methods": {}, "best_method": None}

    monkeypatch.setattr(dprm.models.tune, "tune", fake_tune)
    real = tmp_path / "real"
    fake_tune_folder(real)
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    argv = ["tune", "--data", str(mine["calib"]), "--out", str(link), "--overwrite", "--quiet"]
    assert main(argv) == 0
    assert calls == [link] and link.is_symlink() and link.resolve() == real.resolve()
    assert sorted(p.name for p in real.iterdir()) == [".dprm-output.json", "best.json"]
    assert left_behind(tmp_path) == []


# ----------------------------------------------------------------------------- 3. paths as files
@pytest.fixture
def alias(mine, tmp_path):
    """``tmp_path/alias``: a bind mount of the world folder (the same files, another path)."""
    target = tmp_path / "alias"
    target.mkdir()
    with mounted("--bind", str(mine["root"]), at=target):
        yield target


def test_out_inside_an_input_through_a_bind_mount_is_refused(mine, alias, capsys):
    """A model written into the calibration set's folder, reached through a bind mount."""
    before = snapshot(mine["calib"])
    out = alias / "calib" / "model"
    argv = ["train", "--method", "base", "--data", str(mine["calib"]), "--out", str(out)]
    assert main([*argv, "--quiet"]) == 2
    one_line_error(capsys, str(out), "lies inside", str(mine["calib"]))
    assert snapshot(mine["calib"]) == before


def test_overwrite_through_a_bind_mount_never_replaces_the_input(mine, alias, capsys):
    """`train --data W/calib --out ALIAS/calib --overwrite`: the calibration set (a dprm
    output) was replaced by a model, exit 0."""
    write_marker(mine["calib"], "synth")
    before = snapshot(mine["calib"])
    out = alias / "calib"
    argv = ["train", "--method", "base", "--data", str(mine["calib"]), "--out", str(out)]
    assert main([*argv, "--overwrite", "--quiet"]) == 2
    one_line_error(capsys, str(out), "is the input --data")
    assert snapshot(mine["calib"]) == before


def test_out_containing_the_working_directory_through_a_bind_mount(
    mine, tmp_path, monkeypatch, capsys
):
    """The working directory inside a bind-mounted --out: emptied by --overwrite."""
    project = mine["root"] / "project"
    project.mkdir()
    (project / "notes.md").write_text("mine")
    write_marker(mine["root"], "reproduce")  # a dprm folder: --overwrite would replace it
    alias = tmp_path / "alias"
    alias.mkdir()
    with mounted("--bind", str(tmp_path), at=alias):
        monkeypatch.chdir(project)
        before = snapshot(mine["root"])
        out = alias / "w"
        assert main(["ias", "--bon", str(mine["bon"]), "--out", str(out), "--overwrite"]) == 2
        one_line_error(capsys, str(out), "working directory")
        assert snapshot(mine["root"]) == before


@pytest.fixture
def fake_reproduce(monkeypatch):
    """reproduce with its pipeline replaced by one that publishes a world folder inside OUT
    (as the real one does) and report.md: the CLI's own checks are what is tested."""
    calls: list[Path] = []

    def fake(out, *args, **kwargs):
        from dprm.io import atomic_dir

        out = Path(out)
        with atomic_dir(out / "worlds" / "w1") as tmp:
            (tmp / "meta.json").write_text("{}")
        (out / "report.md").write_text("# dprm reproduction\n")
        calls.append(out)
        return types.SimpleNamespace(failures=[], report=out / "report.md")

    import dprm.orchestrate.reproduce

    monkeypatch.setattr(dprm.orchestrate.reproduce, "reproduce", fake)
    return calls


def test_a_folder_inside_a_run_is_not_a_run(tmp_path, capsys, fake_reproduce):
    """Every folder inside a run carried a `reproduce` marker: `reproduce --out RUN/worlds/w1`
    was accepted, and resuming the outer run then deleted the inner one."""
    out = tmp_path / "run"
    assert main(["reproduce", "--grid", "demo", "--out", str(out), "--quiet"]) == 0
    inner = out / "worlds" / "w1"
    assert json.loads((out / ".dprm-output.json").read_text())["root"] == "."
    assert json.loads((inner / ".dprm-output.json").read_text())["root"] == "../.."
    before = snapshot(out)
    assert main(["reproduce", "--grid", "demo", "--out", str(inner), "--quiet"]) == 2
    one_line_error(capsys, str(inner), str(out))
    assert snapshot(out) == before and fake_reproduce == [out]


def test_run_out_inside_another_output_is_refused(tmp_path, monkeypatch, capsys, fake_reproduce):
    """`run --out` (and `reproduce --out`) a new folder below another run's output."""
    import dprm.recipe

    out = tmp_path / "run"
    assert main(["reproduce", "--grid", "demo", "--out", str(out), "--quiet"]) == 0
    recipe = tmp_path / "recipe.toml"
    recipe.write_text("[run]\n")
    monkeypatch.setattr(
        dprm.recipe,
        "load_recipe",
        lambda p: types.SimpleNamespace(run=types.SimpleNamespace(out=str(tmp_path / "x"))),
    )
    monkeypatch.setattr(dprm.recipe, "run_recipe", lambda *a, **k: pytest.fail("ran"))
    # a stand-in recipe has no stages, so nothing for the preflight to check
    monkeypatch.setattr("dprm.recipe.preflight.missing_requirements", lambda *a, **k: [])
    nested = out / "worlds" / "mine"
    before = snapshot(out)
    assert main(["run", str(recipe), "--out", str(nested), "--quiet"]) == 2
    one_line_error(capsys, str(nested), "lies inside", str(out))
    assert snapshot(out) == before and not nested.exists()


#: every writing command, as ``argv(inputs, out)``: the output is a folder or a file in it
WRITERS = {
    "tune": lambda m, out: ["tune", "--data", str(m["calib"]), "--out", str(out),
                            "--trials", "1", "--methods", "qr"],
    "train": lambda m, out: ["train", "--method", "isotonic", "--data", str(m["calib"]),
                             "--out", str(out)],
    "synth": lambda m, out: ["synth", "--preset", "demo", "--size", "tiny", "--out", str(out)],
    "predict": lambda m, out: ["predict", "--model", str(m["model"]), "--data", str(m["calib"]),
                               "--levels", "0.5", "--out", str(out / "q.npy")],
    "evaluate": lambda m, out: ["evaluate", "--model", str(m["model"]), "--data",
                                str(m["calib"]), "--out", str(out / "metrics.json")],
    "ias": lambda m, out: ["ias", "--bon", str(m["bon"]), "--out", str(out)],
}  # fmt: skip


@pytest.fixture
def nests(tmp_path) -> dict[str, Path]:
    """A `dprm run` folder (with a world inside, marked as the run's) and a `synth` world."""
    run = tmp_path / "run"
    write_marker(run, "run")
    (run / "worlds").mkdir()
    (run / "worlds" / "w1" / "id").mkdir(parents=True)
    record = json.loads((write_marker(run / "worlds" / "w1", "run")).read_text())
    (run / "worlds" / "w1" / ".dprm-output.json").write_text(json.dumps(record | {"root": "../.."}))
    world = tmp_path / "world"
    write_marker(world, "synth")
    (world / "id").mkdir()
    return {"run": run, "world": world}


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
@pytest.mark.parametrize("where", ["run/new", "run/worlds/w1", "run/worlds/w1/id/x", "world/id"])
@pytest.mark.parametrize("command", sorted(WRITERS))
def test_outputs_nested_in_a_run_or_world_are_refused(
    mine, nests, capsys, command, where, overwrite
):
    """`tune --overwrite --out RUN/x` was accepted (refused without --overwrite) and the run's
    next resume deleted the search; other commands wrote into runs and worlds freely."""
    base, _, rest = where.partition("/")
    target = nests[base] / rest
    before = {name: snapshot(folder) for name, folder in nests.items()}
    argv = WRITERS[command](mine, target) + ["--quiet"] + (["--overwrite"] if overwrite else [])
    assert main(argv) == 2
    err = one_line_error(capsys, str(nests[base]))
    assert "inside" in err, err
    assert {name: snapshot(folder) for name, folder in nests.items()} == before


@pytest.mark.parametrize("command", ["tune", "train", "synth", "ias"])
def test_overwrite_never_replaces_a_run_folder(mine, nests, capsys, command):
    """--overwrite replaced anything dprm wrote, a whole `dprm run` folder included."""
    before = snapshot(nests["run"])
    argv = WRITERS[command](mine, nests["run"]) + ["--quiet", "--overwrite"]
    assert main(argv) == 2
    one_line_error(capsys, str(nests["run"]), "never replaces a run")
    assert snapshot(nests["run"]) == before


# ----------------------------------------------------------------------------- 4. a full disk
def test_full_disk_during_predict(mine, small_disk):
    """A full disk under predict's memory map: SIGBUS (exit 135), temporary and lock left."""
    disk = small_disk(64 * 1024)
    out = disk / "q.npy"
    levels = ",".join(f"{t / 100:.2f}" for t in range(1, 100))
    result = dprm(
        "predict", "--model", str(mine["model"]), "--data", str(mine["calib"]),
        "--levels", levels, "--out", str(out), "--quiet",
    )  # fmt: skip
    full_disk_line(result, out)
    assert not out.exists() and left_behind(disk) == []


def test_full_disk_during_synth(small_disk):
    disk = small_disk(512 * 1024)
    out = disk / "world"
    result = dprm(
        "synth", "--preset", "demo", "--size", "tiny", "--hidden-dim", "2048",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    full_disk_line(result, out)
    assert not out.exists() and left_behind(disk) == []


def test_full_disk_during_evaluate_publishes_nothing(mine, small_disk):
    """ "No space left" (the registry could not be written), yet the file was published."""
    disk = small_disk(2 * 4096)  # the lock and the output fit, the registry does not
    out = disk / "metrics.json"
    result = dprm("evaluate", "--data", str(mine["calib"]), "--out", str(out), "--quiet")
    full_disk_line(result, out)
    assert not out.exists() and left_behind(disk) == []


def test_full_disk_during_train(mine, small_disk):
    disk = small_disk(2 * 4096)
    out = disk / "model"
    argv = ["train", "--method", "ot", "--data", str(mine["calib"]), "--out", str(out)]
    result = dprm(*argv, "--set", "max_steps=2", "--set", "eval_every=1", "--quiet")
    full_disk_line(result, out)
    assert not out.exists() and left_behind(disk) == []


def test_full_disk_during_tune(mine, small_disk):
    """A full disk under optuna's storage: a 74-line SQLAlchemy traceback, exit 1."""
    disk = small_disk(2 * 4096)
    out = disk / "search"
    argv = ["tune", "--data", str(mine["calib"]), "--out", str(out), "--methods", "binomial"]
    result = dprm(*argv, "--trials", "1", "--max-steps", "2", "--quiet")
    full_disk_line(result, out)
    published = {"best.json", "trials.csv", "binomial"} & {p.name for p in out.iterdir()}
    assert published == set()
    assert left_behind(disk) == []


# ----------------------------------------------------------------------------- 5. records on read
def _rewrite(path: Path, edit) -> None:
    table = pq.read_table(path).to_pandas()
    edit(table).to_parquet(path, index=False)


def test_nullable_bool_with_na_in_bon_correct(mine, tmp_path, capsys):
    """A BoN `correct` column stored as nullable boolean with one NA: a TypeError traceback."""
    path = mine["bon"] / "responses.parquet"

    def edit(df):
        df["correct"] = df["correct"].astype("boolean")
        df.loc[3, "correct"] = pd.NA
        return df

    _rewrite(path, edit)
    argv = ["ias", "--bon", str(mine["bon"]), "--out", str(tmp_path / "ias"), "--mc-trials", "0"]
    assert main([*argv, "--quiet"]) == 2
    one_line_error(capsys, str(path), "'correct'", "row 3", "missing")
    assert not (tmp_path / "ias").exists()


@pytest.mark.parametrize("fault", ["nullable-na", "uint64-overflow"])
def test_bad_integer_n_rollouts(mine, tmp_path, capsys, fault):
    """A nullable n_rollouts with an NA was read (binomial then failed with loss = nan); an
    unsigned 2**63 + 8 was accepted."""
    path = mine["calib"] / "records.parquet"

    def edit(df):
        if fault == "nullable-na":
            df["n_rollouts"] = df["n_rollouts"].astype("Int64")
            df.loc[5, "n_rollouts"] = pd.NA
        else:
            df["n_rollouts"] = df["n_rollouts"].astype(np.uint64)
            df.loc[5, "n_rollouts"] = np.uint64(2**63 + 8)
            df["success_prob"] = df["success_prob"].where(df.index != 5, 0.0)
        return df

    _rewrite(path, edit)
    out = tmp_path / "metrics.json"
    assert main(["evaluate", "--data", str(mine["calib"]), "--out", str(out), "--quiet"]) == 2
    one_line_error(capsys, str(path), "'n_rollouts'", "row 5")
    assert not out.exists()


def test_labels_with_more_correct_than_rollouts(tmp_path):
    from dprm.data.contract import read_labels

    path = tmp_path / "labels.parquet"
    pd.DataFrame(
        {
            "question_id": ["q", "q"],
            "response_id": [0, 0],
            "step": [0, 1],
            "question": ["1+1?", "1+1?"],
            "reasoning_prefix": ["", "a"],
            "n_correct": [2, 9],
            "n_rollouts": [8, 8],
            "success_prob": [0.25, 1.0],
        }
    ).to_parquet(path, index=False)
    with pytest.raises(DataError) as caught:
        read_labels(path)
    message = str(caught.value)
    assert str(path) in message and "'n_correct' row 1" in message and "n_rollouts" in message


@pytest.mark.parametrize("dim", [-1, 0])
def test_calibrator_config_with_a_non_positive_dimension(mine, tmp_path, capsys, dim):
    """`hidden_dim: -1` in a calibrator's config.json: a RuntimeError traceback."""
    config = mine["model"] / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"hidden_dim": dim}))
    out = tmp_path / "q.npy"
    argv = ["predict", "--model", str(mine["model"]), "--data", str(mine["calib"])]
    assert main([*argv, "--levels", "0.5", "--out", str(out), "--quiet"]) == 2
    one_line_error(capsys, str(config), "hidden_dim", str(dim))
    assert not out.exists()


def test_duplicated_parquet_column(mine, tmp_path, capsys):
    """A duplicated column listed pyarrow internals (`__fragment_index`)."""
    path = mine["calib"] / "records.parquet"
    table = pq.read_table(path)
    doubled = pa.Table.from_arrays(
        [*table.columns, table.column("prm_score")], names=[*table.column_names, "prm_score"]
    )
    pq.write_table(doubled, path)
    out = tmp_path / "metrics.json"
    assert main(["evaluate", "--data", str(mine["calib"]), "--out", str(out), "--quiet"]) == 2
    err = one_line_error(capsys, str(path), "'prm_score'", "2 times")
    assert "__fragment_index" not in err and not out.exists()


@pytest.mark.parametrize("length", [250, 245])
def test_long_out_names_are_refused_up_front(mine, tmp_path, capsys, monkeypatch, length):
    """250 characters: a raw "[Errno 36]"; 245: refused only after training had finished."""
    import dprm.models.fit

    monkeypatch.setattr(dprm.models.fit, "fit", lambda *a, **k: pytest.fail("trained first"))
    out = tmp_path / ("m" * length)
    argv = ["train", "--method", "base", "--data", str(mine["calib"]), "--out", str(out)]
    assert main([*argv, "--quiet"]) == 2
    one_line_error(capsys, str(out), f"name of {length} bytes", "at most")
    assert left_behind(tmp_path) == [] and not out.exists()


def test_control_characters_in_out_are_refused_and_shown_with_repr(mine, tmp_path, capsys):
    """A newline in --out was printed as a space (and the name accepted)."""
    out = tmp_path / "a\nb"
    argv = ["ias", "--bon", str(mine["bon"]), "--out", str(out), "--mc-trials", "0", "--quiet"]
    assert main(argv) == 2
    one_line_error(capsys, repr(str(out)), "control characters")
    assert not out.exists()


@pytest.mark.parametrize("command", ["evaluate", "ias"])
def test_hidden_dim_mismatch_names_the_set(mine, tmp_path, capsys, command):
    """evaluate's and ias's hidden-dimension mismatch named no file (predict's did)."""
    import torch

    from dprm.models import REGISTRY

    torch.manual_seed(0)
    model = REGISTRY["ot"](7, {}).save(tmp_path / "ot7")
    data = mine["calib"] if command == "evaluate" else mine["bon"]
    flag = "--data" if command == "evaluate" else "--bon"
    out = tmp_path / ("metrics.json" if command == "evaluate" else "ias")
    argv = [command, flag, str(data), "--model", str(model), "--out", str(out), "--quiet"]
    assert main(argv + (["--mc-trials", "0"] if command == "ias" else [])) == 2
    one_line_error(capsys, str(data), "hidden_dim", str(model), "7")
    assert not out.exists()


# ----------------------------------------------------------------------------- 6. signals
def _alive(process) -> bool:
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def signalled(
    argv: list[str], sig: int, workers: int, log: Path, grace: float = 10.0
) -> tuple[int, str]:
    """Start ``dprm ARGV``; once it runs ``workers`` worker processes send ``sig`` to the driver
    alone, then assert every process it started ends within ``grace`` seconds (by pid).

    Returns:
        The driver's exit code and its stderr (kept in the file ``log``: a pipe would stay
        open as long as any worker holding it lives).
    """
    import psutil

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    with log.open("w") as stderr:
        driver = subprocess.Popen(
            [sys.executable, "-m", "dprm.cli", *argv],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            start_new_session=True,  # only the driver gets the signal, not a process group
        )
    seen: dict[int, psutil.Process] = {}
    try:
        deadline = time.monotonic() + 180
        while True:
            assert driver.poll() is None, f"ended first: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "never started its workers"
            try:
                children = psutil.Process(driver.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                children = []
            seen |= {p.pid: p for p in children}
            spawned = [p for p in children if "spawn_main" in " ".join(_cmdline(p))]
            if len(spawned) >= workers:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # the workers are busy now
        os.kill(driver.pid, sig)
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    end = time.monotonic() + grace
    while time.monotonic() < end and any(_alive(p) for p in seen.values()):
        time.sleep(0.1)
    alive = [p.pid for p in seen.values() if _alive(p)]
    for pid in alive:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert alive == [], f"still running {grace} s after the driver ended: {alive}"
    return driver.returncode, log.read_text()


def _cmdline(process) -> list[str]:
    import psutil

    try:
        return process.cmdline()
    except psutil.Error:
        return []


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["term", "hup"])
def test_tune_workers_end_with_the_driver(mine, tmp_path, sig):
    """SIGTERM / SIGHUP to `tune --jobs 2`: its spawned workers kept searching."""
    out = tmp_path / "search"
    argv = ["tune", "--data", str(mine["calib"]), "--out", str(out), "--methods", "ot,qr"]
    argv += ["--jobs", "2", "--trials", "500", "--quiet"]
    code, err = signalled(argv, sig, workers=2, log=tmp_path / "stderr")
    assert code == 130, err
    assert "interrupted" in err and not (out / "best.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["term", "hup"])
def test_reproduce_workers_end_with_the_driver(tmp_path, sig):
    """SIGTERM / SIGHUP to `reproduce --jobs 2`: its spawned workers kept running."""
    out = tmp_path / "run"
    argv = ["reproduce", "--grid", "demo", "--out", str(out), "--jobs", "2", "--quiet"]
    code, err = signalled(argv, sig, workers=2, log=tmp_path / "stderr")
    assert code == 130, err
    assert "interrupted" in err


#: a ``sitecustomize`` under which every calibrator training of a run never ends (in the
#: workers too: they import it at start), as a long training would
ENDLESS_TRAINING = """
import os

if os.environ.get("DPRM_TEST_ENDLESS_TRAINING"):
    import dprm.orchestrate.calibrator_units as units

    def endless(*args, **kwargs):
        import time

        while True:
            time.sleep(0.2)

    units.train_one = endless
"""


def _start(argv: list[str], log: Path, hooks: Path | None = None) -> subprocess.Popen:
    paths = ([str(hooks)] if hooks is not None else []) + sys.path
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}
    if hooks is not None:
        env["DPRM_TEST_ENDLESS_TRAINING"] = "1"
    with log.open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "dprm.cli", *argv],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            start_new_session=True,
        )


def _workers_of(driver: subprocess.Popen, count: int, log: Path) -> list:
    """The spawned worker processes of ``driver`` once it runs ``count`` of them."""
    import psutil

    deadline = time.monotonic() + 240
    while True:
        assert driver.poll() is None, f"ended first: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, "never started its workers"
        with contextlib.suppress(psutil.NoSuchProcess):
            children = psutil.Process(driver.pid).children(recursive=True)
            spawned = [p for p in children if "spawn_main" in " ".join(_cmdline(p))]
            if len(spawned) >= count:
                return spawned
        time.sleep(0.2)


@pytest.mark.slow
def test_a_resume_ends_the_workers_a_killed_reproduce_left(tmp_path):
    """SIGKILL to a `reproduce --jobs 2` driver: its workers (about 500 MB each) kept running
    and writing into the run folder, beside the resumed run's own workers."""
    from dprm.workers import WORKERS_FILE

    out = tmp_path / "run"
    argv = ["reproduce", "--grid", "demo", "--out", str(out), "--jobs", "2", "--quiet"]
    argv += ["--methods", "ot,qr"]
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(ENDLESS_TRAINING)
    first = _start(argv, tmp_path / "first.stderr", hooks)
    second = None
    try:
        orphans = _workers_of(first, 2, tmp_path / "first.stderr")
        time.sleep(1.0)  # the driver recorded them
        recorded = {e["pid"] for e in json.loads((out / WORKERS_FILE).read_text())["workers"]}
        assert {p.pid for p in orphans} <= recorded
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        time.sleep(2.0)
        assert all(_alive(p) for p in orphans)  # no handler ran: they are still there
        second = _start(argv, tmp_path / "second.stderr", hooks)
        end = time.monotonic() + 240  # the second driver's imports take a while on a busy machine
        while time.monotonic() < end and any(_alive(p) for p in orphans):
            time.sleep(0.2)
        assert not [p.pid for p in orphans if _alive(p)]
        assert second.poll() is None  # the resume goes on
    finally:
        for driver in (first, second):
            if driver is not None and driver.poll() is None:
                driver.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    driver.wait(timeout=60)
                if driver.poll() is None:
                    driver.kill()
        import psutil

        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                process.kill()
