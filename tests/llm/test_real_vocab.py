"""The PRM wrappers on the real vocabularies (tests/fixtures/tokenizers), tiny random weights.

Each of these faults has a test here: (1) model loading on the declared transformers floor
(every test loads through ``load_prm`` on a directory, as a hub id would), (2) Math-Shepherd's
tokenizer from ``tokenizer.model`` alone with the ``llm`` extra's packages, (3) question-only
and whitespace-ending steps under transformers 5.x, (4) an empty last step.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from fixtures import real_prms  # noqa: E402

pytest.importorskip("sentencepiece", reason="the llm extra installs sentencepiece")
pytest.importorskip("google.protobuf", reason="the llm extra installs protobuf")

QUESTION = "What is $1 + 1$?"
STEPS = [
    "## Step 1: Add the numbers.\n$1 + 1 = 2$.",
    "Therefore, the final answer is: $\\boxed{2}$.",
]


@pytest.fixture(scope="module")
def prms(tmp_path_factory):
    from dprm.llm.prm import load_prm

    root = tmp_path_factory.mktemp("real")
    dirs = {
        "math-shepherd": real_prms.build_shepherd(root / "math-shepherd-tiny"),
        "reasoneval": real_prms.build_reasoneval(root / "reasoneval-tiny"),
        "qwen-prm": real_prms.build_qwen_prm(root / "qwen2.5-math-prm-tiny"),
    }
    return {k: load_prm(str(d), device="cpu", dtype="float32") for k, d in dirs.items()}, dirs


def _math500_step_lists(limit: int = 40) -> list[list[str]]:
    from dprm.llm.questions import load_questions

    frame = load_questions("math500", limit=limit)
    return [f"{row.question}\n\n{row.answer}".split("\n\n") for row in frame.itertuples()]


def test_llm_extra_has_what_sentencepiece_tokenizers_need():
    """Fault 2: Math-Shepherd/ReasonEval ship only tokenizer.model (LlamaTokenizer)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    llm = " ".join(extras["optional-dependencies"]["llm"])
    assert "sentencepiece" in llm and "protobuf" in llm


@pytest.mark.parametrize("legacy", [None, True, False])
def test_shepherd_tokenizer_loads_from_tokenizer_model_alone(tmp_path, legacy):
    from transformers import AutoTokenizer

    from dprm.llm.prm import MathShepherdPRM

    path = real_prms.shepherd_tokenizer(tmp_path / "tok", legacy=legacy)
    assert not (path / "tokenizer.json").exists()
    tok = AutoTokenizer.from_pretrained(path)
    prm = MathShepherdPRM.__new__(MathShepherdPRM)  # the wrapper's token logic, no model
    prm.tokenizer = tok
    prm._setup()
    assert prm.tag_id == real_prms.SHEPHERD_TAG_ID
    assert prm.candidate_ids == [real_prms.PLUS_ID, real_prms.MINUS_ID]
    for steps in ([""], ["a ", ""], STEPS):
        enc = prm.encode(QUESTION, steps)
        assert [enc.input_ids[p] for p in enc.positions] == [12902] * len(steps)


def test_real_special_ids(prms):
    """Fault 1 (loading on the declared floor) and the real ids the wrappers read at."""
    loaded, _ = prms
    shepherd = loaded["math-shepherd"]
    assert shepherd.tag_id == 12902 and shepherd.candidate_ids == [648, 387]
    assert loaded["qwen-prm"].separator_id == 151651
    assert loaded["reasoneval"].separator_id == 1 and loaded["reasoneval"].bos_id == 1


@pytest.mark.parametrize("kind", ["math-shepherd", "qwen-prm", "reasoneval"])
@pytest.mark.parametrize(
    "steps",
    [
        [""],  # question only (fault 3 on transformers 5.x for Math-Shepherd)
        STEPS,
        [*STEPS, ""],  # truncated response: text ends in "\n\n" (fault 4)
        ["Step one ", "Step two  ", "end"],  # whitespace-ending steps (fault 3)
        ["", "", ""],
    ],
    ids=["question-only", "two-steps", "empty-last", "space-ending", "all-empty"],
)
def test_one_readout_per_step(prms, kind, steps):
    prm = prms[0][kind]
    enc = prm.prepare(QUESTION, steps)
    assert len(enc.positions) == len(steps) and not enc.truncated
    if kind == "math-shepherd":
        assert [enc.input_ids[p] for p in enc.positions] == [12902] * len(steps)
    if kind == "qwen-prm":
        assert [enc.input_ids[p] for p in enc.positions] == [151651] * len(steps)
    out = prm.forward([enc])[0]
    assert out.scores.shape == (len(steps),) and out.hidden.shape == (len(steps), prm.hidden_dim)


