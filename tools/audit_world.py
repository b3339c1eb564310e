"""Measure the shipped arithmetic world again, with none of the code that measured its page.

    python tools/audit_world.py                 # all 400 ID + 200 OOD questions x 64 draws
    python tools/audit_world.py --questions 20 --samples 8 --out /tmp/audit.json

docs/results/arith-world.md states the shipped generator's and PRM's statistics with 95 %
intervals (computed by tools/world_stats.py on dprm's code). This script recomputes the same
quantities on its own: it reads the packaged question files (gzip'd JSONL) directly, works out
each question's answer from the question's text (its own parser of the story, checked against
the stored answer), samples the generator through transformers with its own KV-cached loop
(plain multinomial sampling from softmax(logits) at temperature 1, no top-p / top-k, a seed of
its own), grades the last ``\\boxed{...}`` numerically, and reads the PRM itself: the Qwen2
body through ``transformers.AutoModel`` and the 2-class ``score`` head (Linear-ReLU-Linear)
applied to the body's last hidden state at each ``<extra_0>`` with weights read from the
safetensors file. It imports nothing from dprm nor from the tools that computed the page.

Written (``--out``, default docs/results/arith-world/audit.json): per split pass@1,
majority@64, PRM best-of-64, within-question and pooled AUROC of the last-step score for a
correct final answer, last-step ECE (10 equal-width bins) and Brier, each with a 95 %
percentile bootstrap interval over questions; the per-question solve rates; the settings; the
commit and the sha256 of every model and question file read. benchmarks/experiments/arith_world.py
renders the comparison with the page into the page's "Independent check" section.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORLD = ROOT / "src" / "dprm" / "llm" / "worlds" / "arith"
QUESTION_FILES = {
    "id": ROOT / "src" / "dprm" / "llm" / "question_sets" / "arith-id.jsonl.gz",
    "ood": ROOT / "src" / "dprm" / "llm" / "question_sets" / "arith-ood.jsonl.gz",
}
DEFAULT_OUT = ROOT / "docs" / "results" / "arith-world" / "audit.json"
PAGE_SUMMARY = ROOT / "docs" / "results" / "arith-world" / "summary.json"
#: the system prompts the models were trained with (each is one token of their tokenizers,
#: which :func:`one_token` checks, so a wrong copy here fails loudly)
GENERATOR_SYSTEM = (
    "Solve the following math problem efficiently and clearly:\n\n"
    "- For simple problems (2 steps or fewer):\n"
    "Provide a concise solution with minimal explanation.\n\n"
    "- For complex problems (3 steps or more):\n"
    "Use this step-by-step format:\n\n"
    "## Step 1: [Concise description]\n"
    "[Brief explanation and calculations]\n\n"
    "## Step 2: [Concise description]\n"
    "[Brief explanation and calculations]\n\n"
    "...\n\n"
    "Regardless of the approach, always conclude with:\n\n"
    "Therefore, the final answer is: $\\boxed{answer}$. I hope it is correct.\n\n"
    "Where [answer] is just the final number or expression that solves the problem."
)
PRM_SYSTEM = "Please reason step by step, and put your final answer in \\boxed{}."
STEP_TAG = "<extra_0>"
MAX_NEW = 160  # the page's draws stop after 160 new tokens too
SEED = 20261128  # the page's draws use seed 0
BOOTSTRAP = 1000

# ---------------------------------------------------------------- questions and their answers

_START = re.compile(r"^(?P<name>[A-Z][a-z]+) has (?P<x>\d+) (?P<items>[a-z]+)$")
_OPS = (
    ("+", re.compile(r"^(?P<name>[A-Z][a-z]+) (?:gets|buys|finds) (?P<x>\d+) more$")),
    ("-", re.compile(r"^(?P<name>[A-Z][a-z]+) (?:gives away|loses|sells) (?P<x>\d+)$")),
    ("*", re.compile(r"^(?P<name>[A-Z][a-z]+) ends up with (?P<x>\d+) times as many$")),
    ("*", re.compile(r"^The (?P<items>[a-z]+) are multiplied by (?P<x>\d+)$")),
)
_ASK = re.compile(r"^How many (?P<items>[a-z]+) does (?P<name>[A-Z][a-z]+) have now\?$")


def parse_question(text: str) -> tuple[int, list[tuple[str, int]]]:
    """(starting amount, [(operation, operand), ...]) of a story question.

    ``"Eva has 6 stamps. Eva loses 2. Eva gets 1 more. How many stamps does Eva have now?"``
    -> ``(6, [("-", 2), ("+", 1)])``. Raises ValueError on any sentence it does not know, or
    a name or item that changes within the story.
    """
    sentences = text.strip().split(". ")
    first = _START.match(sentences[0])
    if first is None:
        raise ValueError(f"no starting amount in {text[:60]!r}")
    name, items = first["name"], first["items"]
    ask = _ASK.match(sentences[-1])
    if ask is None or (ask["name"], ask["items"]) != (name, items):
        raise ValueError(f"no final question about {name}'s {items} in {text[:60]!r}")
    ops: list[tuple[str, int]] = []
    for sentence in sentences[1:-1]:
        for op, pattern in _OPS:
            m = pattern.match(sentence)
            if m is not None:
                fields = m.groupdict()
                if fields.get("name", name) != name or fields.get("items", items) != items:
                    raise ValueError(f"sentence {sentence!r} is about someone else")
                ops.append((op, int(m["x"])))
                break
        else:
            raise ValueError(f"unknown sentence {sentence!r} in {text[:60]!r}")
    return int(first["x"]), ops


def evaluate(start: int, ops: list[tuple[str, int]]) -> int:
    """The amount after applying ``ops`` in story order (each to the running amount)."""
    value = start
    for op, x in ops:
        if op == "+":
            value += x
        elif op == "-":
            value -= x
        elif op == "*":
            value *= x
        else:
            raise ValueError(f"unknown operation {op!r}")
    return value


def load_questions(path: Path) -> list[dict]:
    """The rows of a packaged question file, each with ``computed`` (the parser's answer)."""
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            row = json.loads(line)
            try:
                row["computed"] = evaluate(*parse_question(row["question"]))
            except (KeyError, ValueError) as err:
                raise SystemExit(f"{path}: row {line_no}: {err}") from err
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------------- grading

_BOXED = re.compile(r"\\boxed\{")


def boxed_answer(text: str) -> str | None:
    """The content of the last complete ``\\boxed{...}`` (braces matched), or None."""
    found = None
    for m in _BOXED.finditer(text):
        depth, pos = 1, m.end()
        while pos < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[pos], 0)
            pos += 1
        if depth == 0:
            found = text[m.end() : pos - 1]
    return found


