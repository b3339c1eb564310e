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
    #: Park et al.'s calibrated quantiles [T, 3] (tau = 0.1, 0.5, 0.9) when an adapter is loaded
    quantiles: np.ndarray | None = None


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
        device_map: str | dict | None = None,
        max_memory: dict | None = None,
        offload_folder: str | None = None,
        **options: Any,
    ):
        from dprm.llm.generate import default_device_dtype

        self.name = str(name_or_path)
        self.device, self.dtype = default_device_dtype(device, dtype)
        self.device_map, self.max_memory = device_map, max_memory
        self.offload_folder = offload_folder
        self.options = options
        self.tokenizer, self.model = self._load(self.name)
        if self.device_map is None:
            self.model.to(self.device)
        else:  # accelerate placed the layers; inputs go where the embedding lives
            self.device = _input_device(self.model)
        self.model.eval()
        limit = getattr(self.model.config, "max_position_embeddings", None) or max_tokens
        self.max_tokens = int(min(max_tokens, limit))
        self.batch_tokens = int(batch_tokens)
        self.pad_id = int(self.tokenizer.pad_token_id or 0)
        #: a Park et al. calibrated adapter (:mod:`dprm.llm.park_adapter`), None without one
        self.adapter: Any = None
        self._setup()

    def load_kwargs(self) -> dict[str, Any]:
        """``from_pretrained`` keywords: the dtype, and the device map when one is asked for.

        ``device_map="auto"`` with ``max_memory`` (e.g. ``{0: "70GiB", 1: "70GiB", ...}``)
        shards the layers over a node's GPUs with accelerate, in order, so the last shard holds
        the final norm and the head; layers that do not fit go to CPU, then to
        ``offload_folder`` on disk.
        """
        from dprm.llm.generate import dtype_kwargs

        kwargs = dtype_kwargs(self.dtype)
        if self.device_map is not None:
            kwargs["device_map"] = self.device_map
            if self.max_memory is not None:
                kwargs["max_memory"] = self.max_memory
            if self.offload_folder is not None:
                kwargs["offload_folder"] = self.offload_folder
        return kwargs

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
        out = {
            "prm": self.name,
            "prm_kind": self.kind,
            "layer": self.layer,
            "prm_dtype": str(self.dtype).replace("torch.", ""),
            "max_tokens": self.max_tokens,
        }
        if self.device_map is not None:  # placement only: it does not change the numbers
            out["prm_device_map"] = _plain_map(getattr(self.model, "hf_device_map", None))
        if self.adapter is not None:
            out.update(self.adapter.provenance())
        return out

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
                index = (torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long))
                picked, scores = self._pass(ids, index, adapter=False)
                scores = scores.float().cpu().numpy()
                hidden = picked.float().cpu().numpy()
                quantiles = None
                if self.adapter is not None:
                    quantiles = self._pass(ids, index, adapter=True)[1].float().cpu().numpy()
            offset = 0
            for i in batch:
                t = len(encoded[i].positions)
                results[i] = StepOutput(
                    scores[offset : offset + t],
                    hidden[offset : offset + t],
                    encoded[i].truncated,
                    None if quantiles is None else quantiles[offset : offset + t],
                )
                offset += t
        return results  # type: ignore[return-value]

    def _pass(self, ids: Any, index: tuple[Any, Any], adapter: bool) -> tuple[Any, Any]:
        """(last hidden states [P, D], readout) at ``index`` (rows, cols) of the batch ``ids``.

        Without an adapter the readout is :meth:`readout` (scores [P]). With one loaded,
        ``adapter=False`` runs the base PRM (LoRA off, the original head: raw scores [P]) and
        ``adapter=True`` the calibrated one (its quantiles [P, M]). Under a device map the
        states come off the last shard; accelerate's hooks move them to the head's device.
        """
        import contextlib

        context = contextlib.nullcontext()
        if self.adapter is not None and not adapter:
            context = self.adapter.disabled()
        with context:
            out = self.body()(input_ids=ids.to(self.device), use_cache=False)
            states = out.last_hidden_state
            picked = states[index[0].to(states.device), index[1].to(states.device)]
            if self.adapter is None:
                return picked, self.readout(picked)
            if adapter:
                return picked, self.adapter.readout(picked)
            return picked, self.adapter.base_readout(picked)

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


def _input_device(model: Any) -> str:
    """Where input ids go under a device map: the embedding's device (cpu when offloaded)."""
    device = model.get_input_embeddings().weight.device
    return "cpu" if device.type == "meta" else str(device)


def _plain_map(device_map: Any) -> Any:
    if not isinstance(device_map, dict):
        return device_map
    return {str(k): (v if isinstance(v, int | str) else str(v)) for k, v in device_map.items()}


def parse_max_memory(text: str | None) -> dict | None:
    """``"0=70GiB,1=70GiB,cpu=100GiB"`` -> ``{0: "70GiB", 1: "70GiB", "cpu": "100GiB"}``
    (accelerate's ``max_memory``; ``--max-memory`` and a recipe's ``[[prms]] max_memory``)."""
    if not text:
        return None
    out: dict = {}
    for item in text.split(","):
        device, sep, size = item.strip().partition("=")
        if not sep or not device or not size:
            raise DataError(None, f"max_memory {text!r}: expected DEV=SIZE[,DEV=SIZE...]")
        out[int(device) if device.isdigit() else device] = size
    return out
