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

Inputs longer than ``max_tokens`` (default 4096, the reference's cap, and never more than the
model's position limit) are cut there; steps whose readout falls beyond the cut get no score,
``StepOutput.truncated`` is True, and callers count it. Nothing is dropped silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from dprm.io import DataError

QWEN_PRM_SYSTEM = "Please reason step by step, and put your final answer in \\boxed{}."
REASONEVAL_PROMPT = "Question:\n{input}\nAnswer:\nLet's think step by step.\n"
DEFAULT_MAX_TOKENS = 4096


@dataclass
class StepOutput:
    """PRM outputs for one trajectory: ``scores`` [T] and ``hidden`` [T, D] (float32).

    T equals the number of steps unless the input was truncated (then T is smaller and
    ``truncated`` is True).
    """

    scores: np.ndarray
    hidden: np.ndarray
    truncated: bool


@dataclass
class Encoded:
    """Model input of one trajectory: token ids and the readout position of each step."""

    input_ids: list[int]
    positions: list[int]
    n_steps: int
    truncated: bool = False


@lru_cache(maxsize=1)
def qwen_prm_class() -> type:
    """``QwenProcessRewardModel``: a Qwen2 body with Qwen2.5-Math-PRM's ``score`` head.

    Parameter names match the released checkpoint (``model.*``, ``score.0.*``, ``score.2.*``),
    so ``from_pretrained`` loads it without remote code.
    """
    from torch import nn
    from transformers import Qwen2Model
    from transformers.models.qwen2.modeling_qwen2 import Qwen2PreTrainedModel

    class QwenProcessRewardModel(Qwen2PreTrainedModel):
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.model = Qwen2Model(config)
            h = config.hidden_size
            self.score = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 2))
            self.post_init()

        def forward(self, input_ids: Any, attention_mask: Any = None) -> Any:
            hidden = self.model(
                input_ids=input_ids, attention_mask=attention_mask
            ).last_hidden_state
            return self.score(hidden)

    return QwenProcessRewardModel


@lru_cache(maxsize=1)
def reasoneval_class() -> type:
    """``ReasonEval7B``: a Mistral body with a ``score_head`` Linear(h, score_dimension)."""
    from torch import nn
    from transformers import MistralModel
    from transformers.models.mistral.modeling_mistral import MistralPreTrainedModel

    class ReasonEval7B(MistralPreTrainedModel):
        _keys_to_ignore_on_load_missing = ["lm_head.weight"]

        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.model = MistralModel(config)
            dim = getattr(config, "score_dimension", 3)
            self.score_head = nn.Linear(
                config.hidden_size, dim, bias=bool(getattr(config, "use_bias", False))
            )
            self.post_init()

        def forward(self, input_ids: Any, attention_mask: Any = None) -> Any:
            hidden = self.model(
                input_ids=input_ids, attention_mask=attention_mask
            ).last_hidden_state
            return self.score_head(hidden)

    return ReasonEval7B