def as_number(text: str | None) -> float | None:
    """A boxed answer as a number (``"14"``, ``" 14.0 "``, ``"1,024"``), or None."""
    if text is None:
        return None
    cleaned = text.strip().strip("$").replace(",", "").replace(" ", "")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def is_correct(completion: str, answer: int) -> bool:
    """Whether the last boxed answer of ``completion`` equals ``answer`` as a number."""
    value = as_number(boxed_answer(completion))
    return value is not None and value == answer


# --------------------------------------------------------------------------------- sampling


def one_token(tok, text: str) -> None:
    """Fail unless ``text`` is a single token of ``tok`` (a trained phrase, copied right)."""
    ids = tok.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise SystemExit(f"{text[:40]!r}... is {len(ids)} tokens, not the trained phrase")


def generator_prompt(tok, question: str) -> list[int]:
    """The generator's chat prompt (system, user, assistant header) as token ids."""
    messages = [
        {"role": "system", "content": GENERATOR_SYSTEM},
        {"role": "user", "content": question},
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tok.encode(text, add_special_tokens=False)


def sample(model, prompts: list[list[int]], copies: int, max_new: int, stop: set[int], gen):
    """``copies`` continuations per prompt (token ids, up to and without the stop token),
    prompt-major. Left-padded batch, transformers' KV cache (``past_key_values``); each prompt
    is run once and its cache repeated; finished rows leave the batch as it goes.
    """
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    total = len(prompts) * copies
    tokens = torch.full((total, max_new), -1, dtype=torch.long)  # -1: after the stop token
    with torch.no_grad():
        res = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache = res.past_key_values
        cache.batch_repeat_interleave(copies)
        logits = res.logits[:, -1].float().repeat_interleave(copies, 0)
        mask = mask.repeat_interleave(copies, 0)
        last = positions[:, -1].repeat_interleave(copies, 0)
        rows = torch.arange(total)  # original row of each batch row
        stops = torch.tensor(sorted(stop))
        for step in range(max_new):
            token = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]
            keep = ~torch.isin(token, stops)
            tokens[rows[keep], step] = token[keep]
            if step == max_new - 1 or not bool(keep.any()):
                break
            if not bool(keep.all()):
                index = keep.nonzero()[:, 0]
                cache.batch_select_indices(index)
                token, rows, mask, last = token[index], rows[index], mask[index], last[index]
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=torch.long)], 1)
            last = last + 1
            res = model(
                input_ids=token[:, None], attention_mask=mask, position_ids=last[:, None],
                past_key_values=cache, use_cache=True,
            )  # fmt: skip
            cache = res.past_key_values
            logits = res.logits[:, -1].float()
    return [[t for t in row if t >= 0] for row in tokens.tolist()]


