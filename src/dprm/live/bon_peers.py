"""Live adaptive best-of-N peers: ``dprm solve --mode bon --peer NAME [--peer-level X]``.

The calibrator-free stopping rules of :mod:`dprm.ias.peers.methods`, run on a live generator over one
shard's questions, with the very stopping functions the offline evaluation runs:

* stopping rules (``adaptive-consistency``: the threshold on P(p1 > p2), default 0.95;
  ``esc-4`` / ``esc-8``: the most draws, default ``--n-max``; ``score-raw`` /
  ``score-calibrated``: the threshold on the best drawn score, required): every question not
  yet stopped draws its next candidate (ESC: its next window) in a round; a question stops when
  the offline rule, applied to its draws so far in draw order, stops there (or at ``--n-max``);
* ``vote-lead`` (budget-matched: ``--peer-level`` mean draws, the shard's total
  round(level x Q)): one draw each, then rounds of ``--round-size`` draws, each to the
  question whose two leading answers are closest, at most one per question and round
  (:func:`dprm.ias.peers.methods.vote_lead_sequence` with rounds of 1);
* ``beacon`` / ``pandora`` (:mod:`dprm.ias.peers.reward_stopping`; ``--peer-level``: the cost
  of one more draw, required): stopping rules fitted on ``--train-bon``'s raw PRM scores.

The answer is picked by ``--rule`` from the drawn candidates, as for every bon allocation; the
fixed baseline's candidates are topped up after the allocation. Every draw is appended to
``OUT/peer_drawsSFX.jsonl``; a rerun replays the rule on the logged draws and generates only the
missing ones.
"""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dprm.ias.peers.methods import PEERS, DrawView, TrainingScores, running_top2
from dprm.live.calibrated_prm import CalibratedPRM, States
from dprm.live.run import SolveConfig

#: the peers ``dprm solve --peer`` runs
LIVE_PEERS = (
    "adaptive-consistency", "esc-4", "esc-8", "score-raw", "score-calibrated", "vote-lead",
    "beacon", "pandora",
)  # fmt: skip
#: each peer's level when ``--peer-level`` is not given (None: required)
DEFAULT_LEVELS = {"adaptive-consistency": 0.95, "score-raw": None, "score-calibrated": None,
                  "beacon": None, "pandora": None}  # fmt: skip
#: the peers fitted on the training set's raw scores (they read ``--train-bon``)
TRAINED_PEERS = ("beacon", "pandora")


def training_scores_of(train_bon: str) -> TrainingScores:
    """The raw scores (and their questions) of a training BoN set's candidates, which the
    peers of :data:`TRAINED_PEERS` are fitted on."""
    from dprm.data import read_bon_set
    from dprm.ias.peers.curves import training_scores
    from dprm.ias.selection.rules import Candidates

    cands = Candidates.from_bon(read_bon_set(train_bon, check_hidden=False))
    return training_scores(cands, None)


def peer_level(config: SolveConfig) -> float:
    """The level of ``config.peer``'s knob (``--peer-level`` or the peer's default)."""
    if config.peer_level is not None:
        return float(config.peer_level)
    if config.peer in ("esc-4", "esc-8"):
        return float(config.n_max)
    return DEFAULT_LEVELS[config.peer]


def _codes(keys: list) -> np.ndarray:
    index: dict = {}
    return np.array([index.setdefault(k, len(index)) for k in keys], dtype=np.int64)


def stops(
    name: str,
    level: float,
    draws: list[tuple[float, Any, float]],
    n_max: int,
    train: TrainingScores | None = None,
) -> bool:
    """Whether a question's draws so far ((estimate, answer key, raw score) in draw order) stop
    under the peer's rule at ``level``: the offline rule on the same prefix stops within it
    (``train``: the training scores of :data:`TRAINED_PEERS`)."""
    if len(draws) >= n_max:
        return True
    if not draws:
        return False
    est, keys, raw = zip(*draws, strict=True)
    view = DrawView(
        _codes(list(keys))[None, None, :], np.asarray(raw, dtype=np.float64)[None, None, :],
        np.asarray(est, dtype=np.float64)[None, None, :], np.array([n_max]), n_max, train,
    )  # fmt: skip
    return int(PEERS[name].budgets(view, [level])[0, 0, 0]) <= len(draws)


