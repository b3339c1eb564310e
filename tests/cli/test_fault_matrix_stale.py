"""Resumes notice an input changed in place: every resumable command, one case each.

Each case runs a command, changes one of its inputs in place -- same size, modification time
restored, so only the content tells -- and runs the command again on the same ``--out``:

* ``generate`` (questions file), ``rollout`` (generator weights), ``embed`` (labels) redo the
  output, say so in one line, and give a fresh run's output;
* ``tune`` refuses a search whose data changed (one line naming the content change); with
  ``--overwrite`` it gives a fresh search's result;
* ``run`` redoes what reads a local PRM whose ``model.safetensors`` changed, and gives a fresh
  run's results;
* ``reproduce`` with ``--tune-trials`` starts a search over when the world's data changed (its
  trials are a fresh search's), saying so in one line;
* ``solve`` refuses to continue a run directory whose calibrator changed.

Inputs are private copies under ``tmp_path``; shared fixtures are never modified.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("transformers")
pytest.importorskip("math_verify")
pytest.importorskip("optuna")

from dprm.cli import main  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from fixtures.cli_errors import one_line_error  # noqa: E402
from llm import tiny_models  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLING = ["--n", "2", "--grader-workers", "1", "--no-progress", "--device", "cpu"]
TUNE = ["--trials", "2", "--max-steps", "20", "--quiet", "--methods", "qr"]


# ----------------------------------------------------------------------------- helpers
def in_place(path: Path, write: Callable[[Path], None]) -> None:
    """Rewrite ``path`` with ``write(path)``; assert the size is unchanged; restore the mtime."""
    stat = path.stat()
    before = path.read_bytes()
    write(path)
    assert path.stat().st_size == stat.st_size, "the edit must keep the size"
    assert path.read_bytes() != before, "the edit must change the content"
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_mtime_ns == stat.st_mtime_ns


def write_plain_parquet(path: Path, frame: pd.DataFrame) -> None:
    """Parquet without compression, dictionaries or statistics: permuting the values of a
    fixed-width column gives a file of the same size."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(table, path, compression="none", use_dictionary=False, write_statistics=False)


def permute_column(path: Path, columns: list[str]) -> None:
    """Reverse the rows of ``columns`` of a plain parquet file in place (same size)."""

    def write(target: Path) -> None:
        frame = pd.read_parquet(target)
        for column in columns:
            frame[column] = frame[column].to_numpy()[::-1].copy()
        write_plain_parquet(target, frame)

    in_place(path, write)


def perturb_weights(model_dir: Path, scale: float = 1.5) -> None:
    """Scale every tensor of ``model_dir/model.safetensors`` in place (same size and layout)."""
    from safetensors.torch import load_file, save_file

    path = model_dir / "model.safetensors"

    def write(target: Path) -> None:
        tensors = load_file(target)
        save_file(
            {k: (v * scale).contiguous() for k, v in tensors.items()}, target, {"format": "pt"}
        )

    in_place(path, write)


