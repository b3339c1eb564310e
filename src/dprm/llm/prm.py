"""PRM wrappers: per-step scores and the final-layer hidden state at each step, in one pass.

A wrapper formats (question, steps) exactly as the reference does, runs the PRM body once over
the whole trajectory, and reads the score head at every step position. With causal attention
the state at step t depends only on the tokens up to t, so one pass over a trajectory gives
what t separate prefix passes would (tested to 1e-4 in float32). The hidden state is the input
of the score head at the scoring position (the body's last hidden state, after its final norm).

Registry (``kind``):

- ``qwen-prm`` (Qwen2.5-Math-PRM-7B): chat template with system "Please reason step by step,
  and put your final answer in \\boxed{}." (Park's wording; ``prompt="model-card"`` gives the
  model card's "within \\boxed{}"), user = question, assistant = steps joined by
  ``<extra_0>`` plus a trailing ``<extra_0>``; score = softmax(2 logits)[1] at each
  ``<extra_0>``. Loaded without remote code (Qwen2 body + ``score`` Linear-ReLU-Linear head).
- ``math-shepherd``: ``f"{question} {answer'}"`` with every ``"\\n\\n"`` -> ``" ки\\n\\n"`` and a
  final ``" ки"`` (built step by step so every step, an empty last one too, gets token
  12902); score = softmax over the ``+``/``-`` logits at each ``ки``, taking ``+``.
- ``reasoneval`` (ReasonEval-7B): ``"Question:\\n{q}\\nAnswer:\\nLet's think step by step.\\n"``
  + sep + steps joined by sep + sep, with sep = the pad token (``<s>``); separators are
  removed from the ids, BOS is prepended again, and the score (p_neutral + p_positive) is read
  at the reference's index arithmetic (the first two readouts discarded).
- ``skywork-prm`` (Skywork-o1-Open-PRM-Qwen-2.5-1.5B / 7B): ``encode(bos + q + "\\n")``, then
  each ``"\\n"``-piece of ``"\\n\\n".join(steps)`` encoded alone and followed by ``"\\n"`` (198);
  score = sigmoid of the value head ``v_head.summary`` at the ``"\\n"`` ending each step.
- ``rlhflow-prm`` (RLHFlow Llama3.1-8B-PRM-Deepseek-Data / -Mistral-Data): Llama-3.1 chat, every
  step a user turn (the first prefixed by the question), every assistant answer ``"+"``; score =
  softmax over the ``+`` / ``-`` logits at the token before each answer, taking ``+``.
- ``token-classification``: any ``AutoModelForTokenClassification``; steps joined by a
  separator token (default ``<extra_0>``, also trailing), question/steps in the Qwen chat
  layout when the tokenizer has a chat template; score = softmax[positive_label] (sigmoid for
  one label).

The one-pass machinery (:class:`PRM`, :class:`Encoded`, :class:`StepOutput`, truncation to
``max_tokens``) is in :mod:`dprm.llm.prm_interface`; the checkpoint classes loaded without remote
code are in :mod:`dprm.llm.prm_models`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dprm.io import DataError
from dprm.llm.prm_interface import (
    PRM,
    Encoded,
)
from dprm.llm.prm_models import qwen_prm_class, reasoneval_class, skywork_prm_class

#: Qwen2.5-Math-PRM system prompts: Park et al.'s wording (default; it produced the paper's
#: calibration data) and the model card's. Chosen with the ``prompt`` option (``--prm-prompt``).
QWEN_PRM_SYSTEMS = {
    "park": "Please reason step by step, and put your final answer in \\boxed{}.",
    "model-card": "Please reason step by step, and put your final answer within \\boxed{}.",
}
QWEN_PRM_SYSTEM = QWEN_PRM_SYSTEMS["park"]
REASONEVAL_PROMPT = "Question:\n{input}\nAnswer:\nLet's think step by step.\n"


def _tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _token_id(tokenizer: Any, token: str) -> int:
    """The id of ``token``: a vocabulary entry (``<extra_0>``) or text that encodes to one token
    (``"\n"``, which byte-level vocabularies store as ``"Ċ"``)."""
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or token_id == tokenizer.unk_token_id:
        ids = tokenizer.encode(token, add_special_tokens=False)
        if len(ids) != 1:
            raise DataError(
                None,
                f"the PRM tokenizer has no single token for separator {token!r} (it encodes to "
                f"{len(ids)} tokens {ids})",
            )
        token_id = ids[0]
    return int(token_id)


def _positions(ids: list[int], token_id: int) -> list[int]:
    return [i for i, t in enumerate(ids) if t == token_id]


def _tag_ids(tokenizer: Any, word: str, tag: str) -> tuple[list[int], list[int]]:
    """(ids of ``word + tag``, the ids ``tag`` adds after ``word``): how a tag is tokenized
    where the reference's text puts it, after a word (``" ки"`` -> [12902], ``'▁ки'``)."""
    word_ids = tokenizer.encode(word, add_special_tokens=False)
    anchor_ids = tokenizer.encode(word + tag, add_special_tokens=False)
    if anchor_ids[: len(word_ids)] != word_ids or len(anchor_ids) == len(word_ids):
        raise DataError(None, f"the tokenizer merges {tag!r} into {word!r}: {anchor_ids}")
    return anchor_ids, anchor_ids[len(word_ids) :]


