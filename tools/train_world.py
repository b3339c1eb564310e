"""Train the arithmetic world's generator and PRM from scratch (CPU, fixed seeds).

    python tools/train_world.py generator            # ~10 min on 2 cores
    python tools/train_world.py prm                  # samples from the generator, then trains
    python tools/train_world.py all --out DIR        # both, into DIR/{generator,prm}

The generator is a ``Qwen2ForCausalLM`` (2 layers, hidden 64, 2 heads of 32) trained by
next-token loss on the reference solutions of freshly drawn problems (a seed stream disjoint
from the packaged question sets), the loss on the solution tokens only. Its tokenizer is
byte-level with no merges (one token per character) plus a few added tokens: the chat markers,
the PRM's step tag ``<extra_0>``, the two system prompts and the fixed phrases of a solution
(``## Step ``, the final-answer sentence), so prompts stay short and ``"\\n\\n"`` is two
``"\\n"`` tokens wherever it appears.

The PRM is a ``Qwen2ForProcessRewardModel`` (Qwen2.5-Math-PRM's layout, read by
``dprm.llm.prm.QwenPRM``), its body initialised from the generator, trained with binary
cross-entropy at every ``<extra_0>`` on the generator's own sampled solutions, each step
labelled exactly by :func:`dprm.llm.tasks.arith.check_steps` (1 while the prefix is still on
the true solution path, 0 from the first wrong step on).

Writes ``provenance.json`` beside each model (script, arguments, seed, commit, CPU-seconds,
wall time, final loss).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dprm.llm.prm import QWEN_PRM_SYSTEM  # noqa: E402
from dprm.llm.prompts import SYSTEM_PROMPT, build_prompt  # noqa: E402
from dprm.llm.tasks.arith import (  # noqa: E402
    ArithSpec,
    check_steps,
    make_problem,
)

DEFAULT_OUT = ROOT / "src" / "dprm" / "llm" / "worlds" / "arith"
#: the training distribution, by index modulo 3: two thirds one-digit operands (the train/ID
#: splits' knobs, plus one-operation problems), one third two-digit operands with at most 3
#: operations (OOD asks for up to 4)
TRAIN_SPECS = (
    ArithSpec(min_steps=1, max_steps=3, digits=1, operations=("+", "-")),
    ArithSpec(min_steps=1, max_steps=3, digits=1, operations=("+", "-")),
    ArithSpec(min_steps=1, max_steps=3, digits=2, operations=("+", "-")),
)
TRAIN_STREAM = 9_000_000  # seed offset of the training problems (packaged sets use < 3e6)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<extra_0>"]
PHRASES = [
    SYSTEM_PROMPT,
    QWEN_PRM_SYSTEM,
    "## Step ",
    "Therefore, the final answer is: $\\boxed{",
    "}$. I hope it is correct.",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tokenizer():
    """Byte-level, no merges (one token per byte) plus the special and phrase tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(p, special=False, normalized=False) for p in PHRASES])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def save_tokenizer(tok, out: Path) -> None:
    """``save_pretrained`` plus the chat template inside ``tokenizer_config.json`` too (older
    transformers and vLLM read it there; newer ones write ``chat_template.jinja``), and a
    tokenizer class the declared transformers floor can load."""
    tok.save_pretrained(out)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = CHAT_TEMPLATE
    # a class every supported transformers knows (4.48 has no "TokenizersBackend", the name
    # newer releases write)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def training_problem(index: int, seed: int):
    return make_problem(TRAIN_SPECS[index % len(TRAIN_SPECS)], TRAIN_STREAM + seed, index)


def encode_example(tok, question: str, solution: str) -> tuple[list[int], int]:
    """(ids of prompt + solution + <|im_end|>, length of the prompt)."""
    prompt = tok.encode(build_prompt(question, "qwen", template="qwen"))
    answer = tok.encode(solution + "<|im_end|>")
    return prompt + answer, len(prompt)


