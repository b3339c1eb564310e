"""Sequential ``auto`` (``auto-seq``): allocation that also reads the candidates as they arrive.

``auto`` fixes every question's budget before drawing, from the calibrated distribution
Q(. | h) alone. ``auto-seq`` draws one candidate at a time and updates, per question, a
posterior over the question's success probability p:

* **prior**: the calibrated distribution, as its M mid-point quantiles p_1..p_M (equal weights);
* **likelihood** of a drawn candidate's calibrated estimate e (the calibrator on the candidate's
  own hidden state, BoN contract v2): with c ~ Bernoulli(p) its correctness,
  P(e | p) = p P(e | c = 1) + (1 - p) P(e | c = 0) ∝ p r(e) + (1 - p), where
  r(e) = P(e | c = 1) / P(e | c = 0) is the likelihood ratio of the estimate. Given the question's
  prior mean m, Bayes gives r(e) = odds(c = 1 | e, m) / odds(c = 1 | m); both odds are logistic
  regressions fitted on the *training* pools (:class:`CandidateLikelihood`). Candidates are taken
  as independent given (p, m);
* **index**: the expected gain in selected-answer accuracy of one more draw,
  Delta_i(n) = sum_m w_im [g_{n+1}(p_m) - g_n(p_m)], with g the rule's selection-accuracy model
  (:class:`dprm.ias.allocation.SelectionModel`, learnt on the training pools as for ``auto``)
  and w_i the posterior weights after the question's n draws.

The policy draws the next candidate for the question of largest index until the total budget
round(mean_budget x Q) is spent (exactly: every draw is one candidate), after a uniform floor of
``auto``'s floor share; a question stops at min(K_i, n_max). It is the global greedy on the
posterior-expected curves, recomputed after every draw: a batch of questions can run it live.

Evaluation: the accuracy depends on the order the candidates arrive in, so it is a seeded Monte
Carlo over ``trials`` uniformly random draw orders per question (the same orders for every
method: :func:`order_outcomes`), with the standard error over orders. Rules: the ``highest-*``
rules (the pick of the first n in an order is its top-weighted candidate).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dprm.ias.allocation import SelectionModel
from dprm.ias.constants import N_MAX

_EPS = 1e-6


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return np.log(p) - np.log1p(-p)


def _fit_logistic(x: np.ndarray, y: np.ndarray, ridge: float = 1e-3, steps: int = 50) -> np.ndarray:
    """Ridge-penalised logistic regression by Newton's method: x [n, d] (first column 1), y [n]
    -> coefficients [d] (deterministic)."""
    beta = np.zeros(x.shape[1])
    penalty = ridge * np.eye(x.shape[1])
    penalty[0, 0] = 0.0
    for _ in range(steps):
        eta = np.clip(x @ beta, -30, 30)
        mu = 1 / (1 + np.exp(-eta))
        grad = x.T @ (y - mu) - penalty @ beta
        hess = (x * (mu * (1 - mu))[:, None]).T @ x + penalty
        step = np.linalg.solve(hess, grad)
        beta += step
        if np.abs(step).max() < 1e-10:
            break
    return beta


@dataclass
class CandidateLikelihood:
    """log r(e) = logit P(c = 1 | e, m) - logit P(c = 1 | m), fitted on training pools.

    Attributes:
        with_estimate: [3] coefficients of (1, logit m, logit e).
        prior_only: [2] coefficients of (1, logit m).
    """

    with_estimate: np.ndarray
    prior_only: np.ndarray

    @classmethod
    def fit(
        cls, prior_mean: np.ndarray, estimate: np.ndarray, correct: np.ndarray, valid: np.ndarray
    ) -> CandidateLikelihood:
        """Fit on training pools.

        Args:
            prior_mean: [Q] the questions' calibrated prior mean m.
            estimate: [Q, K] the candidates' calibrated estimates e.
            correct: [Q, K] 0/1 correctness.
            valid: [Q, K] real candidates (not padding).
        """
        lm = np.broadcast_to(_logit(prior_mean)[:, None], estimate.shape)[valid]
        le = _logit(estimate)[valid]
        y = np.asarray(correct, dtype=np.float64)[valid]
        ones = np.ones_like(lm)
        return cls(
            _fit_logistic(np.column_stack([ones, lm, le]), y),
            _fit_logistic(np.column_stack([ones, lm]), y),
        )

    def log_ratio(self, prior_mean: np.ndarray, estimate: np.ndarray) -> np.ndarray:
        """log r(e) [Q, K] for prior means [Q] and candidate estimates [Q, K]."""
        lm = _logit(prior_mean)[:, None]
        le = _logit(estimate)
        a, b = self.with_estimate, self.prior_only
        return (a[0] + a[1] * lm + a[2] * le) - (b[0] + b[1] * lm)


def draw_orders(size: np.ndarray, trials: int, seed: int) -> np.ndarray:
    """Uniformly random draw orders int64 [T, Q, K] (positions >= K_i of a question are its
    padding, placed last); question i's orders from ``default_rng([seed, i, 41])``."""
    q_count, k = len(size), int(size.max())
    out = np.empty((trials, q_count, k), dtype=np.int64)
    for q in range(q_count):
        rng = np.random.default_rng([seed, q, 41])
        n = int(size[q])
        out[:, q, :n] = np.argsort(rng.random((trials, n)), axis=1)
        out[:, q, n:] = np.arange(n, k)
    return out


