"""Park et al.'s calibrated LoRA adapters on Qwen2.5-Math-PRM-7B (``dprm embed --adapter``).

Park et al. (``young-j-park/prm-calibration``, ``prm/qwen.py``) calibrate the PRM itself: the last
layer of the score head, Linear(h, 2), is replaced by a quantile layer Linear(h, M) whose M rows
all start as the logistic difference ``w[1] - w[0]`` (bias ``b[1] - b[0]``), so that at
initialisation ``sigmoid`` of every output is the original positive probability; the model is then
fine-tuned with LoRA (r = 2 on the head's ``score.0`` / ``score.2`` and ``q_proj`` / ``v_proj`` of
every fourth layer) on the pinball loss at tau = 0.1, 0.5, 0.9. The released adapters
(``young-j-park/Qwen2.5-Math-PRM-7B-calibrated-{policy}``) are loaded here the way his demo
loads them: convert the head, then ``PeftModel.from_pretrained``; the quantiles are the sigmoid of
the three outputs at each step token.

:class:`ParkAdapter` attaches to a loaded :class:`~dprm.llm.prm.QwenPRM`: every forward then runs
twice, once with the adapter disabled (the raw score and hidden state every other calibrator
reads: the original 2-class layer is kept for it) and once with it enabled (the three
quantiles, ``StepOutput.quantiles``).
"""

from __future__ import annotations

from typing import Any

from dprm.io import DataError
from dprm.llm.prm_models import peft_ready

#: the adapters' quantile levels and the calibration-set columns that hold them
PARK_LEVELS = (0.1, 0.5, 0.9)
PARK_COLUMNS = ("park_q10", "park_q50", "park_q90")


def quantile_head(layer: Any, levels: int = len(PARK_LEVELS), positive: int = 1) -> Any:
    """Park's quantile layer: Linear(h, ``levels``), every row ``w[pos] - w[neg]`` (bias alike).

    Args:
        layer: the score head's last layer, Linear(h, 2) ([neg, pos] logits).
        levels: M, the number of quantile outputs.
        positive: index of the positive class (1 for Qwen2.5-Math-PRM).

    Returns:
        a new Linear(h, M) in ``layer``'s dtype and device; ``sigmoid`` of each output equals
        softmax(layer(x))[positive] before any fine-tuning.
    """
    import torch
    from torch import nn

    negative = 1 - positive
    weight = layer.weight.data[positive] - layer.weight.data[negative]
    bias = layer.bias.data[positive] - layer.bias.data[negative]
    new = nn.Linear(layer.in_features, levels, dtype=layer.weight.dtype, device=layer.weight.device)
    with torch.no_grad():
        new.weight.copy_(weight.unsqueeze(0).expand(levels, -1))
        new.bias.fill_(float(bias))
    return new


class ParkAdapter:
    """A Park et al. calibrated adapter on a Qwen PRM (see the module docstring).

    Args:
        prm: a loaded ``qwen-prm`` wrapper; its score head is converted in place and the LoRA
            weights injected into its model.
        source: the adapter directory or hub id (``adapter_config.json`` +
            ``adapter_model.safetensors``).

    Raises:
        DataError: the PRM is not a ``qwen-prm``, peft is missing, or the adapter does not load.
    """

    def __init__(self, prm: Any, source: str):
        if prm.kind != "qwen-prm":
            raise DataError(
                source,
                f"Park et al.'s adapters calibrate Qwen2.5-Math-PRM (kind qwen-prm); got {prm.kind}",
            )
        try:
            from peft import PeftModel
        except ImportError:
            raise DataError(source, "--adapter needs peft: pip install 'dprm[llm]'") from None
        self.source = str(source)
        head = prm.model.score
        #: the original 2-class layer, kept for the raw score (the conversion's w1 - w0 rounds
        #: in bf16, so the converted layer with the adapter off is not bit-identical to it)
        self.base_layer = head[2]
        head[2] = quantile_head(self.base_layer)
        try:
            self.peft = PeftModel.from_pretrained(
                peft_ready(prm.model), self.source, is_trainable=False
            )
        except (OSError, ValueError, KeyError, RuntimeError) as err:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise DataError(self.source, f"cannot load the adapter: {first[:300]}") from None
        self.peft.eval()
        self.prm = prm

    def disabled(self) -> Any:
        """Context manager: the base PRM (LoRA off) inside."""
        return self.peft.disable_adapter()

    def base_readout(self, hidden: Any) -> Any:
        """Raw PRM scores [P] from hidden states [P, D], through the original 2-class layer."""
        head = self.prm.model.score
        return self.base_layer(head[1](head[0](hidden))).float().softmax(-1)[:, 1]

    def readout(self, hidden: Any) -> Any:
        """Park's quantiles [P, 3] (tau = 0.1, 0.5, 0.9) from the adapted hidden states."""
        return self.prm.model.score(hidden).float().sigmoid()

    def provenance(self) -> dict:
        return {"prm_adapter": self.source, "adapter_levels": list(PARK_LEVELS)}


def attach_adapter(prm: Any, source: str) -> ParkAdapter:
    """Load Park's adapter ``source`` onto ``prm`` (a ``qwen-prm`` wrapper) and return it."""
    prm.adapter = ParkAdapter(prm, source)
    return prm.adapter
