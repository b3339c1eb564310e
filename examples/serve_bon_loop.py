"""Best-of-N with a budget from ``dprm serve``: sample candidates until the service says stop.

The loop a framework runs around its own generator: for each question, ask ``/v1/allocate``
how many candidates to draw (``draw_more``), draw them, send them back, and stop when the
decision is ``stop``; the answer is the service's ``pick`` among the draws (the highest
final PRM score by default). The service scores each draw with the PRM and the calibrator.

Candidates come from either generator:

- ``--generator-url URL --model NAME``: an OpenAI-compatible server (``vllm serve``, SGLang,
  llama.cpp's server, TGI) through ``/v1/completions``;
- otherwise the arith world's generator shipped with dprm, in this process (transformers).

Run (two terminals; the calibrator is any ``dprm train`` output on this PRM's states)::

    dprm serve --prm src/dprm/llm/worlds/arith/prm --calibrator runs/cal/mono --port 8700
    python examples/serve_bon_loop.py --serve-url http://127.0.0.1:8700 --questions 5

``dprm.client`` needs only the standard library; the arith questions come from dprm's
packaged sets.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from importlib import resources


def split_steps(text: str) -> list[str]:
    """Steps end at a blank line (dprm's step format, :func:`dprm.llm.prompts.split_steps`)."""
    steps = [s.strip() for s in text.replace("\r\n", "\n").split("\n\n")]
    return [s for s in steps if s] or [text.strip() or "(empty)"]


class OpenAISampler:
    """Completions from an OpenAI-compatible server (one request per candidate batch)."""

    def __init__(self, url: str, model: str, max_tokens: int, temperature: float):
        self.url, self.model = url.rstrip("/") + "/v1/completions", model
        self.max_tokens, self.temperature = max_tokens, temperature

    def __call__(self, question: str, n: int) -> list[str]:
        body = {
            "model": self.model,
            "prompt": f"{question}\n\n",
            "n": n,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        request = urllib.request.Request(
            self.url, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=600) as response:
            return [choice["text"] for choice in json.load(response)["choices"]]


class ArithSampler:
    """The shipped arith generator, in this process (needs dprm's llm extra)."""

    def __init__(self, max_tokens: int, temperature: float, seed: int = 0):
        from dprm.llm.generate import load_generator

        path = str(resources.files("dprm.llm") / "worlds" / "arith" / "generator")
        self.generator = load_generator("transformers", path, device="cpu")
        self.max_tokens, self.temperature, self.calls = max_tokens, temperature, seed

    def __call__(self, question: str, n: int) -> list[str]:
        from dprm.llm.prompts import build_prompt

        self.calls += 1
        prompt = build_prompt(question, self.generator.model_name)
        out = self.generator.generate(
            [prompt], n, temperature=self.temperature, top_p=1.0,
            max_new_tokens=self.max_tokens, seeds=[self.calls],
        )  # fmt: skip
        return [c.text for c in list(out[0])]


def final_answer(text: str) -> str:
    """The last ``\\boxed{...}`` of a response ("" when none)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return ""
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return ""


def solve(client, sample, question: str, allocation: str, max_draws: int) -> dict:
    """One question's loop: returns the service's last answer and the drawn texts."""
    draws, texts = [], []
    while True:
        answer = client.allocate(question, draws, allocation=allocation)["questions"][0]
        more = min(answer["draw_more"], max_draws - len(draws))
        if answer["decision"] == "stop" or more <= 0:
            return {**answer, "texts": texts}
        for text in sample(question, more):
            texts.append(text)
            draws.append({"steps": split_steps(text), "answer": final_answer(text)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--serve-url", default="http://127.0.0.1:8700")
    parser.add_argument("--generator-url", default=None, help="OpenAI-compatible server URL")
    parser.add_argument("--model", default=None, help="model name at --generator-url")
    parser.add_argument("--questions", type=int, default=5, help="arith questions to answer")
    parser.add_argument(
        "--allocation", default="ias", choices=["ias", "auto-seq"],
        help="ias: the C rule's budget; auto-seq needs a server started with --train-bon",
    )  # fmt: skip
    parser.add_argument("--max-draws", type=int, default=64, help="never more per question")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args(argv)

    from dprm.client import Client
    from dprm.llm.tasks.arith_sets import set_rows

    client = Client(args.serve_url)
    client.wait_ready(60)
    if args.generator_url:
        if not args.model:
            parser.error("--generator-url needs --model")
        sample = OpenAISampler(args.generator_url, args.model, args.max_tokens, args.temperature)
    else:
        sample = ArithSampler(args.max_tokens, args.temperature)
    right = 0
    for row in set_rows("id")[: args.questions]:
        result = solve(client, sample, row["question"], args.allocation, args.max_draws)
        pick = result["pick"]
        answer = pick["answer"] if pick else ""
        right += answer == row["answer"]
        print(
            f"{row['question_id']}: budget {result['budget']}, drew {len(result['texts'])}, "
            f"picked {answer!r} (gold {row['answer']!r})"
        )
    print(f"{right}/{args.questions} right")
    return 0


if __name__ == "__main__":
    sys.exit(main())
