"""What ``dprm serve`` computes: step scores and calibrated quantiles, and budgets.

Every number comes from the functions the CLI uses, so a service answer and a ``dprm solve``
decision on the same inputs agree:

- scores and hidden states: the PRM wrapper's own ``prepare`` and ``forward``
  (:mod:`dprm.llm.prm_interface`, what ``score_steps`` runs), batched over requests;
- quantiles, p_hat, the lower bound Q(lower_level) of the beam rules: :class:`CalibratedPRM`;
- budgets: the C rule (:meth:`CalibratedPRM.budgets`, as ``dprm ias``), ``auto``
  (:func:`dprm.live.bon_auto.auto_budgets`) and ``auto-seq``, replayed on the client's draws
  with the policy ``dprm solve --auto-seq`` runs (:func:`dprm.live.bon_seq.fit_sequential`,
  :class:`dprm.ias.sequential.SequentialPolicy`), so the next decision is the one the live
  loop would make after the same draws;
- the pick among the draws: :func:`dprm.ias.rules.select_candidate`, as ``bon.jsonl``'s.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from dprm.ias.rules import CONTRACT_RULE, answer_key, select_candidate
from dprm.io import DataError
from dprm.live.calibrated_prm import CalibratedPRM, States
from dprm.serve.batcher import MicroBatcher
from dprm.serve.settings import ServeSettings

#: the allocations ``/v1/allocate`` runs, and what each needs from the server's flags
ALLOCATIONS = ("ias", "auto", "auto-seq")


class RequestError(ValueError):
    """A request the service refuses: its status code and one line naming the field."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = int(status)


@dataclass(frozen=True)
class Policy:
    """The server's allocation settings (``dprm serve`` flags, as ``dprm solve``'s).

    Attributes:
        C: the C rule's target probability of at least one correct draw.
        lower_level: the level of the lower bound Q(lower_level | h) the beam rules read.
        train_bon: training BoN set of ``auto`` / ``auto-seq`` (None: only ``ias``).
        auto_cost: their mean cost (mean draws / n_max).
        rule: how a question's answer is picked from its draws (``dprm solve --rule``).
        round_size: ``auto-seq``'s draws per round.
    """

    C: float = 0.9
    lower_level: float = 0.1
    train_bon: str | None = None
    auto_cost: float | None = None
    rule: str = CONTRACT_RULE
    round_size: int = 16


@dataclass
class ScoreJob:
    """One ``/v1/score`` request as the worker reads it."""

    question: str
    solutions: list[list[str]]
    levels: np.ndarray
    lower_level: float


@dataclass
class Draw:
    """A drawn candidate of ``/v1/allocate``: its steps and (optional) canonical answer."""

    steps: list[str]
    answer: str | None = None