def order_outcomes(weight: np.ndarray, correct: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Correctness of the ``highest`` pick after each n = 1..K draws of each order.

    Args:
        weight: [Q, K] the rule's candidate weights (-inf padding).
        correct: [Q, K] 0/1.
        orders: [T, Q, K] draw orders (:func:`draw_orders`).

    Returns:
        float32 [T, Q, K]: the pick is the first-drawn candidate of the largest weight among the
        first n (beyond K_i: the whole pool's pick).
    """
    q_idx = np.arange(weight.shape[0])[None, :, None]
    w = weight[q_idx, orders]  # [T, Q, K] weights in draw order
    c = correct[q_idx, orders]
    best = np.maximum.accumulate(w, axis=2)
    # position of the running maximum: the last position where w reached the running max first
    is_new = np.concatenate([np.ones_like(w[..., :1], dtype=bool), w[..., 1:] > best[..., :-1]], 2)
    pos = np.where(is_new, np.arange(w.shape[2])[None, None, :], 0)
    pos = np.maximum.accumulate(pos, axis=2)
    return np.take_along_axis(c, pos, axis=2).astype(np.float32)


def outcome_accuracy(outcomes: np.ndarray, budgets: np.ndarray) -> tuple[float, float, np.ndarray]:
    """(mean accuracy, standard error over orders, per-order accuracy [T]) of budgets [T, Q] or
    [Q] on :func:`order_outcomes` [T, Q, K] (budgets above K_i read the whole pool)."""
    t_count, q_count, k = outcomes.shape
    b = np.broadcast_to(np.asarray(budgets, dtype=np.int64), (t_count, q_count))
    n = np.clip(b, 1, k) - 1
    per = outcomes[np.arange(t_count)[:, None], np.arange(q_count)[None, :], n].mean(axis=1)
    per = per.astype(np.float64)
    se = per.std(ddof=1) / np.sqrt(t_count) if t_count > 1 else float("nan")
    return float(per.mean()), float(se), per


class SequentialAuto:
    """``auto-seq`` for one ``highest-*`` rule, fitted on a training BoN set.

    Args:
        model: the rule's selection-accuracy model g (fitted on the training pools).
        likelihood: the candidates' likelihood ratio (fitted on the training pools).
    """

    def __init__(self, model: SelectionModel, likelihood: CandidateLikelihood):
        self.model = model
        self.likelihood = likelihood

    @classmethod
    def fit(
        cls,
        model: SelectionModel,
        train_samples: np.ndarray,
        train_candidate: np.ndarray,
        train_correct: np.ndarray,
        train_valid: np.ndarray,
    ) -> SequentialAuto:
        """Fit the likelihood on training pools: prior samples [Q, M], candidate estimates,
        correctness and validity [Q, K]."""
        prior_mean = np.asarray(train_samples, dtype=np.float64).mean(axis=1)
        like = CandidateLikelihood.fit(prior_mean, train_candidate, train_correct, train_valid)
        return cls(model, like)

    def policy(self, samples: np.ndarray, cap: np.ndarray, n_max: int = N_MAX) -> SequentialPolicy:
        """A fresh policy state over a batch of questions (no draws yet).

        Args:
            samples: [Q, M] prior samples of p (the calibrated distribution's quantiles).
            cap: [Q] the most draws each question may get (pool size or n_max).
            n_max: the selection model's largest n.
        """
        samples = np.asarray(samples, dtype=np.float64)
        g = self.model.predict(samples)[..., :n_max]  # [Q, M, n_max]
        step = np.diff(g, axis=2)  # [Q, M, n_max - 1]: g_{n+1} - g_n at index n - 1
        log_p, log_q = np.log(np.clip(samples, _EPS, 1)), np.log(np.clip(1 - samples, _EPS, 1))
        cap = np.minimum(np.asarray(cap, dtype=np.int64), n_max)
        return SequentialPolicy(step, log_p, log_q, cap)

    def log_ratio(self, samples: np.ndarray, candidate: np.ndarray) -> np.ndarray:
        """log r(e) [Q, K] of candidate estimates [Q, K] under priors ``samples`` [Q, M]."""
        prior_mean = np.asarray(samples, dtype=np.float64).mean(axis=1)
        return self.likelihood.log_ratio(prior_mean, candidate)

    def budgets(
        self,
        samples: np.ndarray,
        candidate: np.ndarray,
        size: np.ndarray,
        orders: np.ndarray,
        mean_budgets: Sequence[float],
        floor_share: float = 0.0,
        n_max: int = N_MAX,
        round_size: int = 1,
    ) -> np.ndarray:
        """The policy's budgets for every draw order and mean budget.

        Args:
            samples: [Q, M] prior samples of p (the calibrated distribution's quantiles).
            candidate: [Q, K] the candidates' calibrated estimates (candidate order).
            size: [Q] pool sizes.
            orders: [T, Q, K] draw orders.
            mean_budgets: increasing or not, each in [1, n_max].
            floor_share: every question first gets round(floor_share x mean budget) draws (at
                least 1).
            round_size: draws chosen together before their estimates are read (1: the fully
                sequential policy; ``dprm solve --auto-seq --round-size``).

        Returns:
            int64 [len(mean_budgets), T, Q] with sum over Q = round(mean budget x Q) (unless
            every question is at its cap).
        """
        q_count = len(samples)
        cap = np.minimum(size, n_max).astype(np.int64)
        base = self.policy(samples, cap, n_max)
        log_r = self.log_ratio(samples, candidate)  # [Q, K]
        out = np.zeros((len(mean_budgets), orders.shape[0], q_count), dtype=np.int64)
        for t in range(orders.shape[0]):
            r_in_order = np.take_along_axis(log_r, orders[t], axis=1)  # [Q, K]
            for j, mb in enumerate(mean_budgets):
                policy = base.fresh()
                floor = policy.start(mb, floor_share)
                policy.observe_floor([r_in_order[q, : floor[q]] for q in range(q_count)])
                while picks := policy.next_round(round_size):
                    for q in picks:
                        policy.observe(q, r_in_order[q, policy.n[q]])
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
    :meth:`next_round` and :meth:`observe` each pick's log r(e) in draw order.

    Within a round of several picks the estimates of the round's draws are not known yet: a
    question picked again is indexed at its next n with its current posterior weights (the
    posterior-expected gain given what has been read). With rounds of 1 this is the global
    greedy recomputed after every draw.

    Args:
        step: [Q, M, n_max - 1] g_{n+1}(p_m) - g_n(p_m).
        log_p, log_q: [Q, M] log p_m and log(1 - p_m) of the prior samples.
        cap: [Q] the most draws per question.
    """

    def __init__(self, step: np.ndarray, log_p: np.ndarray, log_q: np.ndarray, cap: np.ndarray):
        self.step, self.log_p, self.log_q = step, log_p, log_q
        self.cap = np.asarray(cap, dtype=np.int64)
        q_count, m = log_p.shape
        self.n = np.zeros(q_count, dtype=np.int64)  # draws read so far
        self.log_w = np.zeros((q_count, m))  # log-likelihood of each prior sample
        self.left = 0  # draws still to choose
        self._heap: list[tuple[float, int, int]] = []
        self._version = np.zeros(q_count, dtype=np.int64)
        self._pending = np.zeros(q_count, dtype=np.int64)

    def fresh(self) -> SequentialPolicy:
        """A new state on the same questions (the shared arrays are not copied)."""
        return SequentialPolicy(self.step, self.log_p, self.log_q, self.cap)

    def start(self, mean_budget: float, floor_share: float) -> np.ndarray:
        """Set the total round(mean_budget x Q) and return the floor's draws per question [Q]
        (to read with :meth:`observe_floor` before the first round)."""
        q_count = len(self.n)
        total = int(round(mean_budget * q_count))
        floor = np.minimum(np.full(q_count, floor_draws(mean_budget, floor_share)), self.cap)
        self.left = total - int(floor.sum())
        return floor.astype(np.int64)

    def observe_floor(self, log_r: Sequence[np.ndarray]) -> None:
        """Read every question's floor draws: ``log_r[q]`` [n_q] in draw order."""
        for q, r in enumerate(log_r):
            r = np.asarray(r, dtype=np.float64)
            self.n[q] = len(r)
            # log(p r + 1 - p) summed over the draws, for every prior sample at once
            self.log_w[q] = np.logaddexp(
                self.log_p[q][:, None] + r[None, :], self.log_q[q][:, None]
            ).sum(1)
        self._heap = [(-self._index(q), q, 0) for q in range(len(self.n))]
        heapq.heapify(self._heap)

    def _index(self, q: int) -> float:
        n = self.n[q] + self._pending[q]
        if n >= self.cap[q]:
            return -np.inf
        w = np.exp(self.log_w[q] - self.log_w[q].max())
        return float(w @ self.step[q, :, n - 1] / w.sum())

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
            self._push(q)
        return picks

    def observe(self, q: int, log_r: float) -> None:
        """Read the estimate of question ``q``'s next draw (log r(e)): its posterior update."""
        self.log_w[q] += np.logaddexp(self.log_p[q] + log_r, self.log_q[q])
        self.n[q] += 1
        self._pending[q] -= 1
        self._push(q)