def _segments_with_tags(
    tokenizer: Any, first: list[int], segments: list[str], word: str, tag: str
) -> Encoded:
    """``first`` + each segment's ids followed by the tag's ids, read at the tag's last token.

    Each segment after the first is encoded as ``word + tag + segment`` with the ids of
    ``word + tag`` dropped, so it tokenizes as it does right after a tag inside one string,
    while the tag itself is always the ids the model was trained on: text before a tag that
    ends in a space (``"q  ки"``) can merge the space into the tag on some tokenizer versions
    (``'▁▁', 'ки'``). Positions are found by searching the tag's last id, so a step that holds
    the tag itself yields a count mismatch (reported by :meth:`PRM.prepare`).
    """
    anchor_ids, tag_ids = _tag_ids(tokenizer, word, tag)
    ids = list(first)
    for index, segment in enumerate(segments):
        if index == 0:
            ids += tokenizer.encode(segment, add_special_tokens=False) if segment else []
        else:
            piece = tokenizer.encode(word + tag + segment, add_special_tokens=False)
            if piece[: len(anchor_ids)] != anchor_ids:
                raise DataError(None, f"{word + tag!r} + {segment[:20]!r} splits differently")
            ids += piece[len(anchor_ids) :]
        ids += tag_ids
    return Encoded(ids, _positions(ids, tag_ids[-1]), len(segments))


class QwenPRM(PRM):
    """Qwen2.5-Math-PRM (options: ``prompt`` = ``"park"`` | ``"model-card"``)."""

    kind = "qwen-prm"
    separator = "<extra_0>"

    def _load(self, path: str) -> tuple[Any, Any]:
        model = qwen_prm_class().from_pretrained(path, **self.load_kwargs())
        return _tokenizer(path), model

    def _setup(self) -> None:
        self.separator_id = _token_id(self.tokenizer, self.separator)
        self.system = _system_prompt(self.options.get("prompt", "park"))

    def provenance(self) -> dict:
        return {**super().provenance(), "prm_system_prompt": self.system}

    def encode(self, question: str, steps: list[str]) -> Encoded:
        messages = [
            {"role": "system", "content": self.system},
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


def _system_prompt(name: str) -> str:
    if name not in QWEN_PRM_SYSTEMS:
        raise DataError(
            None, f"unknown PRM prompt {name!r}; expected one of {sorted(QWEN_PRM_SYSTEMS)}"
        )
    return QWEN_PRM_SYSTEMS[name]


class MathShepherdPRM(PRM):
    """Math-Shepherd: ``f"{question} {step_1} ки\n\n{step_2} ки ..."``, read at every ``ки``.

    Every step gets its tag, including an empty last step (a response ending in ``"\n\n"``;
    the reference's text rule gives it none) and steps ending in whitespace; the tag is always
    token 12902 (``▁ки``) whatever the tokenizer version does with the space before it.
    """

    kind = "math-shepherd"
    tag = " ки"

    def _load(self, path: str) -> tuple[Any, Any]:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path, **self.load_kwargs())
        return _tokenizer(path), model

    def _setup(self) -> None:
        # the reference's encode("+ -")[1:]: "▁+", "▁-" (648, 387), read after a word so no
        # tokenizer version can drop the "▁"
        plus_minus = self.tokenizer.encode("a + -", add_special_tokens=False)
        self.candidate_ids = [int(plus_minus[-2]), int(plus_minus[-1])]  # [+, -]
        # the tag as it follows a word in the reference's text (" ки": token 12902, "▁ки")
        self.tag_id = int(_tag_ids(self.tokenizer, "a", self.tag)[1][-1])

    def encode(self, question: str, steps: list[str]) -> Encoded:
        bos = self.tokenizer.bos_token_id
        first = [int(bos)] if bos is not None and self.tokenizer.encode("x")[0] == bos else []
        segments = [f"{question} {steps[0]}"] + ["\n\n" + step for step in steps[1:]]
        return _segments_with_tags(self.tokenizer, first, segments, "a", self.tag)

    def readout(self, hidden: Any) -> Any:
        logits = self.model.get_output_embeddings()(hidden)[:, self.candidate_ids]
        return logits.float().softmax(-1)[:, 0]


