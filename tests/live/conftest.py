"""Fixtures for the live-inference tests: the pipeline's tiny models plus small calibrators.

The models come from the pipeline tests' builders (``tests/llm/tiny_models.py``): a bigram
Qwen2 LM that writes ``## Step k:`` steps separated by blank lines and boxed answers 7, 6 or 8,
and a random Qwen2.5-Math-PRM-layout PRM. The calibrators are fitted on that PRM's own
question states (synthetic labels that depend on the state), so their budgets vary by question.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("math_verify")

ROOT = Path(__file__).resolve().parents[2]
#: four short MATH-500 problems whose gold answers (6, 6, 7, 8) the tiny LM can hit
QUESTION_IDS = (
    "test/prealgebra/505.json",
    "test/algebra/1255.json",
    "test/algebra/346.json",
    "test/algebra/246.json",
)
N_CALIBRATION_QUESTIONS = 48


# The tiny-model builders of the pipeline tests (tests/ is on sys.path: tests/conftest.py).
from llm import tiny_models  # noqa: E402


@pytest.fixture(autouse=True)
def _one_torch_thread(one_thread):
    """Every test here runs with one intra-op thread (see tests/conftest.py)."""


@pytest.fixture(scope="session")
def math500() -> Path:
    """MATH-500 as packaged with dprm (``math500.jsonl.gz``)."""
    from dprm.llm.questions import packaged_path

    return packaged_path("math500")


@pytest.fixture(scope="session")
def questions_file(tmp_path_factory, math500) -> Path:
    """The chosen MATH-500 rows, verbatim (raw layout), as a question file."""
    rows = {}
    for line in gzip.decompress(math500.read_bytes()).decode("utf-8").splitlines():
        row = json.loads(line)
        if row["unique_id"] in QUESTION_IDS:
            rows[row["unique_id"]] = line
    path = tmp_path_factory.mktemp("questions") / "math500_subset.jsonl"
    path.write_text("".join(rows[q] + "\n" for q in QUESTION_IDS), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory, math500) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("live-models")
    tokenizers = tiny_models.build_tokenizers(root / "tokenizers")
    return {
        "lm": tiny_models.build_bigram_lm(tokenizers["qwen"], root / "tiny-qwen-lm"),
        "prm": tiny_models.build_qwen_prm(tokenizers["qwen"], root / "tiny-prm"),
    }


@pytest.fixture(scope="session")
def prm(model_dirs):
    from dprm.llm.prm import load_prm

    return load_prm(str(model_dirs["prm"]), device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def generator(model_dirs):
    from dprm.llm.generate import load_generator

    return load_generator("transformers", str(model_dirs["lm"]), device="cpu")


@pytest.fixture(scope="session")
def grading_pool():
    from dprm.llm.grading import GradingPool

    with GradingPool(workers=1, timeout=20.0) as pool:
        yield pool


def _calibration_set(prm, math500: Path):
    """Question states of the first MATH-500 problems with labels that depend on the state."""
    from dprm.llm.questions import load_questions
    from fixtures.calibration import labelled_states

    questions = load_questions(math500, limit=N_CALIBRATION_QUESTIONS)
    scores, hidden = prm.question_state(questions["question"].tolist())
    rng = np.random.default_rng(0)
    z = (hidden - hidden.mean(0)) / (hidden.std(0) + 1e-6) @ rng.normal(size=hidden.shape[1])
    mu = 2.0 * z / np.sqrt(hidden.shape[1])
    return labelled_states(scores, hidden, mu, 6, rng)


@pytest.fixture(scope="session")
def calibrator_dirs(tmp_path_factory, prm, math500) -> dict[str, Path]:
    """``mono`` (distribution), ``qr`` (fixed levels) and ``base`` (point) calibrator directories.

    ``mono`` shares ``ot``'s monotone quantile-map network (same kind, same mixture rule) and
    learns the state dependence in a few dozen steps, where ``ot`` needs far more.
    """
    from dprm.models.fit import fit
    from dprm.models.raw_score import RawScoreCalibrator

    root = tmp_path_factory.mktemp("calibrators")
    data = _calibration_set(prm, math500)
    # the full-size networks and no weight decay: these few steps must learn the state
    # dependence (the small-data defaults for <= 50 training questions would flatten it)
    settings = {
        "mono": {"max_steps": 40, "eval_every": 20, "weight_decay": 0.0,
                 "context_hidden": "64", "context_dim": 16},
        "qr": {"max_steps": 100, "eval_every": 50, "weight_decay": 0.0},
    }  # fmt: skip
    out = {}
    for method, overrides in settings.items():
        model = fit(method, data, overrides={"batch_size": 64, **overrides}, seed=0, progress=False)
        out[method] = model.save(root / method)
    out["base"] = RawScoreCalibrator(prm.hidden_dim).save(root / "base")
    return out


def brute_force_budget(quantiles, C: float, n_max: int) -> int:
    """docs/design.md §4, written out: min{n : mean_m 1 - (1 - clip(q_m))^n >= C}, else n_max.

    A 1-element ``quantiles`` is the point rule.
    """
    q = np.clip(np.asarray(quantiles, dtype=np.float64).ravel(), 1e-4, 1 - 1e-4)
    for n in range(1, n_max + 1):
        if np.mean(1.0 - (1.0 - q) ** n) >= C:
            return n
    return n_max


@pytest.fixture(scope="session")
def budget_rule():
    """:func:`brute_force_budget`, handed to the tests as a fixture."""
    return brute_force_budget


@pytest.fixture(scope="session")
def load_cprm(prm):
    """``load_cprm(calibrator_dir, **options)`` -> a CalibratedPRM on the session's PRM."""
    from dprm.live import CalibratedPRM
    from dprm.models import load

    def make(directory, **options):
        return CalibratedPRM(prm, load(directory), calibrator_path=str(directory), **options)

    return make


@pytest.fixture(scope="session")
def tiny():
    """The pipeline's tiny-model builders module (``tests/llm/tiny_models.py``)."""
    return tiny_models
