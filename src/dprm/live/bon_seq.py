"""Live ``auto-seq``: ``dprm solve --mode bon --auto-cost c --train-bon DIR --auto-seq``.

The sequential allocation of ``dprm ias --sequential`` (:mod:`dprm.ias.sequential`) run on a
live generator over one shard's Q questions, with the shard's total budget round(c N_max Q):

1. every question draws the uniform floor (all of the budget, exactly uniform best-of-N, when
   the live questions are unlike the training set's; else the share the policy does best with
   on the training pools at the target cost, :func:`dprm.ias.sequential.floor.fit_sequential`);
2. the policy (:class:`dprm.ias.sequential.SequentialPolicy`, the very state the offline
   evaluator runs) picks the next ``round_size`` draws by its index, the posterior-expected gain
   of one more draw; they are generated together, the PRM scores each complete response, the
   calibrator reads each candidate's own trajectory state (its estimate e, as
   :func:`dprm.ias.paper.estimates.candidate_estimates` on a BoN v2 set) and the posteriors are
   updated;
3. until the budget is spent (exactly: one draw is one candidate) or every question has N_max.

When the training set carries the candidates' final answers (BoN contract v2 ``answer``
column), the policy also reads each draw's final answer, its canonical answer
(:func:`dprm.llm.answers.canonical_answer`, as the run's BoN v2 export writes it): agreement
among a question's draws is evidence of a large success probability, scattered answers of a
small one (:class:`dprm.ias.sequential.WrongAnswerModel`). As offline, a draw that states no
answer ("") is an answer group of its own. A training set without answers keeps the
estimates-only policy.

A question's answer is picked from its draws by ``--rule`` (default the highest uncalibrated PRM
score, docs/design.md §4; or weighted best-of-N / majority vote on the final answers). The policy
is learnt for that rule; for ``majority`` with answers its index is the vote race of
:meth:`dprm.ias.sequential.SequentialPolicy.race_wins`, and for ``highest-last`` the
highest-score index of :mod:`dprm.ias.sequential.pick` (it reads each draw's PRM score: what
one more draw is worth given the current pick), as offline.
The fixed baseline picks from the first ``baseline_n`` candidates of the same pool: questions
the policy gave fewer draws are topped up after the allocation (never read by the policy).

Candidate j of a question is sampled with its own seed (``seed``, question id, j), whatever the
round it was drawn in. Every drawn candidate is appended to ``OUT/seq_drawsSFX.jsonl`` as soon
as its round is scored; a rerun replays the policy on the logged candidates (it is
deterministic given their estimates and answers, so it asks for the same draws) and
generates only the draws that are missing: a resumed run makes the allocation an uninterrupted
one would.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dprm.ias.selection.rules import CONTRACT_RULE
from dprm.io import DataError
from dprm.live.bon_auto import fit_auto
from dprm.live.bon_record import question_record
from dprm.live.calibrated_prm import CalibratedPRM, States
from dprm.live.run import SolveConfig
from dprm.live.run_frame import grade_texts, solving
from dprm.live.runlog import ResultLog


class DrawLog(ResultLog):
    """The resumable log of drawn candidates, keyed by (question_id, draw index).

    Every record has an ``answer``, the canonical final answer of its ``text``; a line without
    one fails in one line naming the file.
    """

    def _load(self) -> None:
        super()._load()
        for (question_id, draw), record in self.records.items():
            if "answer" not in record:
                raise DataError(
                    self.path, f"{question_id} draw {draw}: no 'answer' (written by another dprm)"
                )

    def key(self, record: dict[str, Any]) -> tuple[str, int]:
        draw = record.get("draw")
        if not isinstance(draw, int):
            raise DataError(self.path, f"{record['question_id']}: expected an integer 'draw'")
        return record["question_id"], draw


def check_sequential_training(calibrator: Any, train_bon: str) -> None:
    """Fail fast (one line) when the calibrator cannot give ``train_bon``'s candidate estimates.

    auto-seq learns the likelihood of a candidate's calibrated estimate on the training set's
    candidates: a calibrator that reads hidden states needs their states (BoN contract v2,
    ``response_hidden_states.npy``).

    Raises:
        DataError: the set is not a BoN set, or it has no candidate states and ``calibrator``
            reads hidden states.
    """
    from dprm.data import read_bon_set

    train = read_bon_set(train_bon, check_hidden=False)
    if calibrator.uses_hidden and train.response_hidden is None:
        raise DataError(
            train.path,
            f"--auto-seq: the {calibrator.method} calibrator reads hidden states but this "
            "training set has no candidate states (response_hidden_states.npy, BoN contract "
            "v2), so auto-seq cannot learn how candidates' estimates read",
        )


def indexes_race(seq, rule: str) -> bool:
    """Whether ``auto-seq`` indexes the majority vote's race: the rule is ``majority`` and the
    policy reads the draws' answers (as offline, :func:`dprm.ias.curves.equal_cost.sequential_rows`)."""
    return seq.answers is not None and rule == "majority"


