"""Tiny, locally built models and tokenizers for the pipeline tests (no network, no GPU).

- ``build_tokenizers``: a byte-level BPE trained on a few hundred MATH problems plus the
  prompts, with the special tokens the PRM formats need; a Qwen-style copy (chat template, no
  BOS) and a Mistral-style copy (``<s>`` prepended, pad = ``<s>``, as ReasonEval's).
- ``build_bigram_lm``: a real ``Qwen2ForCausalLM`` whose attention and MLP outputs are zeroed
  and whose embeddings are one-hot, so it is exactly a bigram model of a small corpus of
  step-by-step solutions: it writes ``## Step k:`` steps separated by blank lines and boxed
  answers that are right or wrong at random, without any training.
- ``build_qwen_prm`` / ``build_shepherd`` / ``build_reasoneval`` / ``build_token_classifier``:
  randomly initialised PRMs saved with safetensors.

Heavy imports stay inside functions: grading workers import this module for ``sleepy_grade``.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<extra_0>", "ки", "<s>", "</s>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def solution(a: int, b: int, said: int) -> str:
    """A three-step solution of ``a + b`` that answers ``said`` (step 2 holds the boxed answer)."""
    return (
        f"## Step 1: {a} + {b} = {said}.\n\n## Step 2: The answer is $\\boxed{{{said}}}$.\n\n"
        "I hope it is correct."
    )


def sleepy_grade(gold: str, prediction: str) -> bool:
    """A test grader: hangs on "hang", dies on "crash", else exact match."""
    if prediction == "hang":
        time.sleep(3600)
    if prediction == "crash":
        os._exit(3)
    return gold == prediction


def build_tokenizers(root: Path) -> dict[str, Path]:
    """Train the BPE once; save a Qwen-style and a Mistral-style tokenizer directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from dprm.llm.prm import QWEN_PRM_SYSTEM, REASONEVAL_PROMPT
    from dprm.llm.prompts import SYSTEM_PROMPT
    from dprm.llm.questions import packaged_path, read_records

    lines = [row["problem"] for row in read_records(packaged_path("math"))[:300]]
    lines += [SYSTEM_PROMPT, QWEN_PRM_SYSTEM, REASONEVAL_PROMPT] * 3
    lines += [solution(a, b, a + b) for a in range(1, 10) for b in range(1, 10)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=800,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer)
    qwen = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    qwen.chat_template = CHAT_TEMPLATE
    paths = {"qwen": root / "tok-qwen", "mistral": root / "tok-mistral"}
    qwen.save_pretrained(paths["qwen"])
    mtok = Tokenizer.from_str(tok.to_str())
    bos = tok.token_to_id("<s>")
    mtok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    mistral = PreTrainedTokenizerFast(
        tokenizer_object=mtok, bos_token="<s>", eos_token="</s>", pad_token="<s>"
    )
    mistral.save_pretrained(paths["mistral"])
    return paths


