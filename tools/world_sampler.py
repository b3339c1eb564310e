"""A batched, KV-cached temperature sampler for the arithmetic world's small Qwen2 models.

``transformers``' ``generate`` spends most of its time growing its cache at every step when the
batch is large (thousands of sequences) and the model tiny; the world's training and its
statistics draw hundreds of thousands of solutions and Monte Carlo rollouts. This sampler
runs the same ``Qwen2ForCausalLM`` modules (its own layers, norms and rotary embedding, so the
arithmetic is transformers') over a preallocated cache, and drops finished sequences from the
batch as it goes. ``tools/world_stats.py`` checks it against dprm's transformers generator.

    texts = sample_texts(model, tok, prompts, n=8, temperature=1.0, max_new=160, seed=0)
"""

from __future__ import annotations

import math


def _attention(layer, x, cos, sin, k_cache, v_cache, start: int, key_mask):
    """One self-attention block over the cache; writes this call's keys/values at ``start``.

    Args:
        x: [B, T, H] normed hidden states of the new positions.
        k_cache, v_cache: [B, kv_heads, L, D] preallocated.
        key_mask: [B, 1, T, start + T] bool, True where a query may attend.
    """
    import torch
    from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

    attn = layer.self_attn
    b, t, _ = x.shape
    d = attn.head_dim
    q = attn.q_proj(x).view(b, t, -1, d).transpose(1, 2)
    k = attn.k_proj(x).view(b, t, -1, d).transpose(1, 2)
    v = attn.v_proj(x).view(b, t, -1, d).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    k_cache[:, :, start : start + t] = k
    v_cache[:, :, start : start + t] = v
    keys = k_cache[:, :, : start + t]
    values = v_cache[:, :, : start + t]
    groups = q.shape[1] // keys.shape[1]
    if groups > 1:
        keys = keys.repeat_interleave(groups, dim=1)
        values = values.repeat_interleave(groups, dim=1)
    # by hand rather than scaled_dot_product_attention, which copies the cache slices
    scores = torch.matmul(q, keys.transpose(-1, -2)) * (1.0 / math.sqrt(d))
    scores = scores.masked_fill(~key_mask, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), values)
    return attn.o_proj(out.transpose(1, 2).reshape(b, t, -1))


def _forward(model, ids, positions, caches, start: int, key_mask):
    """Logits of the last position: [B, vocab]."""
    body = model.model
    h = body.embed_tokens(ids)
    cos, sin = body.rotary_emb(h, positions)
    for layer, (k_cache, v_cache) in zip(body.layers, caches, strict=True):
        h = h + _attention(
            layer, layer.input_layernorm(h), cos, sin, k_cache, v_cache, start, key_mask
        )
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    return model.lm_head(body.norm(h[:, -1]))


def sample_ids(
    model,
    prompts: list[list[int]],
    copies: int,
    temperature: float,
    max_new: int,
    stop_ids: set[int],
    generator,
) -> list[list[int]]:
    """``copies`` sampled continuations per prompt (token ids, the stop token included when
    reached), prompt-major: row ``i * copies + j`` is prompt i's j-th draw.

    Each prompt is run once; its cache is then copied to its ``copies`` rows.

    Args:
        model: a ``Qwen2ForCausalLM`` in eval mode (float32).
        prompts: token ids per prompt (left-padded here).
        copies: draws per prompt (>= 1).
        temperature: > 0 samples from softmax(logits / T); 0 takes the argmax.
        max_new: most new tokens per sequence.
        stop_ids: tokens that end a sequence.
        generator: a seeded ``torch.Generator`` (the draws' only randomness).
    """
    import torch

    b = len(prompts)
    width = max(len(p) for p in prompts)
    ids = torch.zeros((b, width), dtype=torch.long)
    valid = torch.zeros((b, width + max_new), dtype=torch.bool)
    for row, seq in enumerate(prompts):
        ids[row, width - len(seq) :] = torch.tensor(seq)
        valid[row, width - len(seq) : width] = True
    lengths = torch.tensor([len(p) for p in prompts])
    cfg = model.config
    kv_heads = cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    caches = [
        (
            torch.zeros((b, kv_heads, width + max_new, head_dim)),
            torch.zeros((b, kv_heads, width + max_new, head_dim)),
        )
        for _ in range(cfg.num_hidden_layers)
    ]
    outputs: list[list[int]] = [[] for _ in range(b * copies)]
    rows = torch.arange(b * copies)  # the original index of each live row
    positions = (torch.cumsum(valid[:, :width].long(), dim=1) - 1).clamp(min=0)
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    mask = causal[None, None] & valid[:, None, None, :width]
    # a padding query attends to nothing: give it itself so softmax stays finite
    mask = mask | torch.eye(width, dtype=torch.bool)[None, None]
    stops = torch.tensor(sorted(stop_ids))
    with torch.no_grad():
        logits = _forward(model, ids, positions, caches, 0, mask)
        if copies > 1:
            logits = logits.repeat_interleave(copies, dim=0)
            valid = valid.repeat_interleave(copies, dim=0)
            lengths = lengths.repeat_interleave(copies, dim=0)
            caches = [
                (k.repeat_interleave(copies, dim=0), v.repeat_interleave(copies, dim=0))
                for k, v in caches
            ]
        live = torch.ones(b * copies, dtype=torch.bool)  # rows of the cache still sampling
        for step in range(max_new):
            if temperature > 0:
                probs = torch.softmax(logits / temperature, dim=-1)
                token = torch.multinomial(probs, 1, generator=generator)[:, 0]
            else:
                token = logits.argmax(dim=-1)
            for row, tok, alive in zip(rows.tolist(), token.tolist(), live.tolist(), strict=True):
                if alive:
                    outputs[row].append(tok)
            live = live & ~torch.isin(token, stops)
            if step == max_new - 1 or not bool(live.any()):
                break
            if int(live.sum()) < 0.6 * len(live):  # drop finished rows (copying costs: rarely)
                rows, token, lengths = rows[live], token[live], lengths[live]
                valid = valid[live]
                caches = [(k[live], v[live]) for k, v in caches]
                live = live[live]
            pos = width + step
            valid[:, pos] = True
            step_mask = valid[:, None, None, : pos + 1]
            step_positions = (lengths + step)[:, None]
            logits = _forward(model, token[:, None], step_positions, caches, pos, step_mask)
    return outputs


def sample_texts(
    model,
    tok,
    prompts: list[str],
    n: int,
    temperature: float,
    max_new: int,
    seed: int,
    batch: int = 1024,
) -> list[list[str]]:
    """``n`` sampled continuations per prompt string, decoded (special tokens dropped).

    The prompts are batched in order of length (less padding); draws depend on ``seed``,
    ``batch`` and the prompts' order only.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    stop = {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
    encoded = [tok.encode(p, add_special_tokens=False) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: (len(encoded[i]), i))
    per_batch = max(1, batch // n)
    texts: list[list[str]] = [[] for _ in prompts]
    for start in range(0, len(order), per_batch):
        chunk = order[start : start + per_batch]
        outs = sample_ids(
            model, [encoded[i] for i in chunk], n, temperature, max_new, stop, generator
        )
        decoded = tok.batch_decode(outs, skip_special_tokens=True)
        for k, i in enumerate(chunk):
            texts[i] = decoded[k * n : (k + 1) * n]
    return texts