class PRM:
    """Base wrapper. Subclasses set ``kind`` and implement ``_load``, ``encode`` and ``readout``.

    Args:
        name_or_path: local directory or hub id of the PRM.
        device: torch device (default: cuda if available, else cpu).
        dtype: torch dtype or name (default: bf16/fp16 on GPU, fp32 on CPU).
        max_tokens: input length cap (default 4096; never above the model's position limit).
        batch_tokens: padded tokens per forward batch (length-sorted batches).
    """

    kind = "base"

    def __init__(
        self,
        name_or_path: str,
        device: str | None = None,
        dtype: Any = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        batch_tokens: int = 16384,
        **options: Any,
    ):
        from dprm.llm.generate import default_device_dtype

        self.name = str(name_or_path)
        self.device, self.dtype = default_device_dtype(device, dtype)
        self.options = options
        self.tokenizer, self.model = self._load(self.name)
        self.model.to(self.device).eval()
        limit = getattr(self.model.config, "max_position_embeddings", None) or max_tokens
        self.max_tokens = int(min(max_tokens, limit))
        self.batch_tokens = int(batch_tokens)
        self.pad_id = int(self.tokenizer.pad_token_id or 0)
        self._setup()

    # -- to implement -------------------------------------------------------------------
    def _load(self, path: str) -> tuple[Any, Any]:
        raise NotImplementedError

    def _setup(self) -> None:
        """Look up special token ids after loading."""

    def encode(self, question: str, steps: list[str]) -> Encoded:
        """Token ids and readout positions of ``steps`` (before truncation)."""
        raise NotImplementedError

    def body(self) -> Any:
        """The module whose ``last_hidden_state`` feeds the score head."""
        return self.model.model

    def readout(self, hidden: Any) -> Any:
        """Hidden states [P, D] at readout positions -> success scores [P] in [0, 1]."""
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------------
    @property
    def hidden_dim(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def layer(self) -> str:
        return "final (input of the score head, after the body's final norm)"

    def provenance(self) -> dict:
        return {
            "prm": self.name,
            "prm_kind": self.kind,
            "layer": self.layer,
            "prm_dtype": str(self.dtype).replace("torch.", ""),
            "max_tokens": self.max_tokens,
        }

    def prepare(self, question: str, steps: list[str]) -> Encoded:
        """:meth:`encode` plus truncation to ``max_tokens`` (and trailing tokens dropped)."""
        steps = list(steps) if len(steps) else [""]
        enc = self.encode(question, steps)
        if len(enc.positions) != len(steps):
            raise DataError(
                None,
                f"{self.kind}: found {len(enc.positions)} step positions for {len(steps)} steps "
                f"(does a step contain the separator token?) in question {question[:60]!r}",
            )
        kept = [p for p in enc.positions if p < self.max_tokens]
        end = (kept[-1] + 1) if kept else min(len(enc.input_ids), self.max_tokens)
        return Encoded(enc.input_ids[:end], kept, len(steps), len(kept) < len(steps))

    def forward(self, encoded: list[Encoded]) -> list[StepOutput]:
        """Run length-sorted, right-padded batches; one :class:`StepOutput` per input, in order.

        No attention mask is passed: with right padding and causal attention a real token never
        attends to the padding after it, so its state is exact, and the model can take the
        fused causal-attention path instead of materialising a padded [L, L] mask. Padding
        states are never read. (Tested against unpadded single passes.)
        """
        import torch

        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i].input_ids))
        results: list[StepOutput | None] = [None] * len(encoded)
        start = 0
        while start < len(order):
            longest = max(1, len(encoded[order[start]].input_ids))
            size = max(1, self.batch_tokens // longest)
            batch = order[start : start + size]
            start += len(batch)
            ids = torch.full((len(batch), longest), self.pad_id, dtype=torch.long)
            rows, cols = [], []
            for b, i in enumerate(batch):
                seq = encoded[i].input_ids
                ids[b, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                rows += [b] * len(encoded[i].positions)
                cols += encoded[i].positions
            with torch.inference_mode():
                out = self.body()(input_ids=ids.to(self.device), use_cache=False)
                picked = out.last_hidden_state[
                    torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long)
                ]
                scores = self.readout(picked).float().cpu().numpy()
                hidden = picked.float().cpu().numpy()
            offset = 0
            for i in batch:
                t = len(encoded[i].positions)
                results[i] = StepOutput(
                    scores[offset : offset + t], hidden[offset : offset + t], encoded[i].truncated
                )
                offset += t
        return results  # type: ignore[return-value]

    def score_steps(self, question: str, steps_list: list[list[str]]) -> list[StepOutput]:
        """Scores [T] and hidden states [T, D] at every step of each trajectory (one pass each).

        An empty step list is the question-only input (one readout), as in the reference.
        """
        return self.forward([self.prepare(question, steps) for steps in steps_list])

    def question_state(self, questions: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Score [Q] and hidden state [Q, D] of each question with an empty reasoning prefix."""
        outs = self.forward([self.prepare(q, [""]) for q in questions])
        if not outs:
            return np.zeros(0, np.float32), np.zeros((0, self.hidden_dim), np.float32)
        for q, out in zip(questions, outs, strict=True):
            if len(out.scores) == 0:
                raise DataError(
                    None, f"question alone exceeds max_tokens={self.max_tokens}: {q[:60]!r}"
                )
        return np.array([o.scores[0] for o in outs]), np.stack([o.hidden[0] for o in outs])


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
