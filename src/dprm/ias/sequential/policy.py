"""The ``auto-seq`` policy: its state over a batch of questions (:class:`SequentialPolicy`, the
posterior update and the index) and the fitted allocator (:class:`SequentialAuto`) that builds
it and replays it over draw orders."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from dprm.ias.constants import N_MAX
from dprm.ias.learnt.allocation import SelectionModel
from dprm.ias.sequential.pick import PickModel, pick_gain
from dprm.ias.sequential.posterior import (
    EPS,
    LOG_FACT,
    CandidateLikelihood,
    WrongAnswerModel,
    rising_log,
)
from dprm.ias.sequential.race import RACE_GROUPS, RACE_HORIZON, race_wins

_DRAWS = np.arange(1, 4097, dtype=np.float64)  # d = 1, 2, ... of the index's look-ahead


class SequentialAuto:
    """``auto-seq`` for one rule, fitted on a training BoN set.

    Args:
        model: the rule's selection-accuracy model g (fitted on the training pools).
        likelihood: the candidates' likelihood ratio (fitted on the training pools).
        answers: the wrong answers' CRP (None: the policy does not read answers).
        pick: a ``highest-*`` rule's pick model (:mod:`dprm.ias.sequential.pick`): the policy
            reads each draw's rule score, its likelihood ratio is ``pick.likelihood`` and its
            index the highest-score index; None: the fresh-draw curves (or the race).
    """

    def __init__(
        self,
        model: SelectionModel,
        likelihood: CandidateLikelihood,
        answers: WrongAnswerModel | None = None,
        pick: PickModel | None = None,
    ):
        self.model = model
        self.likelihood = likelihood
        self.answers = answers
        self.pick = pick

    @classmethod
    def fit(
        cls,
        model: SelectionModel,
        train_samples: np.ndarray,
        train_candidate: np.ndarray,
        train_correct: np.ndarray,
        train_valid: np.ndarray,
        train_answer: np.ndarray | None = None,
        train_score: np.ndarray | None = None,
    ) -> SequentialAuto:
        """Fit the likelihoods on training pools: prior samples [Q, M], candidate estimates,
        correctness, validity and (BoN contract v2) answer codes [Q, K]; without answers the
        policy reads the candidates' estimates only. ``train_score`` [Q, K] (a ``highest-*``
        rule's candidate weights): the policy also reads each draw's score and indexes the
        current pick (:class:`dprm.ias.sequential.pick.PickModel`)."""
        prior_mean = np.asarray(train_samples, dtype=np.float64).mean(axis=1)
        like = CandidateLikelihood.fit(prior_mean, train_candidate, train_correct, train_valid)
        answers = None
        if train_answer is not None:
            answers = WrongAnswerModel.fit(train_answer, train_correct, train_valid)
        pick = None
        if train_score is not None:
            pick = PickModel.fit(
                prior_mean, train_candidate, train_score, train_correct, train_valid
            )
        return cls(model, like, answers, pick)

    def policy(
        self,
        samples: np.ndarray,
        cap: np.ndarray,
        n_max: int = N_MAX,
        answers: bool = False,
        majority: bool = False,
    ) -> SequentialPolicy:
        """A fresh policy state over a batch of questions (no draws yet).

        Args:
            samples: [Q, M] prior samples of p (the calibrated distribution's quantiles).
            cap: [Q] the most draws each question may get (pool size or n_max).
            n_max: the selection model's largest n.
            answers: the draws' final answers will be observed (needs a model fitted with
                ``train_answer``).
            majority: the rule is a majority vote and answers are read: index the vote race
                of the current answer clusters (:meth:`SequentialPolicy.race_wins`), not the
                fresh-draw curves g.
        """
        samples = np.asarray(samples, dtype=np.float64)
        g = self.model.predict(samples)[..., :n_max]  # [Q, M, n_max]
        step = np.diff(g, axis=2)  # [Q, M, n_max - 1]: g_{n+1} - g_n at index n - 1
        log_p, log_q = np.log(np.clip(samples, EPS, 1)), np.log(np.clip(1 - samples, EPS, 1))
        cap = np.minimum(np.asarray(cap, dtype=np.int64), n_max)
        crp = None
        if majority and not answers:
            raise ValueError("the majority race index reads the draws' answers (answers=True)")
        if answers:
            if self.answers is None:
                raise ValueError("this auto-seq was fitted without answers (train_answer)")
            log_alpha = self.answers.log_alpha(samples)
            crp = (log_alpha, rising_log(np.exp(log_alpha), int(cap.max(initial=1))))
        pick = None if majority else self.pick
        return SequentialPolicy(step, log_p, log_q, cap, crp, race=majority, pick=pick)

    def log_ratio(
        self, samples: np.ndarray, candidate: np.ndarray, score: np.ndarray | None = None
    ) -> np.ndarray:
        """log r(e) [Q, K] of candidate estimates [Q, K] under priors ``samples`` [Q, M]; with
        the rule's scores ``score`` [Q, K] (a policy with a pick model), log r(e, s)."""
        prior_mean = np.asarray(samples, dtype=np.float64).mean(axis=1)
        if score is not None:
            if self.pick is None:
                raise ValueError("this auto-seq was fitted without scores (train_score)")
            return self.pick.likelihood.log_ratio(prior_mean, candidate, score)
        return self.likelihood.log_ratio(prior_mean, candidate)

    def budgets(
        self,
        samples: np.ndarray,
        candidate: np.ndarray,
        size: np.ndarray,
        orders: np.ndarray,
        mean_budgets: Sequence[float],
        floor_share: float | Sequence[float] = 0.0,
        n_max: int = N_MAX,
        round_size: int = 1,
        answer: np.ndarray | None = None,
        majority: bool = False,
        score: np.ndarray | None = None,
    ) -> np.ndarray:
        """The policy's budgets for every draw order and mean budget.

        Args:
            samples: [Q, M] prior samples of p (the calibrated distribution's quantiles).
            candidate: [Q, K] the candidates' calibrated estimates (candidate order).
            size: [Q] pool sizes.
            orders: [T, Q, K] draw orders.
            mean_budgets: increasing or not, each in [1, n_max].
            floor_share: every question first gets round(floor_share x mean budget) draws (at
                least 1); one share for every mean budget, or one per mean budget.
            round_size: draws chosen together before their estimates are read (1: the fully
                sequential policy; ``dprm solve --auto-seq --round-size``).
            answer: [Q, K] the candidates' answer codes (candidate order; BoN contract v2),
                read with each draw; None: estimates only.
            majority: the rule is a majority vote (needs ``answer``): the race index.
            score: [Q, K] the rule's candidate weights (candidate order; -inf padding), read
                with each draw; needed when the policy was fitted with a pick model.

        Returns:
            int64 [len(mean_budgets), T, Q] with sum over Q = round(mean budget x Q) (unless
            every question is at its cap).
        """
        q_count = len(samples)
        shares = np.broadcast_to(np.asarray(floor_share, dtype=np.float64), (len(mean_budgets),))
        cap = np.minimum(size, n_max).astype(np.int64)
        base = self.policy(samples, cap, n_max, answers=answer is not None, majority=majority)
        reads_score = base.pick is not None  # a highest-* rule's pick index
        if reads_score and score is None:
            raise ValueError("this auto-seq reads the draws' rule scores: pass score")
        log_r = self.log_ratio(samples, candidate, score if reads_score else None)  # [Q, K]
        out = np.zeros((len(mean_budgets), orders.shape[0], q_count), dtype=np.int64)
        for t in range(orders.shape[0]):
            r_in_order = np.take_along_axis(log_r, orders[t], axis=1)  # [Q, K]
            a_in_order = None if answer is None else np.take_along_axis(answer, orders[t], axis=1)
            s_in_order = np.take_along_axis(score, orders[t], axis=1) if reads_score else None
            for j, (mb, share) in enumerate(zip(mean_budgets, shares, strict=True)):
                policy = base.fresh()
                floor = policy.start(mb, float(share))
                policy.observe_floor(
                    [r_in_order[q, : floor[q]] for q in range(q_count)],
                    None if a_in_order is None else [a_in_order[q, : floor[q]] for q in range(q_count)],
                    None if s_in_order is None else [s_in_order[q, : floor[q]] for q in range(q_count)],
                )  # fmt: skip
                while picks := policy.next_round(round_size):
                    for q in picks:
                        n = policy.n[q]
                        policy.observe(
                            q, r_in_order[q, n], None if a_in_order is None else a_in_order[q, n],
                            None if s_in_order is None else s_in_order[q, n],
                        )  # fmt: skip
                out[j, t] = policy.n
        return out


