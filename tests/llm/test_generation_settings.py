"""Generation settings are what we say: explicit parameters, no checkpoint generation_config."""

from __future__ import annotations

import json
import shutil

from dprm.llm.generate import load_generator
from dprm.llm.prompts import build_prompt


def _copy_with_generation_config(lm_dir, out, **settings):
    shutil.copytree(lm_dir, out)
    config = {"do_sample": True, "top_k": 1, "top_p": 0.5, "temperature": 0.05, **settings}
    (out / "generation_config.json").write_text(json.dumps(config))
    return out


def test_transformers_backend_ignores_the_checkpoints_generation_config(lm_dir, tmp_path):
    tuned = _copy_with_generation_config(lm_dir, tmp_path / "tuned", repetition_penalty=1.8)
    plain = load_generator("transformers", str(lm_dir), device="cpu")
    loaded = load_generator("transformers", str(tuned), device="cpu")
    assert loaded.ignored_generation_config["repetition_penalty"] == 1.8
    assert loaded.model.generation_config.repetition_penalty in (None, 1.0)  # 5.x: unset
    prompt = build_prompt("What is 3 + 4?", "qwen")
    kwargs = dict(temperature=1.0, max_new_tokens=24, seeds=[3])
    assert [c.text for c in loaded.generate([prompt], 4, **kwargs)[0]] == [
        c.text for c in plain.generate([prompt], 4, **kwargs)[0]
    ]
    # and the penalty, when asked for, does change the samples
    penalised = plain.generate([prompt], 4, repetition_penalty=1.8, **kwargs)[0]
    assert [c.text for c in penalised] != [c.text for c in plain.generate([prompt], 4, **kwargs)[0]]


def test_stop_reason_is_carried(generator):
    prompt = build_prompt("What is 3 + 4?", "qwen")
    outs = generator.generate([prompt], 3, temperature=1.0, max_new_tokens=64, seeds=[1])[0]
    end_ids = {i for i in generator.stop_ids if i != generator.eos_id}
    for c in outs:
        assert c.finish_reason == "length" or c.stop_reason in end_ids | {None}
    cut = generator.generate([prompt], 3, temperature=1.0, max_new_tokens=64, seeds=[1],
                             stop=["Step 2"])[0]  # fmt: skip
    for full, c in zip(outs, cut, strict=True):
        if "Step 2" in full.text:
            assert c.stop_reason == "Step 2" and c.finish_reason == "stop"
            assert c.text == full.text[: full.text.index("Step 2")]


class _FakeSamplingParams:
    """Records the keyword arguments vLLM's ``SamplingParams`` would get."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


class _FakeLLM:
    """An ``LLM`` stand-in: one output per requested sample, ``max_tokens`` tokens long."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, params, use_tqdm=True):
        from types import SimpleNamespace as NS

        self.calls.append((prompts, params))
        return [
            NS(
                outputs=[
                    NS(
                        text=f"x{p.kwargs['seed']}",
                        token_ids=[0] * p.kwargs["max_tokens"],
                        finish_reason="length",
                        stop_reason=None,
                    )
                ]
                * p.kwargs["n"]
            )  # fmt: skip
            for p in params
        ]


def test_vllm_backend_sampling_params_and_context_budget(lm_dir, monkeypatch):
    """What the vLLM backend asks of vLLM (the engine itself runs in `make test-vllm`)."""
    import sys
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from dprm.llm.generate import VLLMGenerator, default_context_limit

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=_FakeSamplingParams))
    tokenizer = AutoTokenizer.from_pretrained(lm_dir)
    gen = object.__new__(VLLMGenerator)
    gen.llm, gen.stop_ids, gen.model_name = _FakeLLM(tokenizer), [7], str(lm_dir)
    gen.max_model_len = default_context_limit(str(lm_dir), None)
    assert gen.max_model_len == 1024  # the model's own limit, below the reference's 4096
    assert default_context_limit(str(lm_dir), 300) == 300
    short, long = "What is 3 + 4?", "3 + 4 " * 600  # the long one fills the context
    room = gen.max_model_len - len(tokenizer(short).input_ids)
    out = gen.generate([short, long, short], 2, max_new_tokens=5000, seeds=[11, 12, 13])
    prompts, params = gen.llm.calls[0]
    assert prompts == [short, short]  # the prompt that fills the context is not sent
    assert [p.kwargs["seed"] for p in params] == [11, 13]
    assert [p.kwargs["max_tokens"] for p in params] == [room, room]
    assert params[0].kwargs["top_k"] == -1 and params[0].kwargs["stop_token_ids"] == [7]
    assert [c.text for c in out[0]] == ["x11", "x11"] and out[0][0].n_tokens == room
    assert [(c.text, c.n_tokens, c.finish_reason) for c in out[1]] == [("", 0, "length")] * 2
    assert out[2][0].text == "x13"


def test_vllm_backend_keeps_prefills_whole_on_cpu(lm_dir, monkeypatch):
    """vLLM's CPU sampler dies on a seeded request whose prefill is split: no chunked prefill."""
    import sys
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from dprm.llm.generate import VLLMGenerator

    made = {}

    class FakeLLM(_FakeLLM):
        def __init__(self, **kwargs):
            made.update(kwargs)
            super().__init__(AutoTokenizer.from_pretrained(kwargs["model"]))

    for on_cpu in (True, False):
        made.clear()
        platform = SimpleNamespace(is_cpu=lambda on_cpu=on_cpu: on_cpu)
        monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(LLM=FakeLLM))
        monkeypatch.setitem(
            sys.modules, "vllm.platforms", SimpleNamespace(current_platform=platform)
        )
        gen = VLLMGenerator(str(lm_dir), enforce_eager=True)
        assert made["max_model_len"] == gen.max_model_len == 1024 and made["enforce_eager"]
        if on_cpu:
            assert made["enable_chunked_prefill"] is False
            assert made["max_num_batched_tokens"] >= made["max_model_len"]
        else:
            assert "enable_chunked_prefill" not in made
