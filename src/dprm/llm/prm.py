"""PRM wrappers: per-step scores and the final-layer hidden state at each step, in one pass.

A wrapper formats (question, steps) exactly as the reference does, runs the PRM body once over
the whole trajectory, and reads the score head at every step position. With causal attention
the state at step t depends only on the tokens up to t, so one pass over a trajectory gives
what t separate prefix passes would (tested to 1e-4 in float32). The hidden state is the input
of the score head at the scoring position (the body's last hidden state, after its final norm).

Registry (``kind``):

- ``qwen-prm`` (Qwen2.5-Math-PRM-7B): chat template with system "Please reason step by step,
  and put your final answer in \\boxed{}.", user = question, assistant = steps joined by
  ``<extra_0>`` plus a trailing ``<extra_0>``; score = softmax(2 logits)[1] at each
  ``<extra_0>``. Loaded without remote code (Qwen2 body + ``score`` Linear-ReLU-Linear head).
- ``math-shepherd``: ``f"{question} {answer'}"`` with every ``"\\n\\n"`` -> ``" ки\\n\\n"`` and a
  final ``" ки"``; score = softmax over the ``+``/``-`` logits at each ``ки``, taking ``+``.
- ``reasoneval`` (ReasonEval-7B): ``"Question:\\n{q}\\nAnswer:\\nLet's think step by step.\\n"``
  + sep + steps joined by sep + sep, with sep = the pad token (``<s>``); separators are
  removed from the ids, BOS is prepended again, and the score (p_neutral + p_positive) is read
  at the reference's index arithmetic (the first two readouts discarded).
- ``token-classification``: any ``AutoModelForTokenClassification``; steps joined by a
  separator token (default ``<extra_0>``, also trailing), question/steps in the Qwen chat
  layout when the tokenizer has a chat template; score = softmax[positive_label] (sigmoid for
  one label).

The one-pass machinery (:class:`PRM`, :class:`Encoded`, :class:`StepOutput`, truncation to
``max_tokens``) is in :mod:`dprm.llm.prm_base`; the checkpoint classes loaded without remote
code are in :mod:`dprm.llm.prm_models`. Both are importable from here as before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dprm.io import DataError
from dprm.llm.prm_base import DEFAULT_MAX_TOKENS, PRM, Encoded, StepOutput
from dprm.llm.prm_models import qwen_prm_class, reasoneval_class

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "PRM",
    "PRM_REGISTRY",
    "QWEN_PRM_SYSTEM",
    "REASONEVAL_PROMPT",
    "Encoded",
    "MathShepherdPRM",
    "QwenPRM",
    "ReasonEvalPRM",
    "StepOutput",
    "TokenClassificationPRM",
    "infer_kind",
    "load_prm",
    "qwen_prm_class",
    "reasoneval_class",
]

QWEN_PRM_SYSTEM = "Please reason step by step, and put your final answer in \\boxed{}."
REASONEVAL_PROMPT = "Question:\n{input}\nAnswer:\nLet's think step by step.\n"


def _tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _token_id(tokenizer: Any, token: str) -> int:
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or token_id == tokenizer.unk_token_id:
        raise DataError(None, f"the PRM tokenizer has no token {token!r}")
    return int(token_id)


def _positions(ids: list[int], token_id: int) -> list[int]:
    return [i for i, t in enumerate(ids) if t == token_id]


class QwenPRM(PRM):
    kind = "qwen-prm"
    separator = "<extra_0>"

    def _load(self, path: str) -> tuple[Any, Any]:
        return _tokenizer(path), qwen_prm_class().from_pretrained(path, dtype=self.dtype)

    def _setup(self) -> None:
        self.separator_id = _token_id(self.tokenizer, self.separator)

    def encode(self, question: str, steps: list[str]) -> Encoded:
        messages = [
            {"role": "system", "content": QWEN_PRM_SYSTEM},
            {"role": "user", "content": question},
            {"role": "assistant", "content": self.separator.join(steps) + self.separator},
        ]
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=False
        )
        ids = self.tokenizer.encode(text)
        return Encoded(ids, _positions(ids, self.separator_id), len(steps))

    def readout(self, hidden: Any) -> Any:
        return self.model.score(hidden).float().softmax(-1)[:, 1]


class MathShepherdPRM(PRM):
    kind = "math-shepherd"

    def _load(self, path: str) -> tuple[Any, Any]:
        from transformers import AutoModelForCausalLM

        return _tokenizer(path), AutoModelForCausalLM.from_pretrained(path, dtype=self.dtype)

    def _setup(self) -> None:
        plus_minus = self.tokenizer.encode("+ -", add_special_tokens=False)
        self.candidate_ids = [int(plus_minus[0]), int(plus_minus[-1])]  # [+, -]
        self.tag_id = int(self.tokenizer.encode("ки", add_special_tokens=False)[-1])

    def encode(self, question: str, steps: list[str]) -> Encoded:
        answer = "\n\n".join(steps).replace("\n\n", " ки\n\n")
        answer = answer if answer.endswith("\n\n") else answer + " ки"
        ids = self.tokenizer.encode(f"{question} {answer}")
        return Encoded(ids, _positions(ids, self.tag_id), len(steps))

    def readout(self, hidden: Any) -> Any:
        logits = self.model.get_output_embeddings()(hidden)[:, self.candidate_ids]
        return logits.float().softmax(-1)[:, 0]


class ReasonEvalPRM(PRM):
    kind = "reasoneval"

    def _load(self, path: str) -> tuple[Any, Any]:
        return _tokenizer(path), reasoneval_class().from_pretrained(path, dtype=self.dtype)

    def _setup(self) -> None:
        self.separator = str(self.tokenizer.pad_token)
        self.separator_id = int(self.tokenizer.encode(self.separator)[-1])
        bos = self.tokenizer.bos_token_id
        self.bos_id = int(bos if bos is not None else 1)

    def encode(self, question: str, steps: list[str]) -> Encoded:
        sep = self.separator
        text = REASONEVAL_PROMPT.replace("{input}", question) + sep + sep.join(steps) + sep
        raw = self.tokenizer(text)["input_ids"]
        kept, labelled = [], []
        for idx, token in enumerate(raw):  # the reference's index arithmetic, verbatim
            if token == self.separator_id:
                labelled.append(idx - 1 - len(labelled))
            else:
                kept.append(token)
        return Encoded([self.bos_id, *kept], labelled[2:], len(steps))

    def readout(self, hidden: Any) -> Any:
        probs = self.model.score_head(hidden).float().softmax(-1)
        return probs[:, 1] + probs[:, 2]


class TokenClassificationPRM(PRM):
    """Any token-classification model read at a separator token (options: ``separator``,
    ``positive_label``)."""

    kind = "token-classification"

    def _load(self, path: str) -> tuple[Any, Any]:
        from transformers import AutoModelForTokenClassification

        return _tokenizer(path), AutoModelForTokenClassification.from_pretrained(
            path, dtype=self.dtype
        )

    def _setup(self) -> None:
        self.separator = str(self.options.get("separator", "<extra_0>"))
        self.separator_id = _token_id(self.tokenizer, self.separator)
        self.positive_label = int(self.options.get("positive_label", 1))
        head = next(
            (getattr(self.model, n) for n in ("score", "classifier") if hasattr(self.model, n)),
            None,
        )
        if head is None:
            raise DataError(
                self.name, "token-classification PRM: no 'score' or 'classifier' head found"
            )
        self.head = head

    def body(self) -> Any:
        return getattr(self.model, self.model.base_model_prefix)

    def encode(self, question: str, steps: list[str]) -> Encoded:
        content = self.separator.join(steps) + self.separator
        if getattr(self.tokenizer, "chat_template", None):
            messages = [
                {"role": "system", "content": QWEN_PRM_SYSTEM},
                {"role": "user", "content": question},
                {"role": "assistant", "content": content},
            ]
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=False
            )
        else:
            text = f"{question}\n\n{content}"
        ids = self.tokenizer.encode(text)
        return Encoded(ids, _positions(ids, self.separator_id), len(steps))

    def readout(self, hidden: Any) -> Any:
        logits = self.head(hidden).float()
        if logits.shape[-1] == 1:
            return logits[:, 0].sigmoid()
        return logits.softmax(-1)[:, self.positive_label]


PRM_REGISTRY: dict[str, type[PRM]] = {
    cls.kind: cls for cls in (QwenPRM, MathShepherdPRM, ReasonEvalPRM, TokenClassificationPRM)
}


def infer_kind(name_or_path: str) -> str:
    """Guess the wrapper from the name and ``config.json`` (local dirs only; hub ids by name)."""
    lowered = str(name_or_path).lower()
    if "math-shepherd" in lowered or "math_shepherd" in lowered:
        return "math-shepherd"
    if "reasoneval" in lowered:
        return "reasoneval"
    if "qwen2.5-math-prm" in lowered or "math-prm" in lowered:
        return "qwen-prm"
    config_path = Path(name_or_path) / "config.json"
    if config_path.exists():
        config = json.loads(config_path.read_text())
        archs = " ".join(config.get("architectures") or [])
        if "ProcessRewardModel" in archs:
            return "qwen-prm"
        if "ReasonEval" in archs or "score_dimension" in config:
            return "reasoneval"
        if "ForTokenClassification" in archs:
            return "token-classification"
    raise DataError(
        name_or_path,
        f"cannot tell which PRM this is; pass kind= (--kind) one of {sorted(PRM_REGISTRY)}",
    )


def load_prm(
    name_or_path: str,
    kind: str | None = None,
    device: Any = None,
    dtype: Any = None,
    **options: Any,
) -> PRM:
    """Load a PRM wrapper from a local directory or hub id.

    Args:
        name_or_path: model directory or hub id.
        kind: one of :data:`PRM_REGISTRY` (default: inferred from the name / config.json).
        device: torch device (default: cuda if available).
        dtype: torch dtype or name (default: bf16/fp16 on GPU, fp32 on CPU).
        **options: ``max_tokens``, ``batch_tokens``; for ``token-classification`` also
            ``separator`` and ``positive_label``.

    Raises:
        DataError: unknown ``kind`` (the message lists the registry).
    """
    kind = kind or infer_kind(name_or_path)
    if kind not in PRM_REGISTRY:
        raise DataError(
            name_or_path, f"unknown PRM kind {kind!r}; expected one of {sorted(PRM_REGISTRY)}"
        )
    return PRM_REGISTRY[kind](name_or_path, device=device, dtype=dtype, **options)
