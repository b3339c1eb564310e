"""Adaptive best-of-N peers: the allocation rules users would pick instead of ``auto-seq``.

Every peer decides how many candidates each question draws, one draw at a time, from what the
draws so far show; none reads a calibrator. They run on the same pools and the same draw orders
as ``auto-seq`` (:func:`dprm.ias.selection.draws.draw_orders`): a question's i-th draw is the i-th
candidate of its order, and the selection rule picks among the first n drawn.

Per-question stopping rules (the draws stop when the rule says so, or at the cap
min(K_i, n_max)); each is swept over its knob, a sweep of :data:`SWEEP_LEVELS` levels, so it
traces a cost-accuracy curve:

* ``adaptive-consistency`` (Aggarwal et al. 2023): with a, b the vote counts of the two leading
  answers after n draws, stop when
  P(p1 > p2) = int_{0.5}^{1} x^a (1 - x)^b dx / B(a + 1, b + 1) >= threshold. For integers
  a, b this is P(Binomial(a + b + 1, 1/2) <= a) = 2^-(a+b+1) sum_{k=0}^{a} C(a + b + 1, k)
  (:func:`beta_stop_probability`); knob: the threshold.
* ``esc-4``, ``esc-8`` (ESC, Li et al. 2024): draw in windows of w; stop after a window whose w
  answers all agree; knob: the most draws (a multiple of w).
* ``score-raw``, ``score-calibrated`` (score-based picks): stop when the best drawn score clears
  a threshold: the raw PRM score (last step), or a calibrator's estimate on the candidate's own
  state; knob: the threshold, at quantiles of the training pools' candidate scores.
* ``beacon``, ``pandora`` (score-based picks; :mod:`dprm.ias.peers.reward_stopping`): stop when
  one more draw's expected gain in raw PRM score is not worth its cost c, under a reward
  posterior (BEACON) or Weitzman's reservation value (Pandora's box), both fitted on the
  training pools' raw scores; knob: the cost c.

Budget-matched rule (the total round(mean_budget x Q) exactly, as ``uniform`` and ``auto-seq``):

* ``vote-lead``: one draw each, then each next draw to the question whose two leading answers
  are closest (smallest vote lead a - b; ties: fewer draws, then question order), until the
  total is spent; knob: the mean budget.

Rules live in :data:`PEERS` (name -> :class:`Peer`).
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import comb

import numpy as np

from dprm.ias.peers import reward_stopping

# the draws as the peers read them live in views; imported here too, where callers find them
from dprm.ias.peers.views import DrawView, TrainingScores, first_stop, running_top2  # noqa: F401

#: levels per knob sweep, the same for every threshold rule
SWEEP_LEVELS = 12
#: thresholds of Adaptive-Consistency's P(p1 > p2) (library default 0.95)
AC_THRESHOLDS = (0.6, 0.75, 0.8, 0.875, 0.9, 0.95, 0.975, 0.99, 0.995, 0.999, 0.9999, 1.0)
#: quantile levels of the training candidates' scores that set the score thresholds
SCORE_QUANTILES = (0.1, 0.25, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999, 1.0)
#: mean budgets of the budget-matched rules (cost x n_max; 3.2 / 6.4 / 16 are the report costs)
MEAN_BUDGETS = (1.0, 2.0, 3.2, 4.0, 6.4, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0)


@functools.cache
def _beta_table(n_max: int) -> np.ndarray:
    """P(p1 > p2) for vote counts a, b = 0..n_max: [n_max + 1, n_max + 1] (exact sums)."""
    out = np.zeros((n_max + 1, n_max + 1))
    for a in range(n_max + 1):
        for b in range(n_max + 1 - a):
            n = a + b + 1
            out[a, b] = sum(comb(n, k) for k in range(a + 1)) / 2.0**n
    return out


def beta_stop_probability(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Adaptive-Consistency's P(p1 > p2) = I_{1/2}(b + 1, a + 1) of integer vote counts a >= b
    of the leading two answers (a + b <= 4096), any shape (float64)."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    top = int(max(a.max(initial=0) + b.max(initial=0), 1))
    return _beta_table(top)[a, b]


@dataclass(frozen=True)
class Peer:
    """One allocation rule: its budgets for every level of its knob.

    Attributes:
        name: registry name.
        knob: what its levels are (``threshold``, ``max draws``, ``mean budget``).
        reads: what it reads of the draws (``answers``, ``raw scores``, ``calibrated``).
        budgets: (view, levels) -> int64 [L, T, Q].
        levels: (view, train) -> the knob's sweep (train: :class:`TrainingScores`).
        budget_matched: every level spends round(level x Q) draws in all (else: a stopping
            rule, whose mean cost is whatever it stops at).
    """

    name: str
    knob: str
    reads: str
    budgets: Callable[[DrawView, Sequence[float]], np.ndarray]
    levels: Callable[[DrawView, TrainingScores | None], tuple[float, ...]]
    budget_matched: bool = False


def _threshold_budgets(signal_of: Callable[[DrawView], np.ndarray]):
    def budgets(view: DrawView, levels: Sequence[float]) -> np.ndarray:
        signal = signal_of(view)
        return np.stack([first_stop(signal, float(lv), view.cap) for lv in levels])

    return budgets


def ac_signal(view: DrawView) -> np.ndarray:
    """P(p1 > p2) after each n draws [T, Q, K]."""
    a, b = view.top2
    return beta_stop_probability(a, b)


def esc_signal(view: DrawView, window: int) -> np.ndarray:
    """1 after a window of ``window`` draws (n = window, 2 window, ...) whose answers all
    agree, -inf elsewhere [T, Q, K]."""
    ans = view.answer
    k = ans.shape[-1]
    differs = np.concatenate(
        [np.zeros_like(ans[..., :1]), (ans[..., 1:] != ans[..., :-1]).astype(np.int64)], axis=-1
    )
    changes = np.cumsum(differs, axis=-1)  # changes[n-1]: changes among draws 1..n
    out = np.full(ans.shape, -np.inf)
    for end in range(window, k + 1, window):  # window of draws end-window+1..end
        inner = changes[..., end - 1] - changes[..., end - window]
        out[..., end - 1] = np.where(inner == 0, 1.0, -np.inf)
    return out


def esc_budgets(window: int):
    def budgets(view: DrawView, levels: Sequence[float]) -> np.ndarray:
        signal = esc_signal(view, window)
        out = []
        for most in levels:
            cap = np.minimum(view.cap, int(most))
            out.append(first_stop(signal, 1.0, cap))
        return np.stack(out)

    return budgets


def esc_levels(window: int):
    def levels(view: DrawView, train: TrainingScores | None) -> tuple[float, ...]:
        return tuple(float(m) for m in range(window, view.n_max + 1, window))

    return levels


def best_score_signal(view: DrawView, calibrated: bool) -> np.ndarray:
    """The best score among the first n draws [T, Q, K] (raw PRM or calibrated)."""
    score = view.calibrated if calibrated else view.score
    if score is None:
        raise ValueError("score-calibrated needs the candidates' calibrated estimates")
    return np.maximum.accumulate(np.where(np.isfinite(score), score, -np.inf), axis=-1)


def score_levels(calibrated: bool):
    def levels(view: DrawView, train: TrainingScores | None) -> tuple[float, ...]:
        if train is None:
            raise ValueError("score thresholds are set from the training pools' scores")
        values = train.calibrated if calibrated else train.raw
        if values is None:
            raise ValueError("score-calibrated needs the training candidates' estimates")
        qs = np.quantile(np.asarray(values, dtype=np.float64), SCORE_QUANTILES[:-1])
        return (*(float(q) for q in qs), np.inf)  # inf: never stop (uniform at the cap)

    return levels


def vote_lead_sequence(lead: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """The vote-lead rule's draws after the first one each, for one draw order.

    Args:
        lead: int [Q, K] vote lead a - b after each n = 1..K draws.
        cap: [Q] the most draws per question.

    Returns:
        int64 [sum(cap) - Q]: the question of each further draw, in order.
    """
    heap = [(int(lead[q, 0]), 1, q) for q in range(len(cap)) if cap[q] > 1]
    heapq.heapify(heap)
    picks = []
    while heap:
        _, n, q = heapq.heappop(heap)
        picks.append(q)
        n += 1
        if n < cap[q]:
            heapq.heappush(heap, (int(lead[q, n - 1]), n, q))
    return np.asarray(picks, dtype=np.int64)


def matched_budgets(sequence: np.ndarray, q_count: int, mean_budget: float) -> np.ndarray:
    """Budgets [Q] of a greedy draw sequence stopped at the total round(mean_budget x Q): one
    draw each, then the first total - Q of ``sequence``."""
    extra = max(int(round(mean_budget * q_count)) - q_count, 0)
    return 1 + np.bincount(sequence[:extra], minlength=q_count)


def vote_lead_budgets(view: DrawView, levels: Sequence[float]) -> np.ndarray:
    a, b = view.top2
    lead = a - b
    t_count, q_count, _ = lead.shape
    out = np.zeros((len(levels), t_count, q_count), dtype=np.int64)
    for t in range(t_count):
        sequence = vote_lead_sequence(lead[t], view.cap)
        for j, mb in enumerate(levels):
            out[j, t] = matched_budgets(sequence, q_count, float(mb))
    return out


def mean_budget_levels(view: DrawView, train: TrainingScores | None) -> tuple[float, ...]:
    return tuple(mb for mb in MEAN_BUDGETS if mb <= view.n_max)


def uniform_peer_budgets(view: DrawView, levels: Sequence[float]) -> np.ndarray:
    from dprm.ias.learnt.allocation import uniform_budgets

    t_count, q_count = view.answer.shape[:2]
    out = [uniform_budgets(q_count, float(mb), view.n_max) for mb in levels]
    return np.stack([np.broadcast_to(np.minimum(b, view.cap), (t_count, q_count)) for b in out])


def _fixed_levels(values: tuple[float, ...]):
    def levels(view: DrawView, train: TrainingScores | None) -> tuple[float, ...]:
        return values

    return levels


#: the peers, by name (``uniform`` is the reference every method is measured against)
PEERS: dict[str, Peer] = {
    "uniform": Peer("uniform", "mean budget", "nothing", uniform_peer_budgets,
                    mean_budget_levels, budget_matched=True),
    "adaptive-consistency": Peer("adaptive-consistency", "threshold", "answers",
                                 _threshold_budgets(ac_signal), _fixed_levels(AC_THRESHOLDS)),
    "esc-4": Peer("esc-4", "max draws", "answers", esc_budgets(4), esc_levels(4)),
    "esc-8": Peer("esc-8", "max draws", "answers", esc_budgets(8), esc_levels(8)),
    "vote-lead": Peer("vote-lead", "mean budget", "answers", vote_lead_budgets,
                      mean_budget_levels, budget_matched=True),
    "score-raw": Peer("score-raw", "threshold", "raw scores",
                      _threshold_budgets(lambda v: best_score_signal(v, False)),
                      score_levels(False)),
    "score-calibrated": Peer("score-calibrated", "threshold", "calibrated",
                             _threshold_budgets(lambda v: best_score_signal(v, True)),
                             score_levels(True)),
    "beacon": Peer("beacon", "cost", "raw scores", reward_stopping.beacon_budgets,
                   _fixed_levels(reward_stopping.BEACON_COSTS)),
    "pandora": Peer("pandora", "cost", "raw scores", reward_stopping.pandora_budgets,
                    _fixed_levels(reward_stopping.PANDORA_COSTS)),
}  # fmt: skip

#: peers that read no calibrator (the fallback of ``auto-seq`` under a shift is chosen among them)
CALIBRATOR_FREE = (
    "adaptive-consistency", "esc-4", "esc-8", "vote-lead", "score-raw", "beacon", "pandora",
)  # fmt: skip
#: ``auto-seq`` with a prior that reads no calibrator (a flat prior; the raw PRM score): not
#: peers of :data:`PEERS` (their curves are ``auto-seq``'s), counted with them wherever the
#: best calibrator-free method is chosen
CALIBRATOR_FREE_AUTO_SEQ = ("auto-seq[none]", "auto-seq[base]")
#: peers that only make sense for a score-based pick (not for majority)
SCORE_PEERS = ("score-raw", "score-calibrated", "beacon", "pandora")


def peers_for_rule(rule: str, calibrated: bool) -> list[str]:
    """The peers run for a selection rule: every answer-reading peer, and the score-threshold
    peers for score-based picks (``highest-*``, ``weighted-*``); ``score-calibrated`` only with
    candidate estimates."""
    names = ["uniform", "adaptive-consistency", "esc-4", "esc-8", "vote-lead"]
    if rule != "majority":
        names.append("score-raw")
        if calibrated:
            names.append("score-calibrated")
        names += ["beacon", "pandora"]
    return names