def batch_tensors(examples, pad_id: int):
    import torch

    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (seq, prompt_len) in enumerate(examples):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
        labels[row, prompt_len : len(seq)] = torch.tensor(seq[prompt_len:])
    return ids, mask, labels


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_generator(
    out: Path, seed: int, steps: int, batch: int, lr: float, hidden: int, layers: int
) -> dict:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    tok = build_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=hidden // 32, num_key_value_heads=hidden // 32,
        intermediate_size=4 * hidden, max_position_embeddings=512,
        tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=10000.0,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    model = Qwen2ForCausalLM(config)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    t0, c0 = time.time(), time.process_time()
    index = 0
    losses = []
    for step in range(steps):
        examples = []
        for _ in range(batch):
            problem = training_problem(index, seed)
            index += 1
            examples.append(encode_example(tok, problem.question, problem.solution()))
        ids, mask, labels = batch_tensors(examples, tok.pad_token_id)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup=min(100, steps // 10))
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if (step + 1) % 60 == 0 and step + 1 < steps:  # a usable model if stopped early
            model.save_pretrained(out / "checkpoint", safe_serialization=True)
            save_tokenizer(tok, out / "checkpoint")
        if step % 20 == 0 or step == steps - 1:
            recent = sum(losses[-20:]) / len(losses[-20:])
            print(
                f"generator step {step}/{steps} loss {recent:.4f} wall {time.time() - t0:.0f}s",
                flush=True,
            )
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.float16).save_pretrained(out, safe_serialization=True)
    save_tokenizer(tok, out)
    return {
        "seed": seed, "steps": steps, "batch": batch, "lr": lr, "hidden": hidden, "layers": layers,
        "examples": index, "final_loss": sum(losses[-50:]) / len(losses[-50:]),
        "wall_s": round(time.time() - t0, 1), "cpu_s": round(time.process_time() - c0, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
    }  # fmt: skip


def sample_solutions(model, tok, questions: list[str], n: int, seed: int, max_new: int = 160):
    """``n`` sampled solutions (temperature 1.0) per question, batched with left padding."""
    import torch

    from dprm.llm.prompts import build_prompt

    torch.manual_seed(seed)
    tok.padding_side = "left"
    prompts = [build_prompt(q, "qwen", template="qwen") for q in questions]
    texts: list[list[str]] = []
    per_batch = max(1, 256 // n)
    stop = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    for start in range(0, len(prompts), per_batch):
        chunk = prompts[start : start + per_batch]
        enc = tok(chunk, return_tensors="pt", padding=True)
        with torch.no_grad():
            gen = model.generate(
                **enc, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                max_new_tokens=max_new, num_return_sequences=n, eos_token_id=stop,
                pad_token_id=tok.pad_token_id,
            )  # fmt: skip
        outs = tok.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        for i in range(len(chunk)):
            texts.append(outs[i * n : (i + 1) * n])
    return texts


def prm_examples(tok, problems, solutions) -> list[tuple[list[int], list[int], list[float]]]:
    """(ids, positions of <extra_0>, labels) per sampled solution, the QwenPRM format."""
    sep = "<extra_0>"
    sep_id = tok.convert_tokens_to_ids(sep)
    rows = []
    for problem, texts in zip(problems, solutions, strict=True):
        for text in texts:
            steps = text.split("\n\n")
            labels = [float(f) for f in check_steps(problem.start, problem.ops, steps)]
            messages = [
                {"role": "system", "content": QWEN_PRM_SYSTEM},
                {"role": "user", "content": problem.question},
                {"role": "assistant", "content": sep.join(steps) + sep},
            ]
            ids = tok.encode(tok.apply_chat_template(messages, tokenize=False))
            positions = [i for i, t in enumerate(ids) if t == sep_id]
            if len(positions) == len(steps) and len(ids) <= 512:
                rows.append((ids, positions, labels))
    return rows


def train_prm(
    out: Path, generator: Path, seed: int, questions: int, samples: int, epochs: int, lr: float
) -> dict:
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from dprm.llm.prm_models import qwen_prm_class

    torch.manual_seed(seed)
    t0, c0 = time.time(), time.process_time()
    tok = AutoTokenizer.from_pretrained(generator)
    policy = Qwen2ForCausalLM.from_pretrained(generator, torch_dtype=torch.float32).eval()
    problems = [training_problem(10_000_000 + i, seed) for i in range(questions)]
    solutions = sample_solutions(policy, tok, [p.question for p in problems], samples, seed)
    rows = prm_examples(tok, problems, solutions)
    sample_s = time.time() - t0
    labels_all = [y for _, _, ys in rows for y in ys]
    finals = [ys[-1] for _, _, ys in rows]
    print(
        f"prm data: {len(rows)} solutions, {len(labels_all)} steps, step-positive "
        f"{sum(labels_all) / len(labels_all):.3f}, solved {sum(finals) / len(finals):.3f} "
        f"({sample_s:.0f}s)",
        flush=True,
    )
    config = policy.config
    config.architectures = ["Qwen2ForProcessRewardModel"]
    model = qwen_prm_class()(config)
    model.model.load_state_dict(policy.model.state_dict())
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    rng = random.Random(seed)
    batch = 32
    total = epochs * math.ceil(len(rows) / batch)
    step = 0
    losses = []
    for _ in range(epochs):
        order = list(range(len(rows)))
        rng.shuffle(order)
        for start in range(0, len(order), batch):
            chunk = [rows[i] for i in order[start : start + batch]]
            width = max(len(ids) for ids, _, _ in chunk)
            ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, (seq, _, _) in enumerate(chunk):
                ids[r, : len(seq)] = torch.tensor(seq)
                mask[r, : len(seq)] = 1
            rows_idx = [r for r, (_, pos, _) in enumerate(chunk) for _ in pos]
            cols_idx = [p for _, pos, _ in chunk for p in pos]
            target = torch.tensor([y for _, _, ys in chunk for y in ys])
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total, lr, warmup=min(50, total // 10))
            logits = model(input_ids=ids, attention_mask=mask)[rows_idx, cols_idx]  # [S, 2]
            # BCE on the positive-class probability softmax(logits)[1] = sigmoid(l1 - l0)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits[:, 1] - logits[:, 0], target
            )
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss))
            if step % 25 == 0 or step == total - 1:
                recent = sum(losses[-25:]) / len(losses[-25:])
                print(f"prm step {step}/{total} bce {recent:.4f}", flush=True)
            step += 1
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.float16).save_pretrained(out, safe_serialization=True)
    save_tokenizer(tok, out)
    return {
        "seed": seed, "questions": questions, "samples_per_question": samples,
        "solutions": len(rows), "steps_labelled": len(labels_all),
        "step_positive_rate": sum(labels_all) / len(labels_all), "epochs": epochs, "lr": lr,
        "final_bce": sum(losses[-25:]) / len(losses[-25:]),
        "wall_s": round(time.time() - t0, 1), "cpu_s": round(time.process_time() - c0, 1),
    }  # fmt: skip