def fit_sequential(
    cprm: CalibratedPRM, states: States, train_bon: str, cost: float, rule: str = CONTRACT_RULE
):
    """``auto-seq`` learnt on ``train_bon`` for the live question states at target cost
    ``cost``, as ``dprm ias --sequential`` learns it for selection ``rule`` (default the
    contract's, highest last score; ``majority`` with answers: the race index).

    The live draws always have answers, so, as offline (:func:`dprm.ias.curves.equal_cost.sequential_rows`)
    when both sets carry answers, the policy reads the draws' final answers when the training
    set has them (BoN contract v2 ``answer`` column; ``seq.answers`` is then not None); without
    them it reads the estimates only. Its floor share is chosen on the training pools for the
    target cost (:func:`dprm.ias.sequential.floor.fit_sequential`), and is 1 when the live
    question states are unlike the training set's.

    Returns:
        (:class:`dprm.ias.sequential.SequentialAuto`, the questions' prior samples [Q, M],
        the floor share, whether the live states are unlike the training set's: then the
        allocation is exactly uniform best-of-N, as offline).

    Raises:
        DataError: the training set was scored by another PRM, has no candidate states, or has
            no final answers and ``rule`` votes.
    """
    from dprm.ias.paper.estimates import candidate_estimates, estimate_samples
    from dprm.ias.selection.draws import table_weight
    from dprm.ias.selection.rules import Candidates
    from dprm.ias.sequential.floor import fit_sequential as fit_policy

    check_sequential_training(cprm.calibrator, train_bon)
    fitted = fit_auto(cprm, states, train_bon, rule)
    cands = Candidates.from_bon(fitted.train)
    train_est = fitted.train_estimate.with_candidate(
        candidate_estimates(cprm.calibrator, fitted.train)
    )
    # the live draws always have answers: the policy reads them when the training set has them
    # (None for a contract-v1 set: the estimates-only policy)
    fit = fit_policy(
        fitted.allocator.model, cands, train_est, table_weight(cands, rule, None), [cost], rule,
        read_answers=cands.answer is not None, n_max=cprm.n_max,
    )  # fmt: skip
    seq = fit.seq
    share = 1.0 if fitted.shifted else fit.floor_shares[0]  # unlike the training questions
    return seq, estimate_samples(fitted.estimate), float(share), fitted.shifted


def shift_fallback_for(train_bon: str, rule: str, cost: float, n_max: int):
    """What ``auto-seq`` runs when the live questions are unlike the training set's: the
    calibrator-free peer for ``rule`` chosen on the training pools and its level at target
    ``cost`` (:func:`dprm.ias.peers.fallback.shift_fallback`, the offline choice; ``uniform`` for a
    training set without final answers).

    Returns:
        :class:`dprm.ias.peers.fallback.ShiftFallback`.
    """
    from dprm.data import read_bon_set
    from dprm.ias.peers.fallback import shift_fallback
    from dprm.ias.selection.draws import table_weight
    from dprm.ias.selection.rules import Candidates

    cands = Candidates.from_bon(read_bon_set(train_bon, check_hidden=False))
    return shift_fallback(cands, table_weight(cands, rule, None), rule, cost, n_max)


