"""The shipped arithmetic-world models: load through transformers and dprm, and are trained."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

pytest.importorskip("transformers")

WORLD = Path(str(resources.files("dprm.llm") / "worlds" / "arith"))
GENERATOR = WORLD / "generator"
PRM = WORLD / "prm"


def test_shipped_files_are_small_safetensors_with_provenance():
    files = [p for p in WORLD.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 10 * 2**20
    assert max(p.stat().st_size for p in files) <= 2 * 2**20
    for folder in (GENERATOR, PRM):
        assert (folder / "model.safetensors").is_file()
        assert not list(folder.glob("*.bin")), "weights must not be pickles"
        record = json.loads((folder / "provenance.json").read_text())
        assert record["script"] == "tools/train_world.py"
        assert isinstance(record["seed"], int) and len(record["commit"]) == 40


def test_generator_is_a_standard_qwen2_causal_lm_vllm_can_serve():
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(GENERATOR)
    assert config.architectures == ["Qwen2ForCausalLM"]
    assert config.hidden_size // config.num_attention_heads >= 32
    model = AutoModelForCausalLM.from_pretrained(GENERATOR)
    assert type(model).__name__ == "Qwen2ForCausalLM"


def test_tokenizer_round_trips_steps_and_separators():
    from transformers import PreTrainedTokenizerFast

    from dprm.llm.prompts import build_prompt, split_steps
    from dprm.llm.tasks.arith_sets import set_rows

    tok = PreTrainedTokenizerFast(tokenizer_file=str(GENERATOR / "tokenizer.json"))
    for row in set_rows("ood")[:10]:
        text = row["solution"]
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text
        assert split_steps(tok.decode(ids)) == split_steps(text)
        prompt = build_prompt(row["question"], str(GENERATOR))
        assert tok.decode(tok.encode(prompt, add_special_tokens=False)) == prompt
    newline = tok.encode("\n", add_special_tokens=False)
    assert tok.encode("\n\n", add_special_tokens=False) == newline * 2


def test_generator_writes_the_step_format_it_was_trained_on():
    """Random weights fail this: greedy decoding must give parsable steps and a boxed answer."""
    from dprm.llm.generate import load_generator
    from dprm.llm.prompts import build_prompt, split_steps
    from dprm.llm.questions import extract_boxed
    from dprm.llm.tasks.arith import parse_step
    from dprm.llm.tasks.arith_sets import set_rows

    generator = load_generator("transformers", str(GENERATOR), device="cpu")
    rows = set_rows("id")[:4]
    prompts = [build_prompt(r["question"], str(GENERATOR)) for r in rows]
    outs = generator.generate(prompts, 1, temperature=0.0, max_new_tokens=96, seeds=[0] * 4)
    for (completion,) in outs:
        steps = split_steps(completion.text)
        assert len(steps) >= 2
        assert parse_step(steps[0]) is not None
        assert extract_boxed(steps[-1]) is not None


def test_prm_reads_as_qwen_prm_and_scores_every_step():
    import numpy as np

    from dprm.llm.prm import infer_kind, load_prm
    from dprm.llm.tasks.arith_sets import set_rows

    assert infer_kind(str(PRM)) == "qwen-prm"
    prm = load_prm(str(PRM), device="cpu")
    row = set_rows("id")[0]
    right = row["solution"].split("\n\n")
    wrong = list(right)
    wrong[0] = right[0].rsplit("=", 1)[0] + "= 1000"
    outputs = prm.score_steps(row["question"], [right, wrong])
    for out, steps in zip(outputs, [right, wrong], strict=True):
        assert out.scores.shape == (len(steps),)
        assert np.all((out.scores >= 0) & (out.scores <= 1))
        assert out.hidden.shape == (len(steps), prm.hidden_dim)
    # trained on exact step labels: an absurd first result scores below the true one
    assert outputs[1].scores[0] < outputs[0].scores[0]