def draw(model, tok, questions: list[str], copies: int, seed: int, rows_per_batch: int = 1024):
    """Decoded completions, ``copies`` per question (special tokens dropped)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    stop = {tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    prompts = [generator_prompt(tok, q) for q in questions]
    per_batch = max(1, rows_per_batch // copies)
    texts: list[list[str]] = []
    for start in range(0, len(prompts), per_batch):
        outs = sample(model, prompts[start : start + per_batch], copies, MAX_NEW, stop, gen)
        decoded = tok.batch_decode(outs, skip_special_tokens=True)
        texts += [decoded[i : i + copies] for i in range(0, len(decoded), copies)]
    return texts


# ------------------------------------------------------------------------------ the PRM


class PRMReader:
    """The PRM's step scores: transformers' Qwen2 body, the ``score`` head applied here.

    Input: chat template with the PRM system prompt, the question as the user turn and the
    steps (the completion split on blank lines) joined by ``<extra_0>`` plus a trailing one as
    the assistant turn. Score of a step: softmax of the head's 2 logits, class 1, at its tag.
    """

    def __init__(self, path: Path):
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModel, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(path)
        one_token(self.tok, PRM_SYSTEM)
        self.tag_id = self.tok.convert_tokens_to_ids(STEP_TAG)
        body, info = AutoModel.from_pretrained(path, output_loading_info=True)
        if info["missing_keys"]:
            raise SystemExit(f"{path}: body weights missing: {info['missing_keys'][:5]}")
        self.body = body.float().eval()
        weights = load_file(str(path / "model.safetensors"))
        names = sorted(k for k in weights if k.startswith("score."))
        if names != ["score.0.bias", "score.0.weight", "score.2.bias", "score.2.weight"]:
            raise SystemExit(f"{path}: unexpected score head {names}")
        self.w0, self.b0 = weights["score.0.weight"].float(), weights["score.0.bias"].float()
        self.w2, self.b2 = weights["score.2.weight"].float(), weights["score.2.bias"].float()
        if tuple(self.w2.shape) != (2, self.w0.shape[0]):
            raise SystemExit(f"{path}: score head output {tuple(self.w2.shape)}, not 2 classes")
        self.limit = int(self.body.config.max_position_embeddings)
        self.torch = torch

    def inputs(self, question: str, steps: list[str]) -> tuple[list[int], list[int]]:
        """(token ids, positions of the step tags)."""
        messages = [
            {"role": "system", "content": PRM_SYSTEM},
            {"role": "user", "content": question},
            {"role": "assistant", "content": STEP_TAG.join(steps) + STEP_TAG},
        ]
        text = self.tok.apply_chat_template(messages, tokenize=False)
        ids = self.tok.encode(text, add_special_tokens=False)
        tags = [i for i, t in enumerate(ids) if t == self.tag_id]
        if len(tags) != len(steps):
            raise ValueError(f"{len(tags)} tags for {len(steps)} steps")
        if len(ids) > self.limit:
            # past the PRM's position limit: keep the steps whose tag fits (as dprm's PRM
            # does, so the "last step" is then the last step read); counted in audit.json
            tags = [t for t in tags if t < self.limit]
            if not tags:
                raise ValueError(f"no step tag within {self.limit} tokens")
            ids = ids[: tags[-1] + 1]
        return ids, tags

    def head(self, hidden):
        """[P, H] -> P(class 1) [P]."""
        torch = self.torch
        logits = torch.relu(hidden @ self.w0.T + self.b0) @ self.w2.T + self.b2
        return torch.softmax(logits, -1)[:, 1]

    def score(self, items: list[tuple[str, list[str]]], tokens_per_batch: int = 16384):
        """Step scores [T_i] of each (question, steps) item, in order."""
        torch = self.torch
        encoded = [self.inputs(q, steps) for q, steps in items]
        order = sorted(range(len(items)), key=lambda i: -len(encoded[i][0]))
        scores: list[np.ndarray] = [np.zeros(0)] * len(items)
        start = 0
        with torch.no_grad():
            while start < len(order):
                width = len(encoded[order[start]][0])
                batch = order[start : start + max(1, tokens_per_batch // width)]
                start += len(batch)
                ids = torch.zeros((len(batch), width), dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for b, i in enumerate(batch):
                    seq = encoded[i][0]
                    ids[b, : len(seq)] = torch.tensor(seq)
                    mask[b, : len(seq)] = 1
                hidden = self.body(input_ids=ids, attention_mask=mask).last_hidden_state
                for b, i in enumerate(batch):
                    scores[i] = self.head(hidden[b, encoded[i][1]]).numpy().astype(float)
        return scores


# -------------------------------------------------------------------------------- metrics


def auroc(scores, labels, weights=None) -> float:
    """P(a positive's score > a negative's), ties counted half; optional draw weights."""
    s, y = np.asarray(scores, float), np.asarray(labels, bool)
    w = np.ones(len(s)) if weights is None else np.asarray(weights, float)
    values, group = np.unique(s, return_inverse=True)
    pos = np.bincount(group, w * y, len(values))
    neg = np.bincount(group, w * ~y, len(values))
    if pos.sum() == 0 or neg.sum() == 0:
        return float("nan")
    below = np.cumsum(neg) - neg
    return float((pos * (below + 0.5 * neg)).sum() / (pos.sum() * neg.sum()))


def ece(scores, labels, weights=None, bins: int = 10) -> float:
    """Expected calibration error over ``bins`` equal-width bins of [0, 1]."""
    s, y = np.asarray(scores, float), np.asarray(labels, float)
    w = np.ones(len(s)) if weights is None else np.asarray(weights, float)
    which = np.minimum((s * bins).astype(int), bins - 1)
    gap = np.bincount(which, w * s, bins) - np.bincount(which, w * y, bins)
    return float(np.abs(gap).sum() / w.sum())


def brier(scores, labels, weights=None) -> float:
    s, y = np.asarray(scores, float), np.asarray(labels, float)
    w = np.ones(len(s)) if weights is None else np.asarray(weights, float)
    return float((w * (s - y) ** 2).sum() / w.sum())


def majority_correct(values: list[float | None], answer: int) -> float:
    """Expected correctness of a plurality vote over the numeric answers (ties split evenly;
    draws without a number do not vote; 0 when none votes)."""
    votes = Counter(v for v in values if v is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    winners = [v for v, c in votes.items() if c == top]
    return sum(v == answer for v in winners) / len(winners)


def best_of_correct(last_scores, correct) -> float:
    """Expected correctness of the draw with the highest last-step score (ties split)."""
    s, y = np.asarray(last_scores, float), np.asarray(correct, float)
    return float(y[s == s.max()].mean())


def _ci(boots) -> list[float]:
    """2.5 % and 97.5 % quantiles of the resamples that define the value (an AUROC needs both
    classes in the resample)."""
    boots = np.asarray(boots, float)
    boots = boots[np.isfinite(boots)]
    return [float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))]


def split_stats(records: list[dict], seed: int, resamples: int = BOOTSTRAP) -> dict:
    """Every audited number of one split with its 95 % bootstrap interval over questions."""
    q = len(records)
    rate = np.array([np.mean(r["correct"]) for r in records])
    maj = np.array([majority_correct(r["values"], r["answer"]) for r in records])
    bon = np.array([best_of_correct(r["last"], r["correct"]) for r in records])
    within = np.array(
        [auroc(r["last"], r["correct"]) if 0 < np.mean(r["correct"]) < 1 else np.nan
         for r in records]
    )  # fmt: skip
    s = np.concatenate([r["last"] for r in records])
    y = np.concatenate([r["correct"] for r in records]).astype(bool)
    owner = np.repeat(np.arange(q), [len(r["last"]) for r in records])
    values = {
        "pass@1": rate.mean(),
        "majority@64": maj.mean(),
        "prm_best_of_64": bon.mean(),
        "within_question_auroc": np.nanmean(within),
        "pooled_auroc": auroc(s, y),
        "last_step_ece": ece(s, y),
        "last_step_brier": brier(s, y),
    }
    rng = np.random.default_rng(seed)
    boots: dict[str, list[float]] = {k: [] for k in values}
    for _ in range(resamples):
        counts = np.bincount(rng.integers(0, q, q), minlength=q).astype(float)
        w = counts[owner]
        boots["pass@1"].append((counts * rate).sum() / q)
        boots["majority@64"].append((counts * maj).sum() / q)
        boots["prm_best_of_64"].append((counts * bon).sum() / q)
        has = ~np.isnan(within) & (counts > 0)
        if has.any():  # a resample without a question of both classes has no such mean
            boots["within_question_auroc"].append(
                (counts[has] * within[has]).sum() / counts[has].sum()
            )
        boots["pooled_auroc"].append(auroc(s, y, w))
        boots["last_step_ece"].append(ece(s, y, w))
        boots["last_step_brier"].append(brier(s, y, w))
    out = {k: {"value": float(v), "ci": _ci(boots[k])} for k, v in values.items()}
    out["questions"] = q
    out["draws"] = int(len(s))
    out["questions_with_both_classes"] = int((~np.isnan(within)).sum())
    return out


# ----------------------------------------------------------------------------------- run


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def git_commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


CHUNK = 16  # questions per drawing batch (16 x 64 draws) and per resumable piece of work


def chunk_records(rows, model, tok, prm, samples: int, seed: int) -> dict:
    """Draw, grade and score one chunk of questions: its records and CPU-seconds."""
    c0 = time.process_time()
    texts = draw(model, tok, [r["question"] for r in rows], samples, seed)
    c1 = time.process_time()
    steps = [[t.split("\n\n") for t in outs] for outs in texts]
    flat = [(r["question"], s) for r, per in zip(rows, steps, strict=True) for s in per]
    scores = prm.score(flat)
    records = []
    for i, (row, outs) in enumerate(zip(rows, texts, strict=True)):
        per_q = scores[i * samples : (i + 1) * samples]
        records.append(
            {
                "question_id": row["question_id"],
                "answer": row["computed"],
                "values": [as_number(boxed_answer(t)) for t in outs],
                "correct": [is_correct(t, row["computed"]) for t in outs],
                "last": [float(sc[-1]) for sc in per_q],
                "truncated": sum(len(sc) < len(st) for sc, st in zip(per_q, steps[i], strict=True)),
                "texts": outs,
            }
        )
    return {"records": records, "sample_cpu_s": c1 - c0, "score_cpu_s": time.process_time() - c1}


def run_chunks(plan, work: Path, models_key: str, samples: int, seed: int, load) -> dict:
    """Every (split, start, rows) chunk of ``plan``, resumed from ``work`` where a chunk with
    the same questions, models, seed and size is stored; ``load()`` gives (model, tok, prm)."""
    work.mkdir(parents=True, exist_ok=True)
    done: dict = {}
    loaded = None
    for split, start, rows in plan:
        key = hashlib.sha256(
            json.dumps([models_key, samples, seed, MAX_NEW, split, start,
                        [r["question"] for r in rows]]).encode()
        ).hexdigest()  # fmt: skip
        path = work / f"{split}-{start:04d}.json"
        if path.is_file():
            stored = json.loads(path.read_text(encoding="utf-8"))
            if stored.get("key") == key:
                done[(split, start)] = stored
                continue
        loaded = loaded or load()
        # each chunk its own seed: a chunk's draws do not depend on which chunks ran before
        chunk_seed = seed * 1_000_003 + (0 if split == "id" else 500_000) + start
        result = chunk_records(rows, *loaded, samples, chunk_seed)
        result["key"] = key
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result) + "\n", encoding="utf-8")
        tmp.replace(path)
        done[(split, start)] = result
        print(f"{split} questions {start}-{start + len(rows) - 1}: "
              f"{result['sample_cpu_s']:.0f} + {result['score_cpu_s']:.0f} CPU-s", flush=True)  # fmt: skip
    return done


def _sizes(text: str) -> dict[str, int]:
    """``"N"`` or ``"ID,OOD"`` -> questions per split."""
    parts = [int(p) for p in text.split(",")]
    if len(parts) not in (1, 2) or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"expected N or ID,OOD (positive), got {text!r}")
    return dict(zip(QUESTION_FILES, parts * 2 if len(parts) == 1 else parts, strict=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, default=WORLD)
    parser.add_argument(
        "--questions", type=_sizes, default=None,
        help="the first N questions of each split, or ID,OOD (e.g. 32,16); default: all",
    )  # fmt: skip
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--texts", type=Path, default=None, help="also write every draw (JSONL)")
    parser.add_argument(
        "--work", type=Path, default=Path("/tmp/dprm-audit-world"),
        help="finished chunks are kept here; a rerun resumes from them",
    )  # fmt: skip
    args = parser.parse_args(argv)
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    started = time.time()
    gen_dir, prm_dir = args.models / "generator", args.models / "prm"
    # the files the models load from (provenance.json describes them; nothing reads it)
    model_files = [p for d in (gen_dir, prm_dir) for p in sorted(d.iterdir())
                   if p.is_file() and p.name != "provenance.json"]  # fmt: skip
    models_key = hashlib.sha256("".join(sha256(p) for p in model_files).encode()).hexdigest()

    def load():
        tok = AutoTokenizer.from_pretrained(gen_dir)
        one_token(tok, GENERATOR_SYSTEM)
        model = AutoModelForCausalLM.from_pretrained(gen_dir).float().eval()
        return model, tok, PRMReader(prm_dir)

    questions, checks = {}, {}
    for split, path in QUESTION_FILES.items():
        rows = load_questions(path)
        mismatched = [r["question_id"] for r in rows if str(r["computed"]) != str(r["answer"])]
        checks[split] = {"questions_in_file": len(rows), "answer_mismatches": mismatched}
        questions[split] = rows[: args.questions[split]] if args.questions else rows
    # ID and OOD chunks alternate, so an interrupted run has covered both splits alike
    plan = [
        (split, start, rows[start : start + CHUNK])
        for start in range(0, max(len(r) for r in questions.values()), CHUNK)
        for split, rows in questions.items()
        if start < len(rows)
    ]
    done = run_chunks(plan, args.work, models_key, args.samples, args.seed, load)
    splits, all_records = {}, {}
    for offset, split in enumerate(questions):
        parts = [done[(s, start)] for s, start, _ in plan if s == split]
        records = [r for part in parts for r in part["records"]]
        stats = split_stats(records, args.seed + 100 + offset)
        stats["sample_cpu_s"] = round(sum(p["sample_cpu_s"] for p in parts), 1)
        stats["score_cpu_s"] = round(sum(p["score_cpu_s"] for p in parts), 1)
        stats["prm_inputs_truncated"] = sum(r.get("truncated", 0) for r in records)
        stats["solve_rates"] = {r["question_id"]: float(np.mean(r["correct"])) for r in records}
        splits[split] = stats
        all_records[split] = records
        print(f"{split}: {len(records)} x {args.samples}, pass@1 {stats['pass@1']['value']:.3f}",
              flush=True)  # fmt: skip
    files = {
        str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p): sha256(p)
        for p in [*model_files, *QUESTION_FILES.values()]
    }
    command = "python tools/audit_world.py" + (" " + " ".join(argv) if argv else "")
    if argv is None and len(sys.argv) > 1:
        command = "python tools/audit_world.py " + " ".join(sys.argv[1:])
    result = {
        "command": command,
        "commit": git_commit(),
        "settings": {
            "questions_per_split": {s: v["questions"] for s, v in splits.items()},
            "samples": args.samples,
            "seed": args.seed,
            "sampler": "own KV-cached loop over transformers' forward: multinomial from "
            "softmax(logits), temperature 1, no top-p/top-k",
            "max_new_tokens": MAX_NEW,
            "bootstrap": BOOTSTRAP,
            "threads": args.threads,
            "questions_per_chunk": CHUNK,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "answer_checks": checks,
        "splits": splits,
        "files_sha256": files,
        # the page data this audit is compared with (the renderer flags a later change)
        "page_summary_sha256": sha256(PAGE_SUMMARY) if PAGE_SUMMARY.is_file() else None,
        "cpu_s": round(sum(v["sample_cpu_s"] + v["score_cpu_s"] for v in splits.values()), 1),
        "wall_s": round(time.time() - started, 1),  # of this invocation (chunks resume)
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    tmp.replace(args.out)
    if args.texts:
        with args.texts.open("w", encoding="utf-8") as handle:
            for split, records in all_records.items():
                for r in records:
                    handle.write(json.dumps({"split": split, **r}) + "\n")
    print(f"wrote {args.out} ({result['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
