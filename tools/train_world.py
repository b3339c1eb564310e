"""Train the arithmetic world's generator and PRM from scratch (CPU, fixed seeds).

    python tools/train_world.py all                  # the shipped models' arguments
    python tools/train_world.py generator            # one stage at a time: generator,
    python tools/train_world.py prm-body             #   prm-body, prm-data, prm
    python tools/train_world.py all --out DIR --work WORK

The generator is a ``Qwen2ForCausalLM`` (2 layers, hidden 128, 4 heads of 32) trained by
next-token loss on the reference solutions of freshly drawn problems (a seed stream that skips
every packaged question), the loss on the solution tokens only; the checkpoint after
``--policy-step`` steps is kept under ``--work`` (an earlier, weaker policy). After ``--steps``
the model (the *base*, kept under ``--work/base``) trains ``--more-steps`` more on the
continuing stream with a fresh optimiser and schedule: the base at ``--prm-temperature`` is the
policy whose solutions train the PRM, the longer-trained model is the shipped generator.
Its tokenizer is byte-level with no merges (one token per character) plus added tokens: the
chat markers, the PRM's step tag ``<extra_0>``, the two system prompts, the fixed phrases of a
solution (``## Step ``, the final-answer sentence) and the fixed words of a question (names,
items, the sentences around their numbers), so prompts stay short, numbers are one token per
digit and ``"\\n\\n"`` is two ``"\\n"`` tokens wherever it appears.

The PRM (``tools/world_prm.py``): a larger body pretrained on reference solutions in the PRM's
input format, then Qwen2.5-Math-PRM's head trained on Monte Carlo step labels of another
policy's solutions (the base at another temperature, the earlier checkpoint, or the shipped
generator at another temperature), with damaged copies among the negatives.

Matrix products run in bfloat16 under autocast (float32 weights and optimiser state).
Training is deterministic for a given seed, arguments, thread count and machine; on another
CPU or torch build the bytes differ and the behaviour agrees within sampling noise (a test
retrains a short version and checks its loss within a tolerance).

Writes ``provenance.json`` beside each model and intermediate: command, commit, seed, threads,
torch / transformers / Python versions, CPU model, CPU-seconds, wall time, final loss and the
sha256 of every file in the folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tools"))

from dprm.llm.prm import QWEN_PRM_SYSTEM  # noqa: E402
from dprm.llm.prompts import SYSTEM_PROMPT, build_prompt  # noqa: E402
from dprm.llm.tasks.arith import (  # noqa: E402
    ITEMS,
    NAMES,
    SENTENCES,
    ArithSpec,
    make_problem,
)
from dprm.llm.tasks.arith_sets import packaged_questions  # noqa: E402
from world_prm import add_prm_arguments, run_prm_stage  # noqa: E402

DEFAULT_OUT = ROOT / "src" / "dprm" / "llm" / "worlds" / "arith"


def train_specs(max_ops: int) -> tuple[ArithSpec, ...]:
    """The training distribution, by stream index modulo 3: the train/ID splits' knobs with
    1..``max_ops`` operations (one- or two-digit operands per question), and one third
    two-digit problems (the ID splits' hard half)."""
    mixed = ArithSpec(min_steps=1, max_steps=max_ops, digits=1, max_digits=2)
    return (mixed, mixed, ArithSpec(min_steps=1, max_steps=max_ops, digits=2))


#: the base generator's, the PRM body's and the PRM data's stream: 1-4 operations, as the
#: calibration (train) and ID splits ask 2-4; the generator's second phase sees up to
#: ``--more-max-ops`` (5: OOD asks 5-6, one operation beyond the generator, two beyond the PRM)
TRAIN_SPECS = train_specs(4)
TRAIN_STREAM = 9_000_000  # seed offset of the training problems (packaged sets use < 5e6)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<extra_0>"]


def _question_words() -> list[str]:
    """The fixed words of the questions (names, items, the sentences' text around their
    blanks), one token each, so a question is a few dozen tokens and its numbers stay digits."""
    import re

    pieces = {"has ", " has ", "How many ", " does ", " have now?"}
    for templates in SENTENCES.values():
        for template in templates:
            pieces.update(p for p in re.split(r"\{\w+\}", template) if p.strip())
    return [*NAMES, *ITEMS, *sorted(pieces, key=lambda p: (-len(p), p)), "assistant", "system"]


PHRASES = [
    SYSTEM_PROMPT,
    QWEN_PRM_SYSTEM,
    "## Step ",
    "Therefore, the final answer is: $\\boxed{",
    "}$. I hope it is correct.",
    *_question_words(),
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


def training_problems(
    start: int, count: int, seed: int, specs: tuple[ArithSpec, ...] = TRAIN_SPECS
) -> tuple[list, int]:
    """``count`` training problems from stream index ``start`` on (index i drawn from
    ``specs[i % len(specs)]``), skipping any whose question is a packaged one (so no packaged
    question is trained on); (problems, next index)."""
    skip = packaged_questions()
    problems = []
    index = start
    while len(problems) < count:
        problem = make_problem(specs[index % len(specs)], TRAIN_STREAM + seed, index)
        index += 1
        if problem.question not in skip:
            problems.append(problem)
    return problems, index


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


def autocast():
    """bfloat16 matrix products on CPU (AMX / AVX-512 where present), float32 weights and
    optimiser state: several times faster than float32 products on the CPUs this runs on."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16)


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_generator(
    out: Path,
    seed: int,
    steps: int,
    batch: int,
    lr: float,
    hidden: int,
    layers: int,
    policy_out: Path | None = None,
    policy_step: int = 0,
    more_steps: int = 0,
    more_lr: float = 0.0,
    base_out: Path | None = None,
    more_max_ops: int = 4,
) -> dict:
    """Train the generator into ``out``; with ``policy_out``, also save the model as it is
    after ``policy_step`` optimiser steps there (an earlier, weaker policy).

    With ``more_steps``, the model after ``steps`` is saved to ``base_out`` (the base: the
    policy whose solutions train the PRM, at another temperature) and then trained
    ``more_steps`` more on the continuing stream, with a fresh optimiser and its own warmup and
    cosine schedule peaking at ``more_lr``, on problems of up to ``more_max_ops`` operations
    (the base sees up to 4).
    """
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
    # eager attention: torch's CPU backward of scaled_dot_product_attention is far slower here
    model.config._attn_implementation = "eager"
    t0, c0 = time.time(), time.process_time()
    saves = {policy_step: policy_out} if policy_out is not None else {}
    losses, index = train_phase(model, tok, seed, steps, batch, lr, 0, saves, "generator")
    stats = {"base_steps": steps, "base_stream_end": index} if more_steps else {}
    if more_steps:
        if base_out is None:
            raise ValueError("more_steps needs base_out (where the base is kept)")
        save_model(model, tok, base_out)
        more, index = train_phase(
            model, tok, seed, more_steps, batch, more_lr, index, {}, "more",
            specs=train_specs(more_max_ops),
        )  # fmt: skip
        losses += more
    save_model(model, tok, out)
    return {
        "seed": seed, "steps": steps, "batch": batch, "lr": lr, "hidden": hidden, "layers": layers,
        "more_steps": more_steps, "more_lr": more_lr, "more_max_ops": more_max_ops, **stats,
        "training_stream_end": index, "final_loss": sum(losses[-50:]) / len(losses[-50:]),
        "wall_s": round(time.time() - t0, 1), "cpu_s": round(time.process_time() - c0, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
    }  # fmt: skip


def train_phase(
    model,
    tok,
    seed: int,
    steps: int,
    batch: int,
    lr: float,
    index: int,
    saves: dict,
    name: str,
    specs: tuple[ArithSpec, ...] = TRAIN_SPECS,
) -> tuple[list[float], int]:
    """``steps`` AdamW steps (a fresh optimiser, warmup then cosine to a tenth of ``lr``) on
    the training stream of ``specs`` from ``index``; the model is saved to ``saves[k]`` after
    step k.
    Returns (the losses, the next stream index)."""
    import torch

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    t0 = time.time()
    losses: list[float] = []
    for step in range(steps):
        problems, index = training_problems(index, batch, seed, specs)
        examples = [encode_example(tok, p.question, p.solution()) for p in problems]
        ids, mask, labels = batch_tensors(examples, tok.pad_token_id)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup=min(100, steps // 10))
        with autocast():
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if step + 1 in saves:
            save_model(model, tok, saves[step + 1])
            model.train()
        if step % 50 == 0 or step == steps - 1:
            recent = sum(losses[-50:]) / len(losses[-50:])
            print(
                f"{name} step {step}/{steps} loss {recent:.4f} wall {time.time() - t0:.0f}s",
                flush=True,
            )
    return losses, index


def save_model(model, tok, out: Path) -> None:
    """float16 safetensors plus the tokenizer; the model is left in float32 eval mode."""
    import torch

    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.float16).save_pretrained(out, safe_serialization=True)
    model.to(torch.float32)
    save_tokenizer(tok, out)


def git_dirty() -> bool | None:
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return bool(out.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return None


def sha256_files(folder: Path) -> dict[str, str]:
    """sha256 of every file in ``folder`` but the provenance record itself."""
    import hashlib

    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
        if path.is_file() and path.name != "provenance.json"
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def write_provenance(out: Path, what: str, args: argparse.Namespace, stats: dict) -> None:
    """``provenance.json`` beside the files of ``out``: what made them and their sha256."""
    import platform

    import torch
    import transformers

    record = {
        "model": what,
        "script": "tools/train_world.py",
        "command": " ".join(["python", "tools/train_world.py", *args.argv]),
        # the code that ran: read when the command started (a commit made while it runs is
        # not what trained the model)
        "commit": args.commit,
        # tracked files changed since that commit (the script itself may differ from it)
        "uncommitted_changes": args.uncommitted_changes,
        "threads": args.threads,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cpu": cpu_model(),
        **stats,
        "sha256": sha256_files(out),
    }
    (out / "provenance.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    """Every stage's options; the defaults are the shipped models' arguments (a test checks them
    against the shipped provenance records)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["generator", "prm-body", "prm-data", "prm", "all"])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--work", type=Path, default=ROOT / "runs" / "world-training",
        help="intermediate models and data (the earlier policy, the PRM body, the MC labels)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=1200, help="generator optimiser steps")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128, help="generator width (32 per head)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument(
        "--policy-step", type=int, default=500,
        help="the generator after this many steps is kept under --work/policy (an earlier, "
        "weaker policy; --prm-policy checkpoint labels its solutions)",
    )  # fmt: skip
    parser.add_argument(
        "--more-steps", type=int, default=800,
        help="after --steps, keep the model under --work/base (the PRM's data policy, "
        "--prm-policy base) and train this many steps more: a fresh optimiser and schedule",
    )  # fmt: skip
    parser.add_argument("--more-lr", type=float, default=3e-3, help="peak lr of --more-steps")
    parser.add_argument(
        "--more-max-ops", type=int, default=5,
        help="most operations per problem in the --more-steps stream (the base, the PRM body "
        "and the PRM data see 1-4; OOD questions ask 5-6)",
    )  # fmt: skip
    add_prm_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.commit, args.uncommitted_changes = git_commit(), git_dirty()

    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.what in ("generator", "all"):
        stats = train_generator(
            args.out / "generator", args.seed, args.steps, args.batch, args.lr, args.hidden,
            args.layers, policy_out=args.work / "policy", policy_step=args.policy_step,
            more_steps=args.more_steps, more_lr=args.more_lr, base_out=args.work / "base",
            more_max_ops=args.more_max_ops,
        )  # fmt: skip
        # the earlier models' records: the run's settings with their own step counts
        write_provenance(
            args.work / "policy", "policy", args,
            {**stats, "steps": args.policy_step, "more_steps": 0},
        )  # fmt: skip
        if args.more_steps:
            write_provenance(
                args.work / "base", "base", args,
                {**stats, "more_steps": 0, "training_stream_end": stats["base_stream_end"]},
            )  # fmt: skip
            stats["base_sha256"] = sha256_files(args.work / "base")
        write_provenance(args.out / "generator", "generator", args, stats)
        print(json.dumps(stats), flush=True)
    for stage in ("prm-body", "prm-data", "prm"):
        if args.what in (stage, "all"):
            run_prm_stage(stage, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