class _Drawer:
    """Draws, scores, grades and logs candidates (question index, draw index) in batches."""

    def __init__(self, rows, cprm, generator, config, pool, log, bar):
        self.rows, self.cprm, self.generator, self.config = rows, cprm, generator, config
        self.pool, self.log, self.bar = pool, log, bar
        self.order = 0  # the policy's draws so far (floor included), in the order it asked

    def fetch(
        self, requests: list[tuple[int, int]], round_index: int | None
    ) -> list[tuple[float, str, float]]:
        """The candidates' (calibrated estimate, canonical final answer, PRM score), generating
        the ones not in the log.

        ``round_index`` None: baseline top-ups (not the policy's draws, no ``order``).
        """
        from dprm.llm.answers import canonical_answer
        from dprm.llm.generate import derive_seed
        from dprm.llm.prompts import build_prompt, split_steps

        qid = [self.rows[q]["question_id"] for q, _ in requests]
        missing = [i for i, (q, j) in enumerate(requests) if (qid[i], j) not in self.log]
        if missing:
            cfg = self.config
            outs = self.generator.generate(
                [build_prompt(self.rows[requests[i][0]]["question"], self.generator.model_name)
                 for i in missing],
                1,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                max_new_tokens=cfg.max_new_tokens,
                seeds=[derive_seed(cfg.seed, "solve-bon-seq", qid[i], requests[i][1])
                       for i in missing],
            )  # fmt: skip
            completions = {i: list(out)[0] for i, out in zip(missing, outs, strict=True)}
            scored: dict[int, tuple[float, bool, float]] = {}
            for q in dict.fromkeys(requests[i][0] for i in missing):  # one PRM pass per question
                mine = [i for i in missing if requests[i][0] == q]
                states = self.cprm.path_states(
                    self.rows[q]["question"], [split_steps(completions[i].text) for i in mine]
                )
                estimate = self.cprm.mean(states)
                for k, i in enumerate(mine):
                    scored[i] = (float(states.scores[k]), bool(states.truncated[k]), estimate[k])
            graded = [i for i in missing if self.rows[requests[i][0]]["answer"].strip()]
            grades = grade_texts(
                self.pool,
                [self.rows[requests[i][0]]["answer"] for i in graded],
                [completions[i].text for i in graded],
            )
            correct = dict(zip(graded, grades, strict=True))
            for i in missing:
                c = completions[i]
                self.log.append(
                    {
                        "question_id": qid[i],
                        "draw": int(requests[i][1]),
                        "round": round_index,
                        "order": None if round_index is None else self.order + i,
                        "text": c.text,
                        "n_tokens": int(c.n_tokens),
                        "finish_reason": c.finish_reason,
                        "prm_score": scored[i][0],
                        "truncated": scored[i][1],
                        "estimate": float(scored[i][2]),
                        "correct": correct[i][0] if i in correct else None,
                        "grade_failed": correct[i][1] if i in correct else None,
                        "answer": canonical_answer(c.text),
                    }
                )
        if round_index is not None:
            self.order += len(requests)
        self.bar.update(len(requests))
        logged = [self.log.records[(qid[i], j)] for i, (_, j) in enumerate(requests)]
        return [(float(d["estimate"]), str(d["answer"]), float(d["prm_score"])) for d in logged]


