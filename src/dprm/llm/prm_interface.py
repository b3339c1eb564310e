"""The PRM wrapper interface: one forward pass gives every step's score and hidden state.

A wrapper (see :mod:`dprm.llm.prm` for the kinds) formats (question, steps) exactly as the
reference does; :class:`PRM` runs the PRM body once over the whole trajectory and reads the
score head at every step position. With causal attention the state at step t depends only on
the tokens up to t, so one pass over a trajectory gives what t separate prefix passes would
(tested to 1e-4 in float32). The hidden state is the input of the score head at the scoring
position (the body's last hidden state, after its final norm).

Inputs longer than ``max_tokens`` (default 4096, the reference's cap, and never more than the
model's position limit) are cut there; steps whose readout falls beyond the cut get no score,
``StepOutput.truncated`` is True, and callers count it. Nothing is dropped silently.

A trajectory that cannot be scored at all raises :class:`UnscorableError` with a ``reason``
(:data:`UNSCORABLE_REASONS`); the embed stage records it and goes on with the rest of the part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dprm.io import DataError

DEFAULT_MAX_TOKENS = 4096

#: why a trajectory could not be scored (the keys of the embed stage's ``unscorable`` counts)
UNSCORABLE_REASONS = {
    "no_step_tag": "the step readout tokens found in the encoded text do not match the steps",
    "over_long": "the input before the first readout exceeds max_tokens",
    "empty": "the response is empty (no text to score)",
}


class UnscorableError(DataError):
    """A trajectory the PRM cannot score; ``reason`` is a key of :data:`UNSCORABLE_REASONS`."""

    def __init__(self, reason: str, message: str):
        if reason not in UNSCORABLE_REASONS:
            raise ValueError(
                f"unknown reason {reason!r}; expected one of {sorted(UNSCORABLE_REASONS)}"
            )
        super().__init__(None, message)
        self.reason = reason


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


class PRM:
    """Base wrapper. Subclasses set ``kind`` and implement ``_load``, ``encode`` and ``readout``.

    Args:
        name_or_path: local directory or hub id of the PRM.
        device: torch device (default: cuda if available, else cpu).
        dtype: torch dtype or name (default: bf16/fp16 on GPU, fp32 on CPU).
        max_tokens: input length cap (default 4096; never above the model's position limit).
        batch_tokens: padded tokens per forward batch (length-sorted batches).
    """

    kind = "interface"

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
            raise UnscorableError(
                "no_step_tag",
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
                raise UnscorableError(
                    "over_long", f"question alone exceeds max_tokens={self.max_tokens}: {q[:60]!r}"
                )
        return np.array([o.scores[0] for o in outs]), np.stack([o.hidden[0] for o in outs])
