"""Beam search with instance-adaptive width and expansion (Park et al.'s IAS-of-K / IAS-of-M).

The loop follows the reference (``main_infer_beamsearch_vllm.py``), driven by any dprm
calibrator:

* step 0 draws N first steps from the prompt; every later step extends each live beam, by one
  sample, except on multiples of ``freq``, where every beam is scored, the K best are kept and
  each kept live beam is extended by M samples;
* K (IAS-of-K): sort the beams by their lower quantile Q(lower_level | h) (descending);
  K = the first k with k == K_MAX or k * M_MAX >= N(k-th value, C);
* M (IAS-of-M): M = min(ceil(N(min kept lower value, C) / K_MAX), M_MAX), the same for every
  beam of the question (divided by K_MAX, not the chosen K: reference pitfall 7);
* beams are ranked by the median Q(0.5 | h) or the mean p_hat (``rank_by``); done beams stay in
  the ranking and are carried forward as one copy;
* a beam is done when its newest step contains ``\\boxed``, when it stopped for any reason but
  the step separator (end of turn, length), or when its tokens reach ``max_beam_tokens``;
* the search stops when every beam is done or after ``max_steps`` steps; the answer is the
  best-ranked beam.

N(p, C) is :func:`dprm.ias.budget_point` (the rule of docs/design.md §4: direct search over n <= N, p clipped
to [1e-4, 1 - 1e-4]) with N = K_MAX * M_MAX as the cap; the cap never changes K or M. With
``adaptive="none"`` (the fixed baseline) K = K_MAX and M = M_MAX always.

Step seeds depend on (seed, question, search, step, beam), never one seed for every step
(reference pitfall 14). Why a step ended (separator, end of turn or length) is exact with the
transformers backend: it samples to the end of turn anyway (stop strings are cut afterwards),
so the step is cut here at the first separator. With vLLM, steps stop at the separator inside
the engine and the reason is read from ``Completion.stop_reason`` when the generator provides
it; without it, a "stop" with non-empty text counts as the separator and an empty one as the
end of the response.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dprm.ias import budget_point
from dprm.live.calibrated_prm import CalibratedPRM

SEPARATOR = "\n\n"
_MISSING = object()


def determine_k(lower: np.ndarray, C: float, m_max: int, k_max: int) -> int:
    """IAS-of-K: how many beams to keep, from their lower-quantile values [B]."""
    ordered = np.sort(np.asarray(lower, dtype=np.float64))[::-1]
    need = budget_point(ordered, C, n_max=k_max * m_max)
    k = len(ordered)
    for i in range(len(ordered)):
        if i + 1 == k_max or (i + 1) * m_max >= need[i]:
            k = i + 1
            break
    return max(1, k)


def determine_m(lower_kept: np.ndarray, C: float, m_max: int, k_max: int) -> int:
    """IAS-of-M: samples per kept beam, from the smallest kept lower-quantile value."""
    need = int(budget_point(float(np.min(lower_kept)), C, n_max=k_max * m_max))
    return min(math.ceil(need / k_max), m_max)


@dataclass
class Beam:
    steps: list[str]
    tokens: int = 0
    done: bool = False
    finish: str | None = None  # "boxed" | "eos" | "length" | "max_tokens"


@dataclass
class Search:
    """The state of one question's search (adaptive or fixed)."""

    question_id: str
    question: str
    n: int  # samples at step 0 and per pruning step at full width
    m_max: int
    freq: int
    adaptive_k: bool
    adaptive_m: bool
    tag: str  # "adaptive" | "baseline" (seeds, logs)
    beams: list[Beam] = field(default_factory=lambda: [Beam([])])
    step: int = 0
    per_beam: int = 0
    log: list[dict] = field(default_factory=list)
    finished: bool = False

    @property
    def k_max(self) -> int:
        return self.n // self.m_max


@dataclass(frozen=True)
class Step:
    """One sampled step: its text, the tokens it cost and why it ended."""

    text: str
    n_tokens: int
    ended: str  # "separator" | "eos" | "length"