class ReasonEvalPRM(PRM):
    """ReasonEval-7B: the reference's separator arithmetic; inputs are cut on the raw ids
    (separators included) at ``max_tokens``, as the reference cuts them."""

    kind = "reasoneval"

    def _load(self, path: str) -> tuple[Any, Any]:
        return _tokenizer(path), reasoneval_class().from_pretrained(path, **self.load_kwargs())

    def _setup(self) -> None:
        self.separator = str(self.tokenizer.pad_token)
        self.separator_id = int(self.tokenizer.encode(self.separator)[-1])
        bos = self.tokenizer.bos_token_id
        self.bos_id = int(bos if bos is not None else 1)

    def _raw_ids(self, question: str, steps: list[str]) -> list[int]:
        sep = self.separator
        text = REASONEVAL_PROMPT.replace("{input}", question) + sep + sep.join(steps) + sep
        return self.tokenizer(text)["input_ids"]

    def _adjust(self, raw: list[int], n_steps: int) -> Encoded:
        kept, labelled = [], []
        for idx, token in enumerate(raw):  # the reference's index arithmetic, verbatim
            if token == self.separator_id:
                labelled.append(idx - 1 - len(labelled))
            else:
                kept.append(token)
        return Encoded([self.bos_id, *kept], labelled[2:], n_steps)

    def encode(self, question: str, steps: list[str]) -> Encoded:
        return self._adjust(self._raw_ids(question, steps), len(steps))

    def prepare(self, question: str, steps: list[str]) -> Encoded:
        steps = list(steps) if len(steps) else [""]
        raw = self._raw_ids(question, steps)
        full = super().prepare(question, steps)  # checks the separator count
        if len(raw) <= self.max_tokens:
            return full
        cut = self._adjust(raw[: self.max_tokens], len(steps))
        kept = [p for p in cut.positions if p < len(cut.input_ids)]
        end = (kept[-1] + 1) if kept else len(cut.input_ids)
        return Encoded(cut.input_ids[:end], kept, len(steps), len(kept) < len(steps))

    def readout(self, hidden: Any) -> Any:
        probs = self.model.score_head(hidden).float().softmax(-1)
        return probs[:, 1] + probs[:, 2]


