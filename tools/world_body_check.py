"""Can a model compute? Teacher-forced result-token accuracy on reference solutions.

    python tools/world_body_check.py runs/world-training/prm-body --format prm
    python tools/world_body_check.py src/dprm/llm/worlds/arith/generator --format generator
    python tools/world_body_check.py runs/world-training/prm-body --rank 16   # ranks draws?

Each reference solution of a packaged split (``--split``, first ``--questions``) is fed once in
the model's own input format (``prm``: the PRM's system prompt, question and ``<extra_0>``-joined
steps, as ``tools/world_prm.py`` pretrains the PRM body; ``generator``: the generator's chat
prompt and the solution); at every result token (the digits after ``= `` in each step and inside
the boxed answer) the argmax of the previous position's logits is compared with it. Printed:
the share of result tokens predicted right, and the number of solutions with every result token
right. A PRM body that ranks the generator's draws by their arithmetic must compute at least as
well as the generator does on the same references.

``--rank N``: does the body's computing reach the draws? The shipped generator draws N
solutions per question (temperature 1, ``tools/world_sampler.py``); each is scored by the
body's own log-probability of its solution tokens (summed, in the PRM format: a generative
verifier's score) and by the shipped PRM's last-step score. Printed: the within-question AUROC
of each against the draw's final correctness, over the questions with right and wrong draws,
and a 95 % paired bootstrap interval of their difference.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tools"))

#: a step's stated result, or the boxed answer
RESULT = re.compile(r"= (-?\d+)|boxed\{(-?\d+)\}")


def model_text(tok, question: str, solution: str, fmt: str) -> str:
    """The model's input text for one reference solution."""
    if fmt == "prm":
        from world_prm import prm_ids

        ids, _ = prm_ids(tok, question, solution.split("\n\n"))
        return tok.decode(ids)
    from dprm.llm.prompts import build_prompt

    return build_prompt(question, "qwen", template="qwen") + solution + "<|im_end|>"


def result_positions(tok, text: str) -> tuple[list[int], list[int]]:
    """(ids of ``text``, positions of its solution's result tokens)."""
    enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
    start = text.index("## Step 1:")
    spans = [m.span(1) if m.group(1) else m.span(2) for m in RESULT.finditer(text, start)]
    positions = [
        i
        for i, (a, b) in enumerate(enc["offset_mapping"])
        if b > a and any(a >= s and b <= e for s, e in spans)
    ]
    return enc["input_ids"], positions


def check(model_dir: Path, fmt: str, split: str, questions: int) -> dict:
    """Result-token accuracy of the causal LM in ``model_dir`` on ``questions`` references."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from dprm.llm.tasks.arith_sets import set_rows

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = Qwen2ForCausalLM.from_pretrained(model_dir).float().eval()
    tokens = right = solved = 0
    rows = set_rows(split)[:questions]
    for row in rows:
        ids, positions = result_positions(
            tok, model_text(tok, row["question"], row["solution"], fmt)
        )
        with torch.no_grad():
            predicted = model(input_ids=torch.tensor([ids])).logits[0].argmax(-1)
        hits = [int(predicted[p - 1]) == ids[p] for p in positions]
        tokens, right, solved = tokens + len(hits), right + sum(hits), solved + all(hits)
    return {
        "model": str(model_dir), "split": split, "solutions": len(rows),
        "result_token_accuracy": right / tokens, "all_results_right": solved,
    }  # fmt: skip


def solution_logprob(model, tok, question: str, steps: list[str]) -> float:
    """The summed log-probability [scalar] the causal LM gives the solution tokens of ``steps``
    in the PRM's input format (the tokens after the user turn, tags included)."""
    import torch

    from world_prm import prm_ids

    ids, tags = prm_ids(tok, question, steps)
    first = tags[0] - len(tok.encode(steps[0]))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits[first - 1 : len(ids) - 1], dim=-1)
    return float(logp.gather(1, torch.tensor(ids[first:])[:, None]).sum())


def rank(model_dir: Path, split: str, questions: int, draws: int, seed: int = 7) -> dict:
    """Within-question AUROC of the body's solution log-probability and of the shipped PRM."""
    import numpy as np
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from dprm.llm.prompts import build_prompt
    from dprm.llm.tasks.arith_sets import set_rows
    from world_metrics import BOOTSTRAP, auroc
    from world_prm import _correct, parallel_sample
    from world_stats import DEFAULT_MODELS, score_all

    worlds = DEFAULT_MODELS
    rows = set_rows(split)[:questions]
    prompts = [build_prompt(r["question"], "qwen", template="qwen") for r in rows]
    texts = parallel_sample(worlds / "generator", prompts, draws, seed, workers=1, job=25)
    steps = [[t.split("\n\n") for t in outs] for outs in texts]
    items = [(r["question"], s) for r, s in zip(rows, steps, strict=True)]
    prm = score_all(worlds / "prm", items, 1)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = Qwen2ForCausalLM.from_pretrained(model_dir).float().eval()
    body_auc, prm_auc = [], []
    for row, outs, sols, scores in zip(rows, texts, steps, prm, strict=True):
        right = [_correct(t, str(row["answer"])) for t in outs]
        if all(right) or not any(right):
            continue
        lp = [solution_logprob(model, tok, row["question"], s) for s in sols]
        last = [s[-1] if s else 0.0 for s in scores]
        for out, values in ((body_auc, lp), (prm_auc, last)):
            pairs = list(zip(values, right, strict=True))
            out.append(auroc([v for v, y in pairs if y], [v for v, y in pairs if not y]))
    diff = np.asarray(body_auc) - np.asarray(prm_auc)
    rng = np.random.default_rng(seed)
    boots = diff[rng.integers(0, len(diff), (BOOTSTRAP, len(diff)))].mean(axis=1)
    return {
        "model": str(model_dir), "split": split, "questions": len(rows), "draws": draws,
        "questions_with_both": len(diff),
        "body_logprob_within_question_auroc": float(np.mean(body_auc)),
        "prm_within_question_auroc": float(np.mean(prm_auc)),
        "difference": float(diff.mean()),
        "difference_95": [float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    import json

    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", type=Path, help="a Qwen2ForCausalLM folder")
    parser.add_argument("--format", choices=["prm", "generator"], default="prm")
    parser.add_argument("--split", choices=["train", "id", "ood"], default="id")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument(
        "--rank", type=int, default=0, metavar="N",
        help="instead: N generator draws per question, ranked by the body's log-probability "
        "and by the shipped PRM (within-question AUROC)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.rank:
        print(json.dumps(rank(args.model, args.split, args.questions, args.rank)))
        return 0
    print(json.dumps(check(args.model, args.format, args.split, args.questions)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
