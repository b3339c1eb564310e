"""Park et al.'s prompt templates and step splitting."""

from __future__ import annotations

from dprm.llm.prompts import (
    SYSTEM_PROMPT,
    build_prompt,
    contains_boxed,
    join_steps,
    prefix_text,
    split_steps,
)


def test_qwen_template_by_model_name():
    prompt = build_prompt("What is 1+1?", "Qwen/Qwen2.5-Math-1.5B-Instruct")
    assert prompt == (
        "<|im_start|>system\n"
        + SYSTEM_PROMPT
        + "<|im_end|>\n<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_llama3_template_otherwise():
    prompt = build_prompt("Q", "meta-llama/Llama-3.2-1B-Instruct")
    assert prompt.startswith(
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSolve the following math problem"
    )
    assert prompt.endswith(
        "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_system_prompt_has_the_step_instruction():
    assert "## Step 1: [Concise description]" in SYSTEM_PROMPT
    assert SYSTEM_PROMPT.endswith(
        "Where [answer] is just the final number or expression that solves the problem."
    )
    assert (
        "Therefore, the final answer is: $\\boxed{answer}$. I hope it is correct." in SYSTEM_PROMPT
    )


def test_rollout_prefixes_end_with_a_blank_line():
    base = build_prompt("Q {x}", "qwen")
    assert "Q {x}" in base  # braces in questions are kept verbatim
    assert build_prompt("Q {x}", "qwen", []) == base + "\n\n"  # k = 0, as in the reference
    assert build_prompt("Q {x}", "qwen", ["a", "b"]) == base + "a\n\nb\n\n"
    assert prefix_text(["a"]) == "a\n\n"


def test_split_join_inverse_including_empty_steps():
    text = "## Step 1: a\n\n\n\n## Step 2: b\n\nend"
    steps = split_steps(text)
    assert steps == ["## Step 1: a", "", "## Step 2: b", "end"]
    assert join_steps(steps) == text
    assert split_steps("single step") == ["single step"]


def test_contains_boxed():
    assert contains_boxed("so $\\boxed{5}$.")
    assert contains_boxed("\\boxed{}")
    assert not contains_boxed("boxed 5")


def test_template_of_a_local_generator_comes_from_its_config(tmp_path):
    """A local Qwen copy whose path does not say "qwen" gets the Qwen format from config.json;
    hub ids and named paths keep the reference's rule; an unreadable config keeps it too."""
    import json

    from dprm.llm.prompts import template_for

    assert template_for("Qwen/Qwen2.5-Math-7B-Instruct") == "qwen"
    assert template_for("meta-llama/Llama-3.2-1B-Instruct") == "llama3"
    local = tmp_path / "math-1.5b"
    local.mkdir()
    assert template_for(str(local)) == "llama3"  # no config: the name rule
    (local / "config.json").write_text(json.dumps({"model_type": "qwen2"}), encoding="utf-8")
    assert template_for(str(local)) == "qwen"
    (local / "config.json").write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    assert template_for(str(local)) == "llama3"
    (local / "config.json").write_text("[not an object", encoding="utf-8")
    assert template_for(str(local)) == "llama3"