class ScoringService:
    """The calibrated PRM behind the endpoints; model work runs on one worker thread.

    Args:
        cprm: the loaded PRM plus calibrator.
        settings: limits and the batch window.
        policy: allocation settings.
    """

    def __init__(self, cprm: CalibratedPRM, settings: ServeSettings, policy: Policy):
        self.cprm, self.settings, self.policy = cprm, settings, policy
        self.batcher = MicroBatcher(
            self._score_batch, settings.max_batch, settings.batch_wait_ms / 1e3, settings.max_queue
        )
        self._fits: OrderedDict[tuple, Any] = OrderedDict()  # auto-seq fits by question tuple
        self._fits_lock = threading.Lock()
        self.unavailable = self._check_allocations()

    def close(self) -> None:
        self.batcher.close()

    # -- checks ------------------------------------------------------------------------------
    def _check_allocations(self) -> dict[str, str]:
        """allocation -> why this server cannot run it (missing ones can)."""
        p = self.policy
        if p.train_bon is None or p.auto_cost is None:
            why = "the server was started without --train-bon and --auto-cost"
            return {"auto": why, "auto-seq": why}
        from dprm.live.bon import check_training_answers
        from dprm.live.bon_seq import check_sequential_training

        check_training_answers(p.train_bon, p.rule)  # a bad set stops the server at start
        try:
            check_sequential_training(self.cprm.calibrator, p.train_bon)
        except DataError as err:
            return {"auto-seq": str(err)}
        return {}

    def check_text(self, what: str, text: str) -> int:
        if len(text) > self.settings.max_chars:
            raise RequestError(
                422, f"{what}: {len(text)} characters, the limit is {self.settings.max_chars}"
            )
        return len(text)

    def check_steps(self, what: str, steps: list[str]) -> int:
        if not steps:
            raise RequestError(422, f"{what}: no steps (send at least one)")
        if len(steps) > self.settings.max_steps:
            raise RequestError(
                422, f"{what}: {len(steps)} steps, the limit is {self.settings.max_steps}"
            )
        return sum(self.check_text(f"{what}[{t}]", s) for t, s in enumerate(steps))

    def check_total(self, chars: int) -> None:
        if chars > self.settings.max_request_chars:
            raise RequestError(
                413,
                f"request holds {chars} characters of text, the limit is "
                f"{self.settings.max_request_chars}",
            )

    def check_levels(self, levels: list[float]) -> np.ndarray:
        if len(levels) > self.settings.max_levels:
            raise RequestError(
                422, f"levels: {len(levels)} levels, the limit is {self.settings.max_levels}"
            )
        try:
            self.cprm.check_levels(levels)
        except DataError as err:
            raise RequestError(422, str(err)) from None
        return np.asarray(levels, dtype=np.float64)

    # -- /v1/score ---------------------------------------------------------------------------
    def score_job(
        self,
        question: str,
        solutions: list[list[str]],
        levels: list[float] | None,
        lower_level: float | None,
    ) -> ScoreJob:
        """Check a score request against the limits (RequestError) and build its job."""
        chars = self.check_text("question", question)
        if not solutions:
            raise RequestError(422, "solutions: empty (send at least one list of steps)")
        if len(solutions) > self.settings.max_solutions:
            raise RequestError(
                422,
                f"solutions: {len(solutions)} solutions, the limit is "
                f"{self.settings.max_solutions}",
            )
        for i, steps in enumerate(solutions):
            chars += self.check_steps(f"solutions[{i}]", steps)
        self.check_total(chars)
        chosen = self.cprm.default_levels if levels is None else self.check_levels(levels)
        lower = self.policy.lower_level if lower_level is None else float(lower_level)
        self.check_levels([lower])
        return ScoreJob(question, [list(s) for s in solutions], chosen, lower)

    def _score_batch(self, jobs: list[ScoreJob]) -> list[Any]:
        """Score every job's solutions in one PRM forward; one result (or error) per job."""
        prm = self.cprm.prm
        encoded, spans, results = [], [], [None] * len(jobs)
        for i, job in enumerate(jobs):
            try:
                mine = [prm.prepare(job.question, steps) for steps in job.solutions]
            except DataError as err:  # e.g. a step holding the PRM's step separator
                results[i] = RequestError(422, str(err))
                continue
            spans.append((i, len(encoded), len(encoded) + len(mine)))
            encoded += mine
        outputs = prm.forward(encoded) if encoded else []
        live = []  # (job index, its outputs): the jobs whose every solution has a state
        for i, start, end in spans:
            if any(len(o.scores) == 0 for o in outputs[start:end]):
                results[i] = RequestError(
                    422,
                    f"question: longer than the PRM's token limit ({prm.max_tokens} tokens) "
                    "on its own",
                )
            else:
                live.append((i, outputs[start:end]))
        if not live:
            return results
        # the calibrator once per batch (per distinct level set), not once per request
        rows = [
            np.concatenate([np.asarray(o.scores, np.float32) for o in outs]) for _, outs in live
        ]
        sizes = np.cumsum([0] + [len(r) for r in rows])
        states = States(
            np.concatenate(rows).clip(0.0, 1.0),
            np.concatenate([np.asarray(o.hidden, np.float32) for _, outs in live for o in outs]),
        )
        mean = self.cprm.mean(states)
        quantiles, lower = {}, {}
        for k, (i, _) in enumerate(live):
            quantiles.setdefault(tuple(jobs[i].levels.tolist()), []).append(k)
            lower.setdefault(jobs[i].lower_level, []).append(k)
        q_of, lower_of = {}, {}
        for levels, members in quantiles.items():
            q = self._quantiles_of(states, sizes, members, levels)
            q_of.update(zip(members, q, strict=True))
        for level, members in lower.items():
            q = self._quantiles_of(states, sizes, members, (level,))
            lower_of.update((k, v[:, 0]) for k, v in zip(members, q, strict=True))
        for k, (i, outs) in enumerate(live):
            part = slice(sizes[k], sizes[k + 1])
            results[i] = self._score_result(
                jobs[i], outs, states.scores[part], q_of[k], mean[part], lower_of[k]
            )
        return results

    def _quantiles_of(self, states: States, sizes, members: list[int], levels) -> list:
        """Q(levels | h) of the members' rows, one calibrator call: one [T_k, L] per member."""
        rows = np.concatenate([np.arange(sizes[k], sizes[k + 1]) for k in members])
        q = self.cprm.quantiles(States(states.scores[rows], states.hidden[rows]), levels)
        bounds = np.cumsum([0] + [sizes[k + 1] - sizes[k] for k in members])
        return [q[bounds[j] : bounds[j + 1]] for j in range(len(members))]

    def _score_result(self, job, outputs, scores, quantiles, mean, lower) -> dict[str, Any]:
        """One request's answer from its rows (every step of its solutions, in order)."""
        solutions, offset = [], 0
        for steps, out in zip(job.solutions, outputs, strict=True):
            rows = []
            for t in range(len(out.scores)):
                k = offset + t
                rows.append(
                    {
                        "step": t + 1,
                        "prm_score": float(scores[k]),
                        "quantiles": quantiles[k].tolist(),
                        "mean": float(mean[k]),
                        "lower": float(lower[k]),
                    }
                )
            offset += len(out.scores)
            solutions.append(
                {"n_steps": len(steps), "truncated": bool(out.truncated), "steps": rows}
            )
        return {
            "levels": job.levels.tolist(),
            "lower_level": job.lower_level,
            "solutions": solutions,
        }

    # -- /v1/allocate ------------------------------------------------------------------------
    def check_allocate(
        self, questions: list[str], draws: list[list[Draw]], allocation: str, C: float | None
    ) -> None:
        """Refuse (RequestError) what the limits or this server's settings rule out."""
        if not questions:
            raise RequestError(422, "questions: empty (send at least one)")
        if len(questions) > self.settings.max_questions:
            raise RequestError(
                422,
                f"questions: {len(questions)} questions, the limit is "
                f"{self.settings.max_questions}",
            )
        if allocation in self.unavailable:
            raise RequestError(409, f"allocation {allocation!r}: {self.unavailable[allocation]}")
        if C is not None and allocation != "ias":
            raise RequestError(422, f"C: only the 'ias' allocation reads it, not {allocation!r}")
        chars = 0
        for i, (question, mine) in enumerate(zip(questions, draws, strict=True)):
            chars += self.check_text(f"questions[{i}].question", question)
            if len(mine) > self.settings.max_draws:
                raise RequestError(
                    422,
                    f"questions[{i}].draws: {len(mine)} draws, the limit is "
                    f"{self.settings.max_draws}",
                )
            for j, draw in enumerate(mine):
                chars += self.check_steps(f"questions[{i}].draws[{j}].steps", draw.steps)
                if draw.answer is not None:
                    chars += self.check_text(f"questions[{i}].draws[{j}].answer", draw.answer)
        self.check_total(chars)

    def allocate(
        self, questions: list[str], draws: list[list[Draw]], allocation: str, C: float | None
    ) -> dict[str, Any]:
        """Budgets and next decisions (runs on the worker thread; see :meth:`check_allocate`).

        Returns:
            ``allocation``, ``done`` (every question has its draws) and per question its
            question-state reading, ``budget`` (None while ``auto-seq`` is still deciding),
            ``drawn``, ``decision`` (``draw`` / ``stop`` / ``wait``: another question draws
            first), ``draw_more`` and the rule's ``pick`` among its first ``budget`` draws.
        """
        cprm, policy = self.cprm, self.policy
        try:
            states = cprm.question_states(questions)
        except DataError as err:
            raise RequestError(422, f"questions: {err}") from None
        drawn = [
            self._draw_readings(i, q, d)
            for i, (q, d) in enumerate(zip(questions, draws, strict=True))
        ]
        if allocation == "ias":
            target = policy.C if C is None else float(C)
            budgets = cprm.budgets(states, target).tolist()
            extra: dict[str, Any] = {"C": target}
        elif allocation == "auto":
            from dprm.live.bon_auto import auto_budgets

            budgets = auto_budgets(
                cprm, states, policy.train_bon, float(policy.auto_cost), policy.rule
            ).tolist()
            extra = {"auto_cost": policy.auto_cost}
        else:
            budgets, extra = self._auto_seq(questions, states, drawn)
        levels = cprm.default_levels
        q_levels, p_hat = cprm.quantiles(states, levels), cprm.mean(states)
        answers = []
        for i, budget in enumerate(budgets):
            have = len(drawn[i]["scores"])
            if budget is None:
                need = int(extra["draw_more"][i])
                decision = "draw" if need else "wait"
            else:
                need = max(0, int(budget) - have)
                decision = "draw" if need else "stop"
            answers.append(
                {
                    "question_prm_score": float(states.scores[i]),
                    "question_mean": float(p_hat[i]),
                    "question_quantiles": {
                        "levels": levels.tolist(),
                        "values": q_levels[i].tolist(),
                    },
                    "budget": None if budget is None else int(budget),
                    "drawn": have,
                    "decision": decision,
                    "draw_more": need,
                    "pick": self._pick(drawn[i], have if budget is None else min(have, budget)),
                }
            )
        done = all(a["decision"] == "stop" for a in answers)
        extra.pop("draw_more", None)
        return {
            "allocation": allocation,
            "rule": policy.rule,
            "n_max": cprm.n_max,
            "done": done,
            **extra,
            "questions": answers,
        }

    def _draw_readings(self, i: int, question: str, draws: list[Draw]) -> dict[str, Any]:
        """A question's draws as the live loop reads them: the PRM score and calibrated
        estimate of each response's last scored step, and its canonical answer."""
        if not draws:
            return {"scores": np.zeros(0), "estimates": np.zeros(0), "answers": []}
        from dprm.llm.answers import canonical_answer

        try:
            states = self.cprm.path_states(question, [d.steps for d in draws])
        except DataError as err:
            raise RequestError(422, f"questions[{i}].draws: {err}") from None
        answers = [
            d.answer if d.answer is not None else canonical_answer("\n\n".join(d.steps))
            for d in draws
        ]
        return {
            "scores": np.asarray(states.scores, dtype=np.float64),
            "estimates": self.cprm.mean(states),
            "answers": answers,
        }

    def _pick(self, reading: dict[str, Any], n: int) -> dict[str, Any] | None:
        """The rule's pick among the first ``n`` draws (as ``bon.jsonl``'s ``chosen``)."""
        if n == 0:
            return None
        scores, answers = reading["scores"][:n], reading["answers"][:n]
        rule = self.policy.rule
        index = select_candidate(rule, scores, None if rule == CONTRACT_RULE else answers)
        return {"index": int(index), "prm_score": float(scores[index]), "answer": answers[index]}

    def _fit(self, questions: list[str], states: States):
        """``auto-seq`` fitted for these questions (cached: a loop asks again after each draw)."""
        from dprm.live.bon_seq import fit_sequential

        key = tuple(questions)
        with self._fits_lock:
            if key in self._fits:
                self._fits.move_to_end(key)
                return self._fits[key]
        p = self.policy
        fitted = fit_sequential(self.cprm, states, p.train_bon, float(p.auto_cost), p.rule)
        with self._fits_lock:
            self._fits[key] = fitted
            while len(self._fits) > 64:
                self._fits.popitem(last=False)
        return fitted

    def _auto_seq(
        self, questions: list[str], states: States, drawn: list[dict[str, Any]]
    ) -> tuple[list[int | None], dict[str, Any]]:
        """Replay ``dprm solve --auto-seq`` on the client's draws (question q's draw j is the
        j-th of its list) until the policy asks for a draw the client has not sent, or stops.

        Returns:
            (budgets [Q], None for every question while the policy is not done; extra fields:
            ``floor``, ``floor_share``, ``draw_more`` [Q]: draws the policy asks for now).
        """
        from dprm.ias.allocation import uniform_budgets
        from dprm.ias.auto import mean_budget as target_mean_budget
        from dprm.live.bon_seq import indexes_race, shift_fallback_for

        p, cprm = self.policy, self.cprm
        seq, samples, share, shifted = self._fit(questions, states)
        n_max, q_count = cprm.n_max, len(questions)
        if shifted:
            fallback = shift_fallback_for(p.train_bon, p.rule, float(p.auto_cost), n_max)
            if fallback.peer != "uniform":
                raise RequestError(
                    409,
                    f"auto-seq: these questions are unlike the training set's (shift check); "
                    f"dprm solve falls back to the peer {fallback.peer!r}, which this service "
                    "does not run: ask for fewer than 4 questions at once, or for 'ias'",
                )
        mean_budget = target_mean_budget(float(p.auto_cost), n_max)
        reads_answers = seq.answers is not None
        state = seq.policy(
            samples, np.full(q_count, n_max), n_max, answers=reads_answers,
            majority=indexes_race(seq, p.rule),
        )  # fmt: skip
        reads_score = state.pick is not None
        floor = state.start(mean_budget, share)
        if shifted:  # exactly uniform best-of-N, as dprm solve
            floor, state.left = uniform_budgets(q_count, mean_budget, n_max), 0
        extra: dict[str, Any] = {
            "floor": [int(f) for f in floor],
            "floor_share": float(share),
            **({"falls_back_to": "uniform"} if shifted else {}),
        }
        have = np.array([len(d["scores"]) for d in drawn])

        def read(requests: list[tuple[int, int]]) -> list[tuple[float, Any, float | None]]:
            # as dprm solve's read: log r of each draw's estimate (and score), its answer key
            qs = np.array([q for q, _ in requests], dtype=np.int64)
            e = np.array([[drawn[q]["estimates"][j]] for q, j in requests], dtype=np.float64)
            s = np.array([[drawn[q]["scores"][j]] for q, j in requests], dtype=np.float64)
            log_r = seq.log_ratio(samples[qs], e, s if reads_score else None)[:, 0]
            keys = [
                answer_key(drawn[q]["answers"][j], j) if reads_answers else None
                for q, j in requests
            ]
            scores = s[:, 0].tolist() if reads_score else [None] * len(requests)
            return list(zip(log_r.tolist(), keys, scores, strict=True))

        def asking(requests: list[tuple[int, int]]) -> tuple[list[None], dict[str, Any]]:
            more = np.zeros(q_count, dtype=np.int64)
            for q, j in requests:
                more[q] = max(more[q], j + 1 - have[q])
            return [None] * q_count, {**extra, "draw_more": more.tolist()}

        floor_requests = [(q, j) for q in range(q_count) for j in range(int(floor[q]))]
        if any(j >= have[q] for q, j in floor_requests):
            return asking(floor_requests)
        floor_r: list[list[float]] = [[] for _ in range(q_count)]
        floor_a: list[list[Any]] = [[] for _ in range(q_count)]
        floor_s: list[list[Any]] = [[] for _ in range(q_count)]
        if floor_requests:
            for (q, _), (r, a, sc) in zip(floor_requests, read(floor_requests), strict=True):
                floor_r[q].append(r)
                floor_a[q].append(a)
                floor_s[q].append(sc)
        state.observe_floor(
            [np.asarray(r, dtype=np.float64) for r in floor_r],
            floor_a if reads_answers else None,
            floor_s if reads_score else None,
        )
        size = max(1, int(p.round_size))
        while picks := state.next_round(size):
            seen: dict[int, int] = {}
            requests = []
            for q in picks:  # a question picked k times gets its next k draws
                requests.append((q, int(state.n[q]) + seen.get(q, 0)))
                seen[q] = seen.get(q, 0) + 1
            if any(j >= have[q] for q, j in requests):
                return asking(requests)
            for (q, _), (r, a, sc) in zip(requests, read(requests), strict=True):
                state.observe(q, r, a, sc)
        return [int(n) for n in state.n], {**extra, "draw_more": [0] * q_count}