class SkyworkPRM(PRM):
    """Skywork-o1-Open-PRM (Qwen2.5-Math-1.5B / 7B body + a one-output value head, sigmoid).

    The input is Skywork's ``prepare_input(question, answer, step_token="\n")`` (bundled by
    search-and-learn) on the answer ``"\n\n".join(steps)``: ``encode(bos + question + "\n")``,
    then every ``"\n"``-separated piece of the answer encoded on its own and followed by the
    step token ``"\n"`` (198). A dprm step (a ``"\n\n"``-separated block, which may hold single
    newlines) is read at the step token that ends its last piece: exactly the last reward that
    the reference computes on the prefix ``"\n\n".join(steps[:t])``, since that prefix's input
    ids are the first ids of the whole trajectory's. The step tokens inside a block (and the one
    after the empty piece that ``"\n\n"`` leaves) are in the input, as in the reference, but
    not read. An empty step list is the question with one empty piece (one readout).
    """

    kind = "skywork-prm"
    step_token = "\n"

    def _load(self, path: str) -> tuple[Any, Any]:
        model, info = skywork_prm_class().from_pretrained(
            path, output_loading_info=True, **self.load_kwargs()
        )
        missing = [k for k in info.get("missing_keys", []) if "v_head" in k]
        if missing:  # transformers would start them at random with only a warning
            raise DataError(path, f"skywork-prm: the checkpoint lacks the value head {missing}")
        return _tokenizer(path), model

    def _setup(self) -> None:
        self.step_id = int(self.tokenizer.encode(self.step_token)[-1])
        bos = self.tokenizer.bos_token
        if bos is None:
            raise DataError(
                self.name, "skywork-prm: the tokenizer has no bos_token (the reference prepends it)"
            )
        self.bos = str(bos)

    def encode(self, question: str, steps: list[str]) -> Encoded:
        ids = list(self.tokenizer.encode(self.bos + question + self.step_token))
        pieces = "\n\n".join(steps).split(self.step_token)
        flags = []
        for piece in pieces:
            ids += self.tokenizer.encode(piece) if piece else []
            flags.append(len(ids))
            ids.append(self.step_id)
        # the prefix of t steps ends at its own last piece (pieces of "P\n\nR" = P's + [""] + R's)
        ends = [
            len("\n\n".join(steps[:t]).split(self.step_token)) for t in range(1, len(steps) + 1)
        ]
        return Encoded(ids, [flags[e - 1] for e in ends], len(steps))

    def readout(self, hidden: Any) -> Any:
        return self.model.v_head(hidden).float()[:, 0].sigmoid()


class RLHFlowPRM(PRM):
    """RLHFlow Llama3.1-8B-PRM-Deepseek-Data / -Mistral-Data: a causal LM in chat format.

    Every step is a user turn (the first one is ``question + " " + step_1``), every assistant
    turn is ``"+"``; the reward of step t is softmax over the ``+`` / ``-`` logits, taking ``+``,
    at the token before step t's assistant answer (RLHFlow's ``prm_evaluate.py`` and
    search-and-learn read ``logits[-3]`` of the conversation that ends with that answer). One
    forward suffices: the whole conversation with every answer ``"+"`` is the reference's
    input for its last step, and with causal attention the logits at the answer of step t
    depend only on the first t turns, which are exactly the reference's input for step t (all
    earlier answers are ``"+"`` in both). The answer positions are found by rendering the
    conversation a second time with ``"-"`` answers: the ids differ exactly there. The chat
    template (``content | trim`` in Llama-3.1's) is the checkpoint's own.
    """

    kind = "rlhflow-prm"

    def _load(self, path: str) -> tuple[Any, Any]:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path, **self.load_kwargs())
        return _tokenizer(path), model

    def _setup(self) -> None:
        # the reference's tokenizer.encode("+")[-1], tokenizer.encode("-")[-1]
        self.candidate_ids = [
            int(self.tokenizer.encode(sign, add_special_tokens=False)[-1]) for sign in "+-"
        ]

    def _conversation_ids(self, question: str, steps: list[str], answer: str) -> list[int]:
        messages = []
        for index, step in enumerate(steps):
            text = f"{question} {step}" if index == 0 else step
            messages += [
                {"role": "user", "content": text},
                {"role": "assistant", "content": answer},
            ]
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=False
        )
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode(self, question: str, steps: list[str]) -> Encoded:
        plus = self._conversation_ids(question, steps, "+")
        minus = self._conversation_ids(question, steps, "-")
        if len(plus) != len(minus):
            return Encoded(plus, [], len(steps))  # reported as no_step_tag by prepare()
        answers = [i for i, (a, b) in enumerate(zip(plus, minus, strict=True)) if a != b]
        return Encoded(plus, [i - 1 for i in answers], len(steps))

    def readout(self, hidden: Any) -> Any:
        logits = self.model.get_output_embeddings()(hidden)[:, self.candidate_ids]
        return logits.float().softmax(-1)[:, 0]


