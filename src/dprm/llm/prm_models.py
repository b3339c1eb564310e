"""PRM checkpoints loaded without remote code: a transformer body plus its score head.

Parameter names match the released checkpoints, so ``from_pretrained`` loads them directly.
The classes are built on first use, so importing this module does not import transformers.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any


class _HeadOnBody:
    """``forward``: the score head (attribute ``head_name``) on the body's last hidden state."""

    head_name: str
    model: Any  # the body, set by the subclass

    def forward(self, input_ids: Any, attention_mask: Any = None) -> Any:
        """Head outputs [B, L, K] for token ids [B, L]."""
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return getattr(self, self.head_name)(hidden)


@lru_cache(maxsize=1)
def qwen_prm_class() -> type:
    """``Qwen2ForProcessRewardModel``: a Qwen2 body with Qwen2.5-Math-PRM's ``score`` head.

    Parameter names match the released checkpoint (``model.*``, ``score.0.*``, ``score.2.*``),
    so ``from_pretrained`` loads it without remote code.
    """
    from torch import nn
    from transformers import Qwen2Model
    from transformers.models.qwen2.modeling_qwen2 import Qwen2PreTrainedModel

    class Qwen2ForProcessRewardModel(_HeadOnBody, Qwen2PreTrainedModel):
        head_name = "score"

        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.model = Qwen2Model(config)
            h = config.hidden_size
            self.score = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 2))
            self.post_init()

    return Qwen2ForProcessRewardModel


@lru_cache(maxsize=1)
def reasoneval_class() -> type:
    """``ReasonEval7B``: a Mistral body with a ``score_head`` Linear(h, score_dimension)."""
    from torch import nn
    from transformers import MistralModel
    from transformers.models.mistral.modeling_mistral import MistralPreTrainedModel

    class ReasonEval7B(_HeadOnBody, MistralPreTrainedModel):
        _keys_to_ignore_on_load_missing = ["lm_head.weight"]
        head_name = "score_head"

        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.model = MistralModel(config)
            dim = getattr(config, "score_dimension", 3)
            self.score_head = nn.Linear(
                config.hidden_size, dim, bias=bool(getattr(config, "use_bias", False))
            )
            self.post_init()

    return ReasonEval7B


@lru_cache(maxsize=1)
def skywork_prm_class() -> type:
    """``SkyworkPRM``: a Qwen2 body with Skywork-o1-Open-PRM's value head ``v_head.summary``.

    The released checkpoints hold a Qwen2 causal LM (``model.*``, ``lm_head.weight``) plus the
    value head ``v_head.summary.weight`` [1, h] and ``v_head.summary.bias`` [1] (the TRL-style
    ``ValueHead`` of Skywork's ``PRM_MODEL``, bundled by search-and-learn); the reward is the
    sigmoid of that one output, read on the body's last hidden state. ``lm_head`` is not loaded.
    """
    from torch import nn
    from transformers import Qwen2Model
    from transformers.models.qwen2.modeling_qwen2 import Qwen2PreTrainedModel

    class ValueHead(nn.Module):
        """``summary``: Linear(h, 1), the checkpoint's ``v_head.summary.*`` (dropout is a no-op
        at inference)."""

        def __init__(self, hidden_size: int) -> None:
            super().__init__()
            self.summary = nn.Linear(hidden_size, 1)

        def forward(self, hidden: Any) -> Any:
            return self.summary(hidden)

    class SkyworkPRM(_HeadOnBody, Qwen2PreTrainedModel):
        _keys_to_ignore_on_load_unexpected = [r"lm_head\.weight"]
        head_name = "v_head"

        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.model = Qwen2Model(config)
            self.v_head = ValueHead(config.hidden_size)
            self.post_init()

    return SkyworkPRM


def _inputs_for_generation(input_ids: Any, **kwargs: Any) -> dict:
    return {"input_ids": input_ids, **kwargs}


def peft_ready(model: Any) -> Any:
    """``model`` with a ``prepare_inputs_for_generation`` attribute, which peft's CAUSAL_LM
    wrapper reads on construction (Park et al.'s adapters are saved with that task type;
    transformers < 4.50 gave every model one). Set on the instance: the PRM never generates."""
    if not hasattr(model, "prepare_inputs_for_generation"):
        model.prepare_inputs_for_generation = _inputs_for_generation
    return model