def generate_steps(generator: Any, prompts: list[str], n: int, **sampling: Any) -> list[list[Step]]:
    """``n`` next steps for each prompt (see the module docstring for how the end is read)."""
    if getattr(generator, "backend", None) == "transformers":
        outs = generator.generate(prompts, n, stop=None, **sampling)
        steps = []
        for row in outs:
            cut = []
            for c in row:
                at = c.text.find(SEPARATOR)
                if at >= 0:
                    cut.append(Step(c.text[:at], int(c.n_tokens), "separator"))
                else:
                    cut.append(
                        Step(
                            c.text,
                            int(c.n_tokens),
                            "length" if c.finish_reason == "length" else "eos",
                        )
                    )
            steps.append(cut)
        return steps
    outs = generator.generate(prompts, n, stop=[SEPARATOR], **sampling)
    return [[Step(c.text, int(c.n_tokens), _ended(c)) for c in row] for row in outs]


def _ended(c: Any) -> str:
    if c.finish_reason == "length":
        return "length"
    reason = getattr(c, "stop_reason", _MISSING)
    if reason is not _MISSING:
        return "separator" if reason == SEPARATOR else "eos"
    return "separator" if c.text != "" else "eos"


class Scorer:
    """Lower and ranking values of beams through the calibrated PRM, cached by trajectory."""

    def __init__(self, cprm: CalibratedPRM, lower_level: float, rank_by: str):
        self.cprm, self.lower_level, self.rank_by = cprm, float(lower_level), rank_by
        self.cache: dict[tuple, tuple[float, float, float, bool]] = {}

    def __call__(self, question_id: str, question: str, beams: list[Beam]) -> np.ndarray:
        """[B, 4]: (prm_score, lower, rank, truncated) per beam."""
        from dprm.live.calibrated_prm import States

        keys = [(question_id, tuple(b.steps)) for b in beams]
        todo = list(dict.fromkeys(k for k in keys if k not in self.cache))
        if todo:
            states = self.cprm.path_states(question, [list(k[1]) for k in todo])
            levels = [self.lower_level, 0.5]
            q = self.cprm.quantiles(states, levels)
            rank = (
                q[:, 1]
                if self.rank_by == "median"
                else self.cprm.mean(States(states.scores, states.hidden))
            )
            for j, key in enumerate(todo):
                self.cache[key] = (
                    float(states.scores[j]),
                    float(q[j, 0]),
                    float(rank[j]),
                    bool(states.truncated[j]),
                )
        return np.array([self.cache[k] for k in keys], dtype=np.float64)


def plan_step(search: Search, scorer: Scorer, C: float, max_steps: int) -> None:
    """Prune if due, choose the samples per live beam, or mark the search finished."""
    s = search.step
    entry: dict[str, Any] = {"step": s, "K": None}
    if s == 0:
        search.per_beam = search.n
    elif s % search.freq == 0:
        values = scorer(search.question_id, search.question, search.beams)
        lower, rank = values[:, 1], values[:, 2]
        k_max, m_max = search.k_max, search.m_max
        k = determine_k(lower, C, m_max, k_max) if search.adaptive_k else k_max
        keep = np.argsort(-rank, kind="stable")[:k]
        search.beams = [search.beams[i] for i in keep]
        m = determine_m(lower[keep], C, m_max, k_max) if search.adaptive_m else m_max
        search.per_beam = m
        entry.update(K=len(keep), lower=lower.tolist(), rank=rank.tolist(), kept=keep.tolist())
    else:
        search.per_beam = 1
    if all(b.done for b in search.beams) or s >= max_steps:
        search.finished = True
        return
    entry["M"] = search.per_beam
    entry["beams"] = sum(not b.done for b in search.beams)
    search.log.append(entry)


def absorb(search: Search, outs: list[list[Step]], max_beam_tokens: int) -> None:
    """Extend every live beam by its completions; done beams are carried as one copy."""
    new: list[Beam] = []
    live = iter(outs)
    samples = tokens = 0
    for beam in search.beams:
        if beam.done:
            new.append(beam)
            continue
        for c in next(live):
            samples += 1
            tokens += int(c.n_tokens)
            used = beam.tokens + int(c.n_tokens)
            steps = beam.steps + [c.text] if c.text != "" else list(beam.steps)
            finish = None
            if "\\boxed" in c.text:
                finish = "boxed"
            elif c.ended != "separator":
                finish = c.ended
            elif used >= max_beam_tokens:
                finish = "max_tokens"
            new.append(Beam(steps, used, finish is not None, finish))
    search.beams = new
    search.log[-1].update(samples=samples, tokens=tokens)
    search.step += 1
