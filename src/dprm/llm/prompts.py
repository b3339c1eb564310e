"""Park et al.'s generation prompts and the ``"\\n\\n"`` step convention.

The generator sees a hand-built chat string: the Qwen ``<|im_start|>`` format when the model
name contains "qwen", otherwise the Llama-3 header format. The system text asks for
``## Step k:`` blocks separated by blank lines and a final
``Therefore, the final answer is: $\\boxed{answer}$. I hope it is correct.`` The prompt ends
with the assistant header; a rollout prompt appends the first k steps joined by ``"\\n\\n"``
plus a trailing ``"\\n\\n"`` (for k = 0 just ``"\\n\\n"``, as in the reference).

Steps are the pieces of a response split on ``"\\n\\n"`` (exactly ``str.split``, so empty
pieces count, as in the reference); joining with ``"\\n\\n"`` inverts the split.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

STEP_SEPARATOR = "\n\n"

SYSTEM_PROMPT = (
    "Solve the following math problem efficiently and clearly:\n\n"
    "- For simple problems (2 steps or fewer):\n"
    "Provide a concise solution with minimal explanation.\n\n"
    "- For complex problems (3 steps or more):\n"
    "Use this step-by-step format:\n\n"
    "## Step 1: [Concise description]\n"
    "[Brief explanation and calculations]\n\n"
    "## Step 2: [Concise description]\n"
    "[Brief explanation and calculations]\n\n"
    "...\n\n"
    "Regardless of the approach, always conclude with:\n\n"
    "Therefore, the final answer is: $\\boxed{answer}$. I hope it is correct.\n\n"
    "Where [answer] is just the final number or expression that solves the problem."
)

# (before system, between system and question, after question)
TEMPLATES: dict[str, tuple[str, str, str]] = {
    "llama3": (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n",
        "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n",
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
    "qwen": (
        "<|im_start|>system\n",
        "<|im_end|>\n<|im_start|>user\n",
        "<|im_end|>\n<|im_start|>assistant\n",
    ),
}

_BOXED_RE = re.compile(r"\\boxed\{.*?\}")


def template_for(model_name: str) -> str:
    """The chat format of a generator: ``"qwen"`` or ``"llama3"``.

    The reference's rule: ``"qwen"`` if the model id contains "qwen", else ``"llama3"``. A local
    directory whose name does not say (``/models/math-1.5b``) is read by its ``config.json``
    ``model_type`` instead (``qwen2`` and the like: ``"qwen"``), so a local Qwen copy does not
    silently get the Llama-3 prompt.
    """
    if "qwen" in str(model_name).lower():
        return "qwen"
    config = Path(str(model_name)) / "config.json"
    if config.is_file():
        try:
            model_type = str(json.loads(config.read_text(encoding="utf-8")).get("model_type", ""))
        except (OSError, ValueError, AttributeError):
            model_type = ""  # unreadable: keep the reference's rule
        if model_type.lower().startswith("qwen"):
            return "qwen"
    return "llama3"


def build_prompt(
    question: str,
    model_name: str,
    prefix_steps: list[str] | None = None,
    template: str | None = None,
    system: str = SYSTEM_PROMPT,
) -> str:
    """The generation prompt for ``question``, optionally continuing after ``prefix_steps``.

    Args:
        question: the raw problem text (inserted verbatim, braces and all).
        model_name: the generator's id or path; picks the chat format unless ``template`` is set.
        prefix_steps: None for a first-pass prompt; a list of k >= 0 steps for a rollout prompt,
            which appends ``"\\n\\n".join(steps) + "\\n\\n"`` (k = 0 appends ``"\\n\\n"``).
        template: ``"qwen"`` or ``"llama3"`` to override the name rule.
        system: the system text (Park's instruction by default).
    """
    name = template or template_for(model_name)
    if name not in TEMPLATES:
        raise ValueError(f"unknown prompt template {name!r}; expected one of {sorted(TEMPLATES)}")
    head, middle, tail = TEMPLATES[name]
    prompt = head + system + middle + question + tail
    if prefix_steps is not None:
        prompt += prefix_text(prefix_steps)
    return prompt


def prefix_text(steps: list[str]) -> str:
    """Rollout continuation point: the steps joined by ``"\\n\\n"`` plus a trailing ``"\\n\\n"``."""
    return STEP_SEPARATOR.join(steps) + STEP_SEPARATOR


def split_steps(text: str) -> list[str]:
    """Split a response into steps on ``"\\n\\n"`` (the reference's exact rule)."""
    return text.split(STEP_SEPARATOR)


def join_steps(steps: list[str]) -> str:
    """Inverse of :func:`split_steps` (the stored ``reasoning_prefix``, no trailing separator)."""
    return STEP_SEPARATOR.join(steps)


def contains_boxed(text: str) -> bool:
    """True if ``text`` holds a ``\\boxed{...}`` answer (the reference's test, one line)."""
    return _BOXED_RE.search(text) is not None