def changed_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "changed since" in line]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny bigram LM and a tiny Qwen PRM (copy before changing them)."""
    root = tmp_path_factory.mktemp("stale-models")
    tokenizers = tiny_models.build_tokenizers(root / "tok")
    return {
        "lm": tiny_models.build_bigram_lm(tokenizers["qwen"], root / "tiny-qwen-lm"),
        "prm": tiny_models.build_qwen_prm(tokenizers["qwen"], root / "tiny-prm"),
    }


def private(models: dict[str, Path], name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(models[name], tmp_path / f"my-{name}"))


QUESTIONS = [
    {"question_id": "q/0", "question": "What is 3 + 4?", "answer": "7"},
    {"question_id": "q/1", "question": "What is 2 + 5?", "answer": "7"},
]


def questions_file(root: Path) -> Path:
    path = root / "questions.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return path


# ----------------------------------------------------------------------------- pipeline stages
def generate(questions: Path, lm: Path, out: Path) -> list[str]:
    return ["generate", "--questions", str(questions), "--model", str(lm),
            "--max-new-tokens", "24", "--out", str(out), *SAMPLING]  # fmt: skip


def test_generate_redoes_trajectories_of_a_questions_file_changed_in_place(
    models, tmp_path, capsys
):
    questions = questions_file(tmp_path)
    out = tmp_path / "traj.parquet"
    assert main(generate(questions, models["lm"], out)) == 0
    in_place(questions, lambda p: p.write_text(p.read_text().replace("3 + 4", "4 + 3")))
    capsys.readouterr()
    assert main(generate(questions, models["lm"], out)) == 0
    lines = changed_lines(capsys.readouterr().err)
    assert main(generate(questions, models["lm"], tmp_path / "fresh.parquet")) == 0
    resumed, fresh = pd.read_parquet(out), pd.read_parquet(tmp_path / "fresh.parquet")
    assert "What is 4 + 3?" in set(resumed["question"])
    pd.testing.assert_frame_equal(resumed, fresh)
    assert len(lines) == 1 and "questions.jsonl" in lines[0], lines


def test_rollout_redoes_labels_of_a_generator_changed_in_place(models, tmp_path, capsys):
    lm = private(models, "lm", tmp_path)
    questions = questions_file(tmp_path)
    trajectories = tmp_path / "traj.parquet"
    assert main(generate(questions, models["lm"], trajectories)) == 0

    def rollout(out: Path) -> list[str]:
        return ["rollout", "--trajectories", str(trajectories), "--model", str(lm),
                "--max-new-tokens", "16", "--max-steps", "2", "--out", str(out), *SAMPLING]  # fmt: skip

    out = tmp_path / "labels.parquet"
    assert main(rollout(out)) == 0
    before = pd.read_parquet(out)
    perturb_weights(lm, scale=-1.0)
    capsys.readouterr()
    assert main(rollout(out)) == 0
    lines = changed_lines(capsys.readouterr().err)
    assert main(rollout(tmp_path / "fresh.parquet")) == 0
    resumed, fresh = pd.read_parquet(out), pd.read_parquet(tmp_path / "fresh.parquet")
    pd.testing.assert_frame_equal(resumed, fresh)
    assert not resumed.equals(before), "the changed generator must change the rollouts"
    assert len(lines) == 1 and str(lm.resolve()) in lines[0], lines


def test_embed_redoes_a_calibration_set_of_labels_changed_in_place(models, tmp_path, capsys):
    from dprm.data.contract import read_calibration_set

    frame = tiny_models.label_rows(
        pd.DataFrame(
            {
                "question_id": ["q/0", "q/0", "q/1"],
                "response_id": [0, 1, 0],
                "question": ["What is 3 + 4?"] * 2 + ["What is 2 + 5?"],
                "response": [
                    tiny_models.solution(3, 4, 7),
                    tiny_models.solution(3, 4, 8),
                    tiny_models.solution(2, 5, 7),
                ],
            }
        )
    )
    labels = tmp_path / "labels.parquet"
    write_plain_parquet(labels, frame)

    def embed(out: Path) -> list[str]:
        return ["embed", "--labels", str(labels), "--prm", str(models["prm"]), "--device", "cpu",
                "--dtype", "float32", "--out", str(out), "--no-progress"]  # fmt: skip

    out = tmp_path / "cal"
    assert main(embed(out)) == 0
    permute_column(labels, ["n_correct", "success_prob"])
    capsys.readouterr()
    assert main(embed(out)) == 0
    captured = capsys.readouterr()
    assert "already finished" not in captured.out
    lines = changed_lines(captured.err)
    assert len(lines) == 1 and "labels.parquet" in lines[0], lines
    assert main(embed(tmp_path / "fresh")) == 0
    resumed, fresh = read_calibration_set(out), read_calibration_set(tmp_path / "fresh")
    pd.testing.assert_frame_equal(resumed.records, fresh.records)
    np.testing.assert_array_equal(np.asarray(resumed.hidden), np.asarray(fresh.hidden))


# ----------------------------------------------------------------------------- tune
def test_tune_refuses_data_changed_in_place_and_overwrite_is_a_fresh_search(
    tiny_world, tmp_path, capsys
):
    calib = Path(shutil.copytree(tiny_world()["train/calib"], tmp_path / "calib"))
    write_plain_parquet(calib / "records.parquet", pd.read_parquet(calib / "records.parquet"))
    out = tmp_path / "search"
    args = ["tune", "--data", str(calib), "--out", str(out), *TUNE]
    assert main(args) == 0
    permute_column(calib / "records.parquet", ["success_prob", "n_rollouts"])
    capsys.readouterr()
    assert main(args) == 2
    error = one_line_error(capsys, "study.db", "--overwrite")
    assert "changed" in error
    assert main([*args, "--overwrite"]) == 0
    fresh = tmp_path / "fresh"
    assert main(["tune", "--data", str(calib), "--out", str(fresh), *TUNE]) == 0
    resumed = json.loads((out / "best.json").read_text())["methods"]["qr"]
    again = json.loads((fresh / "best.json").read_text())["methods"]["qr"]
    assert resumed["validation"] == again["validation"]
    assert resumed["trial"] == again["trial"]


# ----------------------------------------------------------------------------- run
@pytest.mark.slow
def test_run_redoes_what_reads_a_prm_changed_in_place(models, tmp_path):
    from dprm.io import read_json
    from dprm.recipe import load_recipe, run_recipe
    from recipe.conftest import write_recipe
    from recipe.test_park_source import park_recipe
    from recipe.test_resume import _metrics, _rerun_units

    dirs = {"lm": models["lm"], "prm": private(models, "prm", tmp_path)}
    question_files = {}
    for split in ("train", "id", "ood"):
        (tmp_path / split).mkdir()
        question_files[split] = questions_file(tmp_path / split)
    recipe = load_recipe(
        write_recipe(tmp_path / "r.toml", park_recipe(tmp_path, dirs, question_files))
    )

    def run(out: Path, logs: list[str]) -> pd.DataFrame:
        outcome = run_recipe(recipe, out, progress=False, log=logs.append)
        assert outcome.ok, outcome.failures
        return _metrics(read_json(out / "results.json"))

    out = tmp_path / "out"
    before = run(out, [])
    perturb_weights(dirs["prm"])
    logs: list[str] = []
    after = run(out, logs)
    fresh = run(tmp_path / "fresh", [])
    pd.testing.assert_frame_equal(after, fresh)
    assert not after.equals(before), "the changed PRM must change the results"
    lines = changed_lines("\n".join(logs))
    assert len(lines) == 1 and "my-prm" in lines[0], logs
    assert any(k.startswith("embed/") for k in _rerun_units(out))


# ----------------------------------------------------------------------------- reproduce
@pytest.mark.slow
def test_reproduce_starts_a_search_over_when_its_data_changed(tmp_path):
    import optuna

    from dprm.data import read_calibration_set
    from dprm.models.tune import storage_url, tuned_overrides
    from dprm.orchestrate.grid import resolve
    from dprm.orchestrate.reproduce import reproduce

    steps = {"qr": {"max_steps": 10, "eval_every": 10}}
    config = resolve("tiny", methods=["qr"], overrides=steps, keep_worlds=True, tune_trials=2)
    config.mc_trials = 5
    out = tmp_path / "run"
    assert reproduce(out, config, progress=False, log=lambda s: None).ok
    world = config.worlds[0]
    hidden = out / "worlds" / world / "train" / "calib" / "hidden_states.npy"

    def negate(path: Path) -> None:
        array = np.load(path, mmap_mode="r+")
        array[: len(array) // 2] *= -1
        array.flush()
        del array

    in_place(hidden, negate)
    logs: list[str] = []
    assert reproduce(out, config, progress=False, log=logs.append).ok

    fresh = tmp_path / "fresh-search"
    data = read_calibration_set(hidden.parent)
    tuned_overrides("qr", data, fresh, trials=2, max_steps=10)

    def values(directory: Path) -> list[float | None]:
        study = optuna.load_study(study_name="qr", storage=storage_url(directory))
        return [t.value for t in study.get_trials(deepcopy=False)]

    assert values(out / "tune" / world) == values(fresh)
    lines = changed_lines("\n".join(logs))
    assert len(lines) == 1 and "train/calib" in lines[0], logs


# ----------------------------------------------------------------------------- solve
def test_solve_refuses_a_run_whose_calibrator_changed_in_place(models, tmp_path, capsys):
    import torch

    from dprm.models import REGISTRY

    torch.manual_seed(0)
    hidden = json.loads((models["prm"] / "config.json").read_text())["hidden_size"]
    calibrator = REGISTRY["qr"](hidden, {}).save(tmp_path / "qr")
    questions = questions_file(tmp_path)
    out = tmp_path / "live"
    args = ["solve", "--mode", "bon", "--questions", str(questions), "--generator", str(models["lm"]),
            "--prm", str(models["prm"]), "--calibrator", str(calibrator), "--out", str(out),
            "--n-max", "2", "--baseline-n", "0", "--max-new-tokens", "24", "--prm-device", "cpu",
            "--prm-dtype", "float32", "--device", "cpu", "--grade-workers", "1", "--quiet"]  # fmt: skip
    assert main(args) == 0
    other = REGISTRY["qr"](hidden, {}).save(tmp_path / "other")  # same layout, other weights
    for name in ("model.safetensors", "config.json"):  # a retrained calibrator copied over it
        content = (Path(other) / name).read_bytes()
        in_place(Path(calibrator) / name, lambda p, content=content: p.write_bytes(content))
    records = (out / "bon.jsonl").read_bytes()
    capsys.readouterr()
    assert main(args) == 2
    assert "changed" in one_line_error(capsys, "--calibrator", "run.json")
    assert (out / "bon.jsonl").read_bytes() == records