def solve_peer(
    config: SolveConfig,
    cprm: CalibratedPRM,
    generator: Any,
    out: Path,
    suffix: str,
    questions: pd.DataFrame,
    states: States,
    *,
    progress: bool = True,
    pool: Any = None,
    peer: tuple[str, float] | None = None,
    extra: dict[str, Any] | None = None,
    budget_total: int | None = None,
) -> list[dict]:
    """Run the peer ``config.peer`` over this shard's questions; returns their records
    (``allocation`` = ``peer:<name>``, ``peer_level``, ``budget`` = its draws).

    Args:
        peer: (name, level) to run instead of ``config.peer`` at ``peer_level(config)``
            (``auto-seq``'s fallback under a shift, :mod:`dprm.live.bon_seq`).
        extra: record fields replacing ``allocation`` (e.g. ``auto-seq`` and
            ``falls_back_to``); ``peer_level`` is always recorded.
        budget_total: the most draws of the shard (a stopping rule stops every question once
            they are spent: a round that would overspend draws for the questions with the
            fewest draws first, then in question order); None: no cap.
    """
    from dprm.ias.selection.rules import answer_key
    from dprm.live.bon_seq import DrawLog, _Drawer, logged_records, top_up_baseline
    from dprm.live.run_frame import solving
    from dprm.live.runlog import ResultLog
    from dprm.llm.shard import chunked

    rows = questions.to_dict("records")
    log = ResultLog(out / f"bon{suffix}.jsonl")
    if all(r["question_id"] in log for r in rows):
        return [log.records[r["question_id"]] for r in rows]
    name, level = peer if peer is not None else (config.peer, peer_level(config))
    fields = {"allocation": f"peer:{name}", **(extra or {}), "peer_level": float(level)}
    label = f"auto-seq, falls back to {name}" if peer is not None else name
    q_count, n_max, size = len(rows), int(config.n_max), max(1, int(config.round_size))
    draws = DrawLog(out / f"peer_draws{suffix}.jsonl")
    seen: list[list[tuple[float, Any, float]]] = [[] for _ in range(q_count)]
    total = q_count * n_max
    with solving(total, total, f"solve bon {label}", config, progress=progress, pool=pool) as (
        bar,
        grading,
    ):
        drawer = _Drawer(rows, cprm, generator, config, grading, draws, bar)

        def read(requests: list[tuple[int, int]], round_index: int) -> None:
            for part in chunked(requests, size):
                for (q, j), (e, a, raw) in zip(part, drawer.fetch(part, round_index), strict=True):
                    seen[q].append((e, answer_key(a, j), raw))

        if name == "vote-lead":
            budget_total = int(round(level * q_count))
            read([(q, 0) for q in range(q_count)], 0)
            left, round_index = budget_total - q_count, 0

            def lead(q: int) -> int:
                a, b = running_top2(_codes([k for _, k, _ in seen[q]])[None, :])
                return int(a[0, -1] - b[0, -1])

            heap = [(lead(q), 1, q) for q in range(q_count) if n_max > 1]
            heapq.heapify(heap)
            while left > 0 and heap:
                round_index += 1
                picks: list[int] = []
                while heap and len(picks) < min(size, left):
                    _, n, q = heapq.heappop(heap)
                    picks.append(q)
                requests = [(q, len(seen[q])) for q in picks]
                read(requests, round_index)
                left -= len(picks)
                for q in picks:
                    if len(seen[q]) < n_max:
                        heapq.heappush(heap, (lead(q), len(seen[q]), q))
        else:
            step = {"esc-4": 4, "esc-8": 8}.get(name, 1)
            train = training_scores_of(config.train_bon) if name in TRAINED_PEERS else None
            active, round_index = list(range(q_count)), 0
            left = q_count * n_max if budget_total is None else int(budget_total)
            while active and left > 0:
                requests = [
                    (q, len(seen[q]) + i) for q in active for i in range(step)
                    if len(seen[q]) + i < n_max
                ]  # fmt: skip
                if len(requests) > left:  # the cap: the questions with the fewest draws first
                    requests = sorted(requests, key=lambda r: (len(seen[r[0]]), r[0], r[1]))
                    requests = sorted(requests[:left])
                left -= len(requests)
                read(requests, round_index)
                round_index += 1
                active = [q for q in active if not stops(name, level, seen[q], n_max, train)]
        budgets = np.array([len(s) for s in seen], dtype=np.int64)
        top_up_baseline(drawer, bar, budgets, config, size, drawn=int(budgets.sum()))
    return logged_records(
        rows, draws, budgets, config, cprm, states, log,
        lambda q: dict(fields),
    )  # fmt: skip