def write_provenance(out: Path, what: str, args: argparse.Namespace, stats: dict) -> None:
    record = {
        "model": what,
        "script": "tools/train_world.py",
        "command": " ".join(["python", "tools/train_world.py", *sys.argv[1:]]),
        "commit": git_commit(),
        "threads": args.threads,
        **stats,
    }
    (out / "provenance.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["generator", "prm", "all"])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=800, help="generator optimiser steps")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=64, help="generator width (32 per head)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=7e-3)
    parser.add_argument("--prm-questions", type=int, default=300)
    parser.add_argument("--prm-samples", type=int, default=8)
    parser.add_argument("--prm-epochs", type=int, default=2)
    parser.add_argument("--prm-lr", type=float, default=1e-3)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.what in ("generator", "all"):
        stats = train_generator(
            args.out / "generator",
            args.seed,
            args.steps,
            args.batch,
            args.lr,
            args.hidden,
            args.layers,
        )
        write_provenance(args.out / "generator", "generator", args, stats)
        print(json.dumps(stats), flush=True)
    if args.what in ("prm", "all"):
        stats = train_prm(
            args.out / "prm", args.out / "generator", args.seed, args.prm_questions,
            args.prm_samples, args.prm_epochs, args.prm_lr,
        )  # fmt: skip
        write_provenance(args.out / "prm", "prm", args, stats)
        print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