@pytest.mark.parametrize("kind", ["math-shepherd", "qwen-prm", "reasoneval"])
def test_real_texts_position_counts(prms, kind):
    prm = prms[0][kind]
    for steps in _math500_step_lists():
        assert len(prm.prepare(QUESTION, steps).positions) == len(steps)


def test_shepherd_matches_reference_text_when_it_is_well_formed(prms):
    """Where the reference's text rule is well defined, the ids are exactly the reference's."""
    prm = prms[0]["math-shepherd"]
    for steps in _math500_step_lists(10):
        steps = [s.strip() or "x" for s in steps]
        answer = "\n\n".join(steps).replace("\n\n", " ки\n\n") + " ки"
        assert prm.prepare(QUESTION, steps).input_ids == prm.tokenizer.encode(
            f"{QUESTION} {answer}"
        )


def test_reasoneval_cuts_the_raw_ids_like_the_reference(prms):
    prm = prms[0]["reasoneval"]
    steps = [f"step number {i} is here" for i in range(40)]
    raw = prm._raw_ids(QUESTION, steps)
    old = prm.max_tokens
    prm.max_tokens = len(raw) // 2
    try:
        enc = prm.prepare(QUESTION, steps)
    finally:
        prm.max_tokens = old
    cut = prm._adjust(raw[: len(raw) // 2], len(steps))
    assert enc.truncated and enc.positions == [p for p in cut.positions if p < len(cut.input_ids)]
    assert len(enc.input_ids) <= len(raw) // 2


def test_token_classification_finds_a_merging_separator(tmp_path):
    """TRL's default separator "\\n" merges into "\\n\\n" in one string; steps are encoded one
    by one, so every step still gets its readout."""
    import torch
    from transformers import Qwen2Config, Qwen2ForTokenClassification

    from dprm.llm.prm import load_prm

    tok = real_prms.qwen_prm_tokenizer(tmp_path / "tok")
    torch.manual_seed(0)
    model = Qwen2ForTokenClassification(real_prms._small(Qwen2Config, 152064, num_labels=2))
    model.save_pretrained(tmp_path / "tc")
    real_prms._copy_tokenizer(tok, tmp_path / "tc")
    prm = load_prm(str(tmp_path / "tc"), "token-classification", device="cpu", separator="\n")
    steps = ["a\n", "b", ""]
    enc = prm.prepare(QUESTION, steps)
    assert len(enc.positions) == 3 and {enc.input_ids[p] for p in enc.positions} == {198}


def test_model_card_prompt_is_one_option_away(prms):
    from dprm.llm.prm import QWEN_PRM_SYSTEMS, load_prm

    _, dirs = prms
    park = prms[0]["qwen-prm"]
    card = load_prm(str(dirs["qwen-prm"]), device="cpu", dtype="float32", prompt="model-card")
    assert park.system == QWEN_PRM_SYSTEMS["park"] and "in \\boxed" in park.system
    assert card.system == QWEN_PRM_SYSTEMS["model-card"] and "within \\boxed" in card.system
    assert card.provenance()["prm_system_prompt"] == card.system


def test_dtype_keyword_follows_the_installed_transformers(monkeypatch):
    import transformers

    from dprm.llm.generate import dtype_kwargs

    monkeypatch.setattr(transformers, "__version__", "4.48.2")
    assert dtype_kwargs("x") == {"torch_dtype": "x"}
    monkeypatch.setattr(transformers, "__version__", "5.0.0")
    assert dtype_kwargs("x") == {"dtype": "x"}


def test_configs_mirror_the_real_ones(prms):
    _, dirs = prms
    archs = {
        k: json.loads((d / "config.json").read_text())["architectures"] for k, d in dirs.items()
    }
    assert archs == {"math-shepherd": ["MistralForCausalLM"], "reasoneval": ["ReasonEval7B"],
                     "qwen-prm": ["Qwen2ForProcessRewardModel"]}  # fmt: skip
    from safetensors import safe_open

    with safe_open(str(dirs["qwen-prm"] / "model.safetensors"), "pt") as handle:
        keys = set(handle.keys())
    assert {"score.0.weight", "score.2.weight"} <= keys
