"""Tiny models and the tiny-model variant of ``examples/park.toml`` for the recipe tests.

The variant is ``examples/park.toml`` itself with a few tables replaced (:func:`tiny_recipe`):
a tiny random bigram generator and a tiny random Qwen-style PRM built here (no network, CPU),
real MATH-500 questions (a handful per split), small sampling and training budgets.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("math_verify")

ROOT = Path(__file__).resolve().parents[2]
PARK = ROOT / "examples" / "park.toml"


# The tiny-model builders of the pipeline tests (tests/ is on sys.path: tests/conftest.py).
from llm import tiny_models  # noqa: E402


@pytest.fixture(autouse=True)
def _one_torch_thread(one_thread):
    """Every test here runs with one intra-op thread (see tests/conftest.py)."""


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory) -> dict[str, Path]:
    """A tiny bigram generator ("qwen" in its name: Qwen chat template) and a tiny Qwen PRM."""
    root = tmp_path_factory.mktemp("recipe-models")
    tokenizers = tiny_models.build_tokenizers(root / "tok")
    return {
        "lm": tiny_models.build_bigram_lm(tokenizers["qwen"], root / "tiny-qwen-lm"),
        "prm": tiny_models.build_qwen_prm(tokenizers["qwen"], root / "tiny-prm"),
    }


@pytest.fixture(scope="session")
def question_files(tmp_path_factory) -> dict[str, Path]:
    """Real MATH-500 questions, disjoint per split (8 train, 3 ID, 3 'OOD'), as JSONL files.

    Most have gold 6, 7 or 8, answers the tiny generator writes, so labels are not all zero.
    """
    from dprm.llm.questions import packaged_path, read_records

    rows = read_records(packaged_path("math500"))
    root = tmp_path_factory.mktemp("recipe-questions")
    hits = [i for i, r in enumerate(rows) if str(r["answer"]).strip() in ("6", "7", "8")]
    picks = {
        "train": [rows[i] for i in hits[:6] + [0, 1]],
        "id": [rows[i] for i in hits[6:8] + [2]],
        "ood": [rows[i] for i in hits[8:10] + [3]],
    }
    out = {}
    for split, items in picks.items():
        path = root / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in items))
        out[split] = path
    return out


@pytest.fixture(scope="session")
def local_run(tmp_path_factory, tiny_dirs, question_files) -> tuple[Path, Path, Path]:
    """The tiny recipe run once with the local executor: (root, recipe file, run directory)."""
    from dprm.cli import main

    root = tmp_path_factory.mktemp("recipe-local")
    recipe = write_recipe(root / "tiny.toml", tiny_recipe(tiny_dirs, question_files))
    out = root / "out"
    assert main(["run", str(recipe), "--executor", "local", "--out", str(out), "--quiet"]) == 0
    return root, recipe, out


def tiny_recipe(tiny_dirs: dict[str, Path], questions: dict[str, Path], **tables: Any) -> dict:
    """``examples/park.toml`` with tiny models, a handful of questions and small budgets.

    ``tables`` replace or add whole tables (e.g. ``calibrators={...}``).
    """
    recipe = tomllib.loads(PARK.read_text())
    recipe["run"] |= {"name": "tiny", "shards": 2, "questions_per_part": 2}
    recipe["questions"] = {split: [str(path)] for split, path in questions.items()}
    recipe["sampling"] |= {"n": 2, "max_new_tokens": 64}
    recipe["rollout"] |= {"n": 2, "max_steps": 3, "max_new_tokens": 48}
    recipe["bon"] = {"n": 4}
    recipe["grading"] = {"workers": 1, "timeout": 20.0}
    recipe["generators"] = [
        {"name": "tiny-lm", "model": str(tiny_dirs["lm"]), "backend": "transformers",
         "device": "cpu", "gpus": 0},
    ]  # fmt: skip
    recipe["prms"] = [
        {"name": "tiny-prm", "model": str(tiny_dirs["prm"]), "device": "cpu",
         "dtype": "float32", "gpus": 0},
    ]  # fmt: skip
    # tiny labels are mostly 0: OT's collapse check rightly refuses a map fitted to them, so
    # the tiny run trains QR and isotonic regression
    recipe["calibrators"] = {
        "methods": ["qr", "isotonic"],
        "seeds": 1,
        "overrides": {"qr": {"max_steps": 30, "eval_every": 10}},
    }
    recipe["ias"] = {"beta": 0.1, "mc_trials": 5}
    recipe["executor"]["ray"] |= {"cpus_per_task": 1}
    return recipe | tables


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return repr(value)


def to_toml(data: dict, prefix: str = "") -> str:
    """A small TOML writer for recipes (tables, arrays of tables, scalars and lists)."""
    lines, nested = [], []
    for key, value in data.items():
        if isinstance(value, dict):
            nested.append((key, value))
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for item in value:
                lines.append(f"\n[[{prefix}{key}]]\n" + to_toml(item, f"{prefix}{key}."))
        else:
            lines.append(f"{key} = {_value(value)}")
    out = "\n".join(lines) + "\n"
    for key, value in nested:
        out += f"\n[{prefix}{key}]\n" + to_toml(value, f"{prefix}{key}.")
    return out


def write_recipe(path: Path, recipe: dict) -> Path:
    path.write_text(to_toml(recipe))
    return path