class TokenClassificationPRM(PRM):
    """Any token-classification model read at a separator token (options: ``separator``,
    ``positive_label``, ``prompt``).

    Steps are encoded one by one, each followed by the separator's id, as TRL's PRM trainer
    does; so a separator that would merge with its neighbours in one string (TRL's default
    ``"\n"``) is still found. The prompt part is the Qwen chat layout when the tokenizer has a
    chat template, else ``f"{question}\n\n"``.
    """

    kind = "token-classification"

    def _load(self, path: str) -> tuple[Any, Any]:
        from transformers import AutoModelForTokenClassification

        return _tokenizer(path), AutoModelForTokenClassification.from_pretrained(
            path, **self.load_kwargs()
        )

    def _setup(self) -> None:
        self.separator = str(self.options.get("separator", "<extra_0>"))
        self.separator_id = _token_id(self.tokenizer, self.separator)
        self.positive_label = int(self.options.get("positive_label", 1))
        self.system = _system_prompt(self.options.get("prompt", "park"))
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

    def _prompt_ids(self, question: str) -> list[int]:
        if getattr(self.tokenizer, "chat_template", None):
            marker = "\x00STEPS\x00"
            messages = [
                {"role": "system", "content": self.system},
                {"role": "user", "content": question},
                {"role": "assistant", "content": marker},
            ]
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=False
            )
            return self.tokenizer.encode(text.split(marker)[0])
        return self.tokenizer.encode(f"{question}\n\n")

    def encode(self, question: str, steps: list[str]) -> Encoded:
        ids = self._prompt_ids(question)
        positions = []
        for step in steps:
            ids += self.tokenizer.encode(step, add_special_tokens=False) if step else []
            positions.append(len(ids))
            ids.append(self.separator_id)
        return Encoded(ids, positions, len(steps))

    def readout(self, hidden: Any) -> Any:
        logits = self.head(hidden).float()
        if logits.shape[-1] == 1:
            return logits[:, 0].sigmoid()
        return logits.softmax(-1)[:, self.positive_label]


PRM_REGISTRY: dict[str, type[PRM]] = {
    cls.kind: cls
    for cls in (
        QwenPRM,
        MathShepherdPRM,
        ReasonEvalPRM,
        SkyworkPRM,
        RLHFlowPRM,
        TokenClassificationPRM,
    )
}


def infer_kind(name_or_path: str) -> str:
    """Guess the wrapper from the name and ``config.json`` (local dirs only; hub ids by name)."""
    lowered = str(name_or_path).lower()
    if "math-shepherd" in lowered or "math_shepherd" in lowered:
        return "math-shepherd"
    if "reasoneval" in lowered:
        return "reasoneval"
    if "skywork" in lowered and "prm" in lowered:
        return "skywork-prm"
    if "rlhflow" in lowered and "prm" in lowered:
        return "rlhflow-prm"
    if "qwen2.5-math-prm" in lowered or "math-prm" in lowered:
        return "qwen-prm"
    config_path = Path(name_or_path) / "config.json"
    if config_path.exists():
        config = json.loads(config_path.read_text())
        archs = " ".join(config.get("architectures") or [])
        if "SkyworkPRM" in archs:
            return "skywork-prm"
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
        **options: ``max_tokens``, ``batch_tokens``; ``device_map`` (``"auto"``),
            ``max_memory`` and ``offload_folder`` to shard a PRM larger than one GPU; for
            ``token-classification`` also ``separator`` and ``positive_label``; for ``qwen-prm``
            ``prompt``.

    Raises:
        DataError: unknown ``kind`` (the message lists the registry).
    """
    kind = kind or infer_kind(name_or_path)
    if kind not in PRM_REGISTRY:
        raise DataError(
            name_or_path, f"unknown PRM kind {kind!r}; expected one of {sorted(PRM_REGISTRY)}"
        )
    return PRM_REGISTRY[kind](name_or_path, device=device, dtype=dtype, **options)