def floor_draws(mean_budget: float, floor_share: float) -> int:
    """The uniform floor of ``auto`` / ``auto-seq``: round(floor_share x mean budget), at least
    1 and at most floor(mean budget)."""
    return max(1, min(int(round(floor_share * mean_budget)), int(np.floor(mean_budget))))


class SequentialPolicy:
    """The state of ``auto-seq`` over a batch of questions: draws so far and posteriors.

    The one implementation of the posterior update and the index, shared by the offline
    evaluator (:meth:`SequentialAuto.budgets`) and the live loop (``dprm solve --auto-seq``).
    Use: :meth:`start` (total budget and floor), :meth:`observe_floor`, then repeatedly
    :meth:`next_round` and :meth:`observe` each pick's log r(e) (and answer) in draw order.

    Within a round of several picks the estimates of the round's draws are not known yet: a
    question picked again is indexed at its next n with its current posterior weights (the
    posterior-expected gain given what has been read). With rounds of 1 this is the global
    greedy recomputed after every draw.

    Args:
        step: [Q, M, n_max - 1] g_{n+1}(p_m) - g_n(p_m).
        log_p, log_q: [Q, M] log p_m and log(1 - p_m) of the prior samples.
        cap: [Q] the most draws per question.
        crp: None (the draws' answers are not read), or (log alpha [Q, M], the log rising
            factorials of alpha [Q, M, n + 1] up to the largest cap) of the wrong answers' CRP
            at every prior sample (:class:`WrongAnswerModel`).
        race: (with ``crp``) the rule is a majority vote: the index is the race index
            (:meth:`race_wins`) instead of the posterior-expected curves ``step``.
        pick: a ``highest-*`` rule's pick model: the policy reads each draw's rule score and
            its index is the highest-score index (:func:`dprm.ias.sequential.pick.pick_gain`)
            instead of the curves ``step``.
    """

    def __init__(
        self,
        step: np.ndarray,
        log_p: np.ndarray,
        log_q: np.ndarray,
        cap: np.ndarray,
        crp: tuple[np.ndarray, np.ndarray] | None = None,
        race: bool = False,
        pick: PickModel | None = None,
    ):
        if race and crp is None:
            raise ValueError("the race index needs the answers' CRP (crp)")
        if race and pick is not None:
            raise ValueError("the race index (majority) and the pick index (highest-*) exclude")
        self.step, self.log_p, self.log_q = step, log_p, log_q
        self.cap = np.asarray(cap, dtype=np.int64)
        self.crp = crp
        self.race = race
        self.pick = pick
        q_count, m = log_p.shape
        # the race merges consecutive prior samples (sorted quantiles) into RACE_GROUPS groups
        self._group_start = np.unique(np.linspace(0, m, RACE_GROUPS + 1).astype(np.int64)[:-1])
        self._joint: list[np.ndarray | None] = [None] * q_count  # log P(answers, H = j | p_m)
        if race:
            self._race_p, self._race_alpha = np.exp(log_p), np.exp(crp[0])
        # the pick index: each question's top score so far, and its pick's log r and answer
        self._p = np.exp(log_p)
        self._top_score = np.full(q_count, -np.inf)
        self._top_r = np.zeros(q_count)
        self._top_answer: list = [None] * q_count
        self.n = np.zeros(q_count, dtype=np.int64)  # draws read so far
        self.log_w = np.zeros((q_count, m))  # log-likelihood of each prior sample
        self._weight = np.full((q_count, m), 1.0 / m)  # the posterior weights, normalised
        # with answers: per question, answer -> cluster index, and each cluster's size and
        # sum of its members' log r
        self._clusters: list[dict] = [{} for _ in range(q_count)]
        self._sizes: list[list[int]] = [[] for _ in range(q_count)]
        self._cluster_r: list[list[float]] = [[] for _ in range(q_count)]
        self.left = 0  # draws still to choose
        self._heap: list[tuple[float, int, int]] = []
        self._version = np.zeros(q_count, dtype=np.int64)
        self._pending = np.zeros(q_count, dtype=np.int64)

    @property
    def reads_answers(self) -> bool:
        return self.crp is not None

    def fresh(self) -> SequentialPolicy:
        """A new state on the same questions (the shared arrays are not copied)."""
        return SequentialPolicy(
            self.step, self.log_p, self.log_q, self.cap, self.crp, self.race, self.pick
        )

    def start(self, mean_budget: float, floor_share: float) -> np.ndarray:
        """Set the total round(mean_budget x Q) and return the floor's draws per question [Q]
        (to read with :meth:`observe_floor` before the first round)."""
        q_count = len(self.n)
        total = int(round(mean_budget * q_count))
        floor = np.minimum(np.full(q_count, floor_draws(mean_budget, floor_share)), self.cap)
        self.left = total - int(floor.sum())
        return floor.astype(np.int64)

    def _answer_log_lik(self, q: int) -> np.ndarray:
        """log P(answers, estimates | p_m) [M] of question q's draws (module docstring):
        log-sum over "cluster j is gold" (j = 1..c) and "no draw is correct"."""
        log_alpha, rising = self.crp[0][q], self.crp[1][q]
        lp, lq, n = self.log_p[q], self.log_q[q], int(self.n[q])
        sizes = np.asarray(self._sizes[q], dtype=np.int64)
        log_r = np.asarray(self._cluster_r[q], dtype=np.float64)
        k = len(sizes)
        fact = float(LOG_FACT[sizes].sum())
        terms = np.empty((k + 1, len(lp)))
        terms[0] = n * lq + k * log_alpha + fact - rising[:, n]  # no draw is correct
        if k:
            terms[1:] = (
                sizes[:, None] * (lp - lq)[None, :]
                + n * lq[None, :]
                + (k - 1) * log_alpha[None, :]
                + (fact - LOG_FACT[sizes] + log_r)[:, None]
                - rising[:, n - sizes].T
            )  # [k, M]: cluster j is the gold answer
        if self.race or self.pick is not None:  # the joint posterior of (gold cluster, p)
            self._joint[q] = terms
        top = terms.max(axis=0)
        return top + np.log(np.exp(terms - top).sum(axis=0))

    def _read(self, q: int, log_r: np.ndarray, answers: np.ndarray | None, scores=None) -> None:
        """Add draws (log r [d], answers [d] or None, rule scores [d] or None) to question q's
        posterior."""
        log_r = np.asarray(log_r, dtype=np.float64)
        if self.pick is not None:
            if scores is None:
                raise ValueError("this policy reads the draws' rule scores: pass each draw's score")
            self._track_pick(q, log_r, answers, scores)
        self.n[q] += len(log_r)
        if self.crp is None:
            # candidates independent given p: log(p r + 1 - p) summed over the draws
            self.log_w[q] += np.logaddexp(
                self.log_p[q][:, None] + log_r[None, :], self.log_q[q][:, None]
            ).sum(1)
        else:
            if answers is None:
                raise ValueError("this policy reads answers: pass each draw's answer")
            clusters, sizes, cluster_r = self._clusters[q], self._sizes[q], self._cluster_r[q]
            for a, r in zip(list(answers), log_r.tolist(), strict=True):
                j = clusters.setdefault(a, len(sizes))
                if j == len(sizes):
                    sizes.append(0)
                    cluster_r.append(0.0)
                sizes[j] += 1
                cluster_r[j] += r
            self.log_w[q] = self._answer_log_lik(q)
        w = np.exp(self.log_w[q] - self.log_w[q].max())
        self._weight[q] = w / w.sum()

    def _track_pick(self, q: int, log_r: np.ndarray, answers, scores) -> None:
        """Update question q's pick (its top-scored draw; ties: the first drawn) with draws
        about to be read: log r, answers (or None) and rule scores [d]."""
        for i, s in enumerate(np.asarray(scores, dtype=np.float64).tolist()):
            if s > self._top_score[q]:
                self._top_score[q], self._top_r[q] = s, log_r[i]
                self._top_answer[q] = None if answers is None else answers[i]

    def observe_floor(
        self,
        log_r: Sequence[np.ndarray],
        answers: Sequence[np.ndarray] | None = None,
        scores: Sequence[np.ndarray] | None = None,
    ) -> None:
        """Read every question's floor draws: ``log_r[q]`` [n_q] (and ``answers[q]`` [n_q],
        hashable answer keys, when the policy reads answers; ``scores[q]`` [n_q], the rule's
        scores, when it indexes the pick) in draw order."""
        for q, r in enumerate(log_r):
            self.n[q] = 0
            self.log_w[q] = 0.0
            self._clusters[q], self._sizes[q], self._cluster_r[q] = {}, [], []
            self._top_score[q], self._top_r[q], self._top_answer[q] = -np.inf, 0.0, None
            self._read(
                q, r, None if answers is None else answers[q], None if scores is None else scores[q]
            )
        self._heap = [(-self._index(q), q, 0) for q in range(len(self.n))]
        heapq.heapify(self._heap)

    def race_wins(self, q: int, horizon: int) -> np.ndarray:
        """Question q's posterior probability that a majority vote picks the gold answer after
        d = 0..horizon more draws [horizon + 1] (:func:`dprm.ias.sequential.race.race_wins`)."""
        return race_wins(
            self._joint[q], self._sizes[q], int(self.n[q]), self._race_p[q],
            self._race_alpha[q], self._group_start, horizon,
        )  # fmt: skip

    def _race_index(self, q: int) -> float:
        """The majority race's best gain per draw: max_d [V(k + d) - V(k)] / d with V the
        :meth:`race_wins` and k the question's draws chosen but not read yet (a round)."""
        pending = int(self._pending[q])
        horizon = min(RACE_HORIZON, int(self.cap[q] - self.n[q]))
        wins = self.race_wins(q, horizon)
        gains = (wins[pending + 1 :] - wins[pending]) / _DRAWS[: horizon - pending]
        return float(gains.max())

    def pick_right(self, q: int) -> np.ndarray:
        """pi(p_m) [M]: question q's current pick is correct given p_m and its draws (0 before
        any draw): from its likelihood ratio, or with answers the posterior that its answer
        cluster is the gold one (:mod:`dprm.ias.sequential.pick`)."""
        if self.n[q] == 0 or not np.isfinite(self._top_score[q]):
            return np.zeros_like(self._p[q])
        if self.crp is None:
            odds = self._p[q] * np.exp(self._top_r[q])
            return odds / (odds + 1 - self._p[q])
        terms = self._joint[q]  # [c + 1, M]: H = 0 (no draw correct), H = j (cluster j gold)
        j = self._clusters[q][self._top_answer[q]] + 1
        top = terms.max(axis=0)
        return np.exp(terms[j] - top) / np.exp(terms - top).sum(axis=0)

    def _pick_index(self, q: int) -> float:
        """The highest-score index: the posterior-expected gain in the pick's correctness
        from one more draw, after the question's draws chosen but not read yet
        (:func:`dprm.ias.sequential.pick.pick_gain`)."""
        exceed = self.pick.exceed(float(self._top_score[q]))
        return pick_gain(
            self._weight[q], self._p[q], self.pick_right(q), exceed, int(self._pending[q])
        )

    def _index(self, q: int) -> float:
        """The posterior-expected gain per draw of the best look-ahead from n draws:
        max_d E_post[g_{n+d}(p) - g_n(p)] / d over d = 1..cap - n, the slope of the expected
        curve's upper concave hull at n. For concave curves (``highest-*``) it is the one-step
        gain; a voting rule's curve is not concave (an even n can tie), and a one-step index
        would stop before the step that pays."""
        n = self.n[q] + self._pending[q]
        if n >= self.cap[q]:
            return -np.inf
        if self.race:
            return self._race_index(q)
        if self.pick is not None:
            return self._pick_index(q)
        steps = self._weight[q] @ self.step[q, :, n - 1 : self.cap[q] - 1]  # [cap - n]
        return float((np.cumsum(steps) / _DRAWS[: len(steps)]).max())

    def _push(self, q: int) -> None:
        self._version[q] += 1
        heapq.heappush(self._heap, (-self._index(q), q, int(self._version[q])))

    def next_round(self, size: int) -> list[int]:
        """Up to ``size`` next draws (question indices, a question may repeat), largest index
        first; [] once the budget is spent or every question is at its cap."""
        picks: list[int] = []
        while len(picks) < size and self.left > 0 and self._heap:
            neg, q, version = heapq.heappop(self._heap)
            if version != self._version[q]:
                continue  # superseded by a newer entry of q
            if neg == np.inf:
                heapq.heappush(self._heap, (neg, q, version))
                break  # every question is at its cap
            picks.append(q)
            self._pending[q] += 1
            self.left -= 1
            if len(picks) < size:  # q may be picked again in this round: index its next draw
                self._push(q)
            else:  # re-indexed when its draw is observed (observe pushes it)
                self._version[q] += 1
        return picks

    def observe(self, q: int, log_r: float, answer=None, score: float | None = None) -> None:
        """Read question ``q``'s next draw: its log r(e) (with a pick model, log r(e, s)),
        when the policy reads answers its final answer (any hashable key; equal keys are one
        answer) and, when it indexes the pick, its rule score."""
        self._read(
            q, np.array([log_r]), None if answer is None else [answer],
            None if score is None else [score],
        )  # fmt: skip
        self._pending[q] -= 1
        self._push(q)