def _tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def build_bigram_lm(
    tokenizer_dir: Path,
    out: Path,
    answers: tuple[int, ...] = (7, 7, 7, 6, 8),
    *,
    hidden_size: int | None = None,
    num_heads: int = 4,
    num_kv_heads: int = 2,
) -> Path:
    """A Qwen2 causal LM that is exactly a bigram model of ``solution(3, 4, a)`` for ``a`` in answers.

    ``hidden_size`` (default: the smallest multiple of 4 that holds the corpus' tokens) and the
    head counts shape the attention only, whose output is zeroed: vLLM's CPU attention needs a
    head dimension of at least 32 (e.g. hidden 128 over 2 heads).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from dprm.llm.prompts import build_prompt

    tok = _tokenizer(tokenizer_dir)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    seqs = [tok.encode(solution(3, 4, a)) + [eos] for a in answers]
    start = tok.encode(build_prompt("x", "qwen"))[-1]
    known = sorted({t for s in seqs for t in s} | {start})
    slot = {t: i for i, t in enumerate(known)}
    other = len(known)
    hidden = ((other + 1 + 3) // 4) * 4
    if hidden_size is not None:
        if hidden_size < other + 1 or hidden_size % num_heads:
            raise ValueError(
                f"hidden_size {hidden_size}: needs >= {other + 1}, a multiple of {num_heads}"
            )
        hidden = hidden_size
    counts = torch.zeros(hidden, len(tok))
    for seq in seqs:
        for a, b in zip([start, *seq[:-1]], seq, strict=True):
            counts[slot[a], b] += 1
    counts[counts.sum(1) == 0, eos] = 1
    logits = torch.log((counts / counts.sum(1, keepdim=True)).clamp_min(1e-12))
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=1, num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads, intermediate_size=16, max_position_embeddings=1024,
        tie_word_embeddings=False, rms_norm_eps=1e-6,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        emb = torch.zeros(len(tok), hidden)
        emb[:, other] = 1.0
        for token, i in slot.items():
            emb[token] = 0.0
            emb[token, i] = 1.0
        model.model.embed_tokens.weight.copy_(emb)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)
        model.lm_head.weight.copy_(logits.T / math.sqrt(hidden))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _qwen2_config(vocab: int, max_positions: int = 512, **extra):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=max_positions, **extra,
    )  # fmt: skip


def build_qwen_prm(tokenizer_dir: Path, out: Path, seed: int = 0, max_positions: int = 512) -> Path:
    """Random Qwen2 body + Linear-ReLU-Linear(2) head (Qwen2.5-Math-PRM layout)."""
    import torch

    from dprm.llm.prm_models import qwen_prm_class

    tok = _tokenizer(tokenizer_dir)
    torch.manual_seed(seed)
    model = qwen_prm_class()(_qwen2_config(len(tok), max_positions))
    with torch.no_grad():  # a visible spread of scores instead of ~0.5 everywhere
        model.score[2].weight.mul_(40.0)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _mistral_config(vocab: int, **extra):
    from transformers import MistralConfig

    return MistralConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=512, **extra,
    )  # fmt: skip


def build_shepherd(tokenizer_dir: Path, out: Path, seed: int = 0) -> Path:
    """Random Mistral causal LM (Math-Shepherd layout) with a BOS-adding tokenizer."""
    import torch
    from transformers import MistralForCausalLM

    tok = _tokenizer(tokenizer_dir)
    torch.manual_seed(seed)
    MistralForCausalLM(_mistral_config(len(tok))).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def build_reasoneval(tokenizer_dir: Path, out: Path, seed: int = 0) -> Path:
    """Random Mistral body + score_head Linear(h, 3) (ReasonEval-7B layout), pad = BOS = <s>."""
    import torch

    from dprm.llm.prm_models import reasoneval_class

    tok = _tokenizer(tokenizer_dir)
    torch.manual_seed(seed)
    model = reasoneval_class()(_mistral_config(len(tok), score_dimension=3, use_bias=False))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def build_token_classifier(tokenizer_dir: Path, out: Path, seed: int = 0) -> Path:
    """Random ``Qwen2ForTokenClassification`` with 2 labels."""
    import torch
    from transformers import Qwen2ForTokenClassification

    tok = _tokenizer(tokenizer_dir)
    torch.manual_seed(seed)
    Qwen2ForTokenClassification(_qwen2_config(len(tok), num_labels=2)).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def label_rows(trajectories):
    """Contract label rows for every prefix (k = 0..#steps) of each trajectory (fake counts)."""
    import pandas as pd

    from dprm.llm.prompts import join_steps, split_steps

    rows = []
    for t in trajectories.itertuples():
        steps = split_steps(t.response)
        for k in range(len(steps) + 1):
            rows.append({"question_id": t.question_id, "response_id": t.response_id, "step": k,
                         "question": t.question, "reasoning_prefix": join_steps(steps[:k]),
                         "n_correct": k % 3, "n_rollouts": 4, "success_prob": (k % 3) / 4})  # fmt: skip
    return pd.DataFrame(rows).astype(
        {
            "response_id": "int32",
            "step": "int32",
            "n_correct": "int32",
            "n_rollouts": "int32",
            "success_prob": "float32",
        }
    )