def solve_sequential(
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
    run_peer: Callable[..., list[dict]] | None = None,
) -> list[dict]:
    """Run ``auto-seq`` over this shard's questions; returns their finished records.

    Appends each question's record to ``OUT/bonSFX.jsonl`` once the allocation is done (the
    policy couples the shard's questions): ``budget`` is the draws the policy gave it,
    ``candidates`` every drawn candidate in draw order with its ``estimate``, ``answer`` (its
    canonical final answer), ``round`` (0: the floor; None: a baseline top-up) and ``order``
    (its place in the shard's sequence of draws); ``floor_share`` is the share the policy used.

    When the shard's questions are unlike the training set's, the policy does not run: as
    offline, it falls back to the calibrator-free peer chosen on the training pools
    (:func:`shift_fallback_for`), run live by ``run_peer``
    (:func:`dprm.live.bon_peers.solve_peer`, passed in: that module builds on this one) at the
    level that spends the most within the target cost on the training pools, never past the
    shard's total round(c N_max Q) (a stopping rule stops every question once it is spent);
    every record says
    ``falls_back_to`` (``uniform``: exactly uniform best-of-N, for a training set without
    final answers).
    """
    from dprm.ias.learnt.allocation import uniform_budgets
    from dprm.ias.learnt.auto import mean_budget as target_mean_budget
    from dprm.ias.selection.rules import answer_key
    from dprm.llm.shard import chunked

    rows = questions.to_dict("records")
    log = ResultLog(out / f"bon{suffix}.jsonl")
    if all(r["question_id"] in log for r in rows):
        return [log.records[r["question_id"]] for r in rows]
    seq, samples, share, shifted = fit_sequential(
        cprm, states, str(config.train_bon), float(config.auto_cost), config.rule
    )
    fallback = None
    if shifted:  # as offline: the calibrator-free peer chosen on the training pools
        fallback = shift_fallback_for(
            str(config.train_bon), config.rule, float(config.auto_cost), int(config.n_max)
        )
        if fallback.peer != "uniform":
            if run_peer is None:
                raise ValueError("auto-seq under a shift runs a peer: pass run_peer")
            extra = {"allocation": "auto-seq", "falls_back_to": fallback.peer, "floor_share": 1.0}
            total = int(round(target_mean_budget(float(config.auto_cost), int(config.n_max))
                              * len(rows)))  # fmt: skip
            return run_peer(
                config, cprm, generator, out, suffix, questions, states, progress=progress,
                pool=pool, peer=(fallback.peer, fallback.level), extra=extra, budget_total=total,
            )  # fmt: skip
    q_count, n_max, size = len(rows), int(config.n_max), max(1, int(config.round_size))
    mean_budget = target_mean_budget(float(config.auto_cost), n_max)
    reads_answers = seq.answers is not None
    policy = seq.policy(
        samples, np.full(q_count, n_max), n_max, answers=reads_answers,
        majority=indexes_race(seq, config.rule),
    )  # fmt: skip
    reads_score = policy.pick is not None  # highest-last: the pick index reads PRM scores
    floor = policy.start(mean_budget, share)
    if shifted:  # no answers to read: exactly uniform best-of-N (the policy chooses no draw)
        floor, policy.left = uniform_budgets(q_count, mean_budget, n_max), 0
    total = int(floor.sum()) + policy.left
    draws = DrawLog(out / f"seq_draws{suffix}.jsonl")
    with solving(total, total, "solve bon auto-seq", config, progress=progress, pool=pool) as (
        bar,
        grading,
    ):
        drawer = _Drawer(rows, cprm, generator, config, grading, draws, bar)

        def read(
            requests: list[tuple[int, int]], round_index: int
        ) -> list[tuple[float, Any, float | None]]:
            """(log r, answer key or None, rule score or None) of each requested draw, as the
            policy reads it (the score: a ``highest-last`` policy indexes its pick by the PRM
            score, :mod:`dprm.ias.sequential.pick`)."""
            fetched = drawer.fetch(requests, round_index)
            qs = np.array([q for q, _ in requests], dtype=np.int64)
            e = np.array([[est] for est, _, _ in fetched], dtype=np.float64)
            s = np.array([[score] for _, _, score in fetched], dtype=np.float64)
            log_r = seq.log_ratio(samples[qs], e, s if reads_score else None)[:, 0]
            # grouped as offline (Candidates.answer): a draw stating no answer is its own group
            keys = [
                answer_key(a, j) if reads_answers else None
                for (_, j), (_, a, _) in zip(requests, fetched, strict=True)
            ]
            scores = s[:, 0].tolist() if reads_score else [None] * len(requests)
            return list(zip(log_r.tolist(), keys, scores, strict=True))

        floor_requests = [(q, j) for q in range(q_count) for j in range(int(floor[q]))]
        floor_r: list[list[float]] = [[] for _ in range(q_count)]
        floor_a: list[list[Any]] = [[] for _ in range(q_count)]
        floor_s: list[list[Any]] = [[] for _ in range(q_count)]
        for part in chunked(floor_requests, size):
            for (q, _), (r, a, sc) in zip(part, read(part, 0), strict=True):
                floor_r[q].append(r)
                floor_a[q].append(a)
                floor_s[q].append(sc)
        policy.observe_floor(
            [np.asarray(r, dtype=np.float64) for r in floor_r],
            floor_a if reads_answers else None,
            floor_s if reads_score else None,
        )
        round_index = 0
        while picks := policy.next_round(size):
            round_index += 1
            seen: dict[int, int] = {}
            requests = []
            for q in picks:  # a question picked k times gets its next k draws
                requests.append((q, int(policy.n[q]) + seen.get(q, 0)))
                seen[q] = seen.get(q, 0) + 1
            for (q, _), (r, a, sc) in zip(requests, read(requests, round_index), strict=True):
                policy.observe(q, r, a, sc)
        budgets = policy.n.copy()
        top_up_baseline(drawer, bar, budgets, config, size, drawn=total)
    return logged_records(
        rows, draws, budgets, config, cprm, states, log,
        lambda q: {"allocation": "auto-seq", "floor": int(floor[q]), "floor_share": float(share),
                   **({"falls_back_to": "uniform"} if shifted else {})},
    )  # fmt: skip


