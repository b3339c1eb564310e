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
