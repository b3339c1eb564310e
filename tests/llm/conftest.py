"""Session fixtures for the pipeline tests: tiny models built once per test process."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import tiny_models

pytest.importorskip("transformers")
pytest.importorskip("math_verify")


@pytest.fixture(autouse=True)
def _one_torch_thread(one_thread):
    """Every test here runs with one intra-op thread (see tests/conftest.py)."""


@pytest.fixture(scope="session")
def question_sets() -> Path:
    """The question sets packaged with dprm (``*.jsonl.gz``)."""
    from dprm.llm.questions import packaged_path

    return packaged_path("math500").parent


@pytest.fixture(scope="session")
def tokenizer_dirs(tmp_path_factory) -> dict[str, Path]:
    return tiny_models.build_tokenizers(tmp_path_factory.mktemp("tokenizers"))


@pytest.fixture(scope="session")
def lm_dir(tmp_path_factory, tokenizer_dirs) -> Path:
    # "qwen" in the name: the prompt template follows the model name, as in the reference
    return tiny_models.build_bigram_lm(
        tokenizer_dirs["qwen"], tmp_path_factory.mktemp("models") / "tiny-qwen-lm"
    )


@pytest.fixture(scope="session")
def qwen_prm_dir(tmp_path_factory, tokenizer_dirs) -> Path:
    return tiny_models.build_qwen_prm(
        tokenizer_dirs["qwen"], tmp_path_factory.mktemp("models") / "tiny-prm"
    )


@pytest.fixture(scope="session")
def qwen_prm(qwen_prm_dir):
    from dprm.llm.prm import load_prm

    return load_prm(str(qwen_prm_dir), device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def generator(lm_dir):
    from dprm.llm.generate import load_generator

    return load_generator("transformers", str(lm_dir), device="cpu")


@pytest.fixture(scope="session")
def grading_pool():
    from dprm.llm.grading import GradingPool

    with GradingPool(workers=1, timeout=20.0) as pool:
        yield pool


@pytest.fixture(scope="session")
def toy_questions():
    """Three questions in the normalised layout (gold 7 for the two the tiny LM can answer)."""
    import pandas as pd

    return pd.DataFrame(
        {
            "question_id": ["toy/0", "toy/1", "toy/2"],
            "question": ["What is 3 + 4?", "What is 2 + 5?", "What is 9 + 9?"],
            "answer": ["7", "7", "18"],
        }
    )


@pytest.fixture(scope="session")
def toy_trajectories(toy_questions):
    """Hand-written trajectories (two per question) covering every labelling case."""
    import pandas as pd

    responses = {
        "toy/0": [
            tiny_models.solution(3, 4, 7),
            "## Step 1: 3 + 4 = 8.\n\nSo the answer is $\\boxed{8}$.",
        ],
        "toy/1": [
            tiny_models.solution(2, 5, 6),
            "## Step 1: think.\n\n## Step 2: 2 + 5 = 7.\n\n## Step 3: more.",
        ],
        "toy/2": ["I am not sure.", tiny_models.solution(9, 9, 18)],
    }
    rows = []
    for q in toy_questions.itertuples():
        for rid, text in enumerate(responses[q.question_id]):
            rows.append({"question_id": q.question_id, "response_id": rid, "question": q.question,
                         "answer": q.answer, "response": text})  # fmt: skip
    return pd.DataFrame(rows)