def top_up_baseline(drawer, bar, budgets: np.ndarray, config, size: int, drawn: int) -> None:
    """Draw what the fixed baseline (``--baseline-n``) needs beyond each question's budget.

    Args:
        drawer: fetches ``[(question, draw index)]`` parts (:class:`_Drawer`).
        bar: the run's progress bar (its total grows by the top-up).
        budgets: ``[Q]`` draws the adaptive allocation spent per question.
        config: the run's :class:`~dprm.live.run.SolveConfig`.
        size: draws fetched together.
        drawn: draws made so far (the bar's total before the top-up).
    """
    from dprm.llm.shard import chunked

    base_n = int(config.baseline_n or 0)
    top_up = [(q, j) for q in range(len(budgets)) for j in range(int(budgets[q]), base_n)]
    bar.total = drawn + len(top_up)
    bar.refresh()
    for part in chunked(top_up, size):
        drawer.fetch(part, None)


def logged_records(rows, draws, budgets: np.ndarray, config, cprm, states, log, allocation):
    """One record per question (its budget, candidates and quantiles), appended to ``log``
    where missing; returns the logged records in question order.

    Args:
        allocation: ``q -> dict`` of the allocation's own fields for question ``q``
            (``allocation`` and e.g. the auto-seq floor or the peer's level).
    """
    base_n = int(config.baseline_n or 0)
    levels = cprm.default_levels
    q_levels = cprm.quantiles(states, levels)
    p_hat = cprm.mean(states)
    records = []
    for q, row in enumerate(rows):
        qid = row["question_id"]
        n = int(budgets[q])
        cands = []
        for j in range(max(n, base_n)):
            d = draws.records[(qid, j)]
            cands.append({k: d[k] for k in d if k not in ("question_id", "draw")})
        record = question_record(
            row, config, states.scores[q], p_hat[q], levels, q_levels[q], cands, n, base_n,
            **allocation(q),
        )  # fmt: skip
        if qid not in log:
            log.append(record)
        records.append(log.records[qid])
    return records
