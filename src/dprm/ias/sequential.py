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
* **likelihood of the drawn final answers** (BoN contract v2 sets): a correct candidate states
  the gold answer, a wrong one a wrong value from a Chinese-restaurant process (CRP) whose
  concentration alpha(p) = exp(a + b logit p) is fitted on the *training* pools
  (:class:`WrongAnswerModel`; the CRP is the law of draws from a GEM / Dirichlet-process answer
  distribution). The answers of n draws form clusters of sizes s_1..s_c; the hypotheses are
  "cluster j is the gold answer" (j = 1..c) and "no draw is correct" (j = 0), so
  P(answers, e | p) ∝ sum_j p^{s_j} (1 - p)^{n - s_j} CRP_alpha(p)(the other clusters)
  prod_{i in j} r(e_i). Agreement among draws is evidence of a large p, scattered answers of a
  small one, whatever the PRM: this is what the calibrated prior of a weak PRM cannot say.
  Without answers (contract v1) the candidates are independent given p, as above;
* **index**: the expected gain in selected-answer accuracy per draw of the best look-ahead,
  Delta_i(n) = max_d sum_m w_im [g_{n+d}(p_m) - g_n(p_m)] / d, with g the rule's
  selection-accuracy model (:class:`dprm.ias.allocation.SelectionModel`, learnt on the training
  pools as for ``auto``) and w_i the posterior weights after the question's n draws (for the
  concave ``highest-*`` curves, d = 1);
* **majority with answers**: the index reads the vote's state, not the fresh-draw curves g:
  max_d [V(d) - V(0)] / d with V(d) the posterior probability that the vote is right after d
  more draws in a race between the gold cluster and its largest rival
  (:meth:`SequentialPolicy.race_wins`). The curves cannot tell a settled vote (5 of 5 agree)
  from a contested one (2-2); the race can.

The policy draws the next candidate for the question of largest index until the total budget
round(mean_budget x Q) is spent (exactly: every draw is one candidate), after a uniform floor
(its share chosen by the caller: :func:`dprm.ias.pays.sequential_floor_shares`); a question stops
at min(K_i, n_max). It is the global greedy on the posterior-expected curves, recomputed after
every draw: a batch of questions can run it live.

Evaluation: the accuracy depends on the order the candidates arrive in, so it is a seeded Monte
Carlo over ``trials`` uniformly random draw orders per question (the same orders for every
method: :func:`draw_orders`), with the standard error over orders. Rules: ``highest-*`` (the
pick of the first n in an order is its top-weighted candidate: :func:`order_outcomes`) and the
answer-level votes (:func:`vote_order_outcomes`).
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dprm.ias.allocation import SelectionModel
from dprm.ias.constants import N_MAX
from dprm.ias.rules import vote_in_order

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


def rising_log(alpha: np.ndarray, n_max: int) -> np.ndarray:
    """log of the rising factorial alpha (alpha + 1) ... (alpha + t - 1) for t = 0..n_max:
    [..., n_max + 1] for alpha [...] (= lgamma(alpha + t) - lgamma(alpha), without lgamma)."""
    alpha = np.asarray(alpha, dtype=np.float64)
    terms = np.log(alpha[..., None] + np.arange(n_max))
    return np.concatenate([np.zeros((*alpha.shape, 1)), np.cumsum(terms, axis=-1)], axis=-1)


_DRAWS = np.arange(1, 4097, dtype=np.float64)  # d = 1, 2, ... of the index's look-ahead

#: the majority race index's look-ahead (draws) and the groups of consecutive prior samples it
#: merges (M = 100 samples -> 10 groups: the race's win probability is smooth in p)
RACE_HORIZON = 16
RACE_GROUPS = 10
_RACE_GRID = 41  # grid points of the race table's up and down probabilities


@functools.cache
def _race_table() -> np.ndarray:
    """P(L + shift > 0) + P(L + shift = 0) / 2 of a trinomial walk after d = 0..RACE_HORIZON
    steps (+1 with probability u, -1 with v, else 0), for leads L = -H - 1..H + 1 (H the
    horizon) and (u, v) on a ``_RACE_GRID`` x ``_RACE_GRID`` grid of [0, 1]^2 (points with
    u + v > 1 are rescaled to u + v = 1, only interpolation near that edge reads them).

    Returns:
        [H + 1, 2 H + 3, G, G].
    """
    horizon = RACE_HORIZON
    grid = np.linspace(0.0, 1.0, _RACE_GRID)
    up, down = np.meshgrid(grid, grid, indexing="ij")
    total = np.maximum(up + down, 1.0)
    up, down = up / total, down / total
    stay = 1 - up - down
    dist = np.zeros((horizon + 1, _RACE_GRID, _RACE_GRID, 2 * horizon + 1))  # shift -H..H
    dist[0, :, :, horizon] = 1.0
    for d in range(1, horizon + 1):
        prev = dist[d - 1]
        dist[d] = prev * stay[..., None]
        dist[d, ..., 1:] += prev[..., :-1] * up[..., None]
        dist[d, ..., :-1] += prev[..., 1:] * down[..., None]
    lead = np.arange(-horizon - 1, horizon + 2)[:, None] + np.arange(-horizon, horizon + 1)
    credit = (lead > 0) + 0.5 * (lead == 0)  # [leads, shifts]
    return np.einsum("duvx,lx->dluv", dist, credit)


#: log (t - 1)! for cluster sizes t = 0..4096 (index t; t = 0 unused)
_LOG_FACT = np.concatenate([[0.0, 0.0], np.cumsum(np.log(np.arange(1, 4096)))])


@dataclass
class WrongAnswerModel:
    """How wrong answers collide: a CRP with concentration log alpha(p) = intercept + slope
    logit p, fitted on training pools by maximum likelihood.

    The CRP's log-probability of a sequence of m wrong answers in k clusters of sizes t_i is
    k log alpha + sum_i log (t_i - 1)! - log[alpha (alpha + 1) ... (alpha + m - 1)]; it is
    concave in log alpha, so Newton's method on (intercept, slope) converges (deterministic).

    Attributes:
        intercept, slope: of log alpha in logit p.
    """

    intercept: float
    slope: float

    def log_alpha(self, p: np.ndarray) -> np.ndarray:
        """log alpha(p) for p [...] (p clipped to [0.005, 0.995])."""
        return self.intercept + self.slope * _logit(np.clip(p, 0.005, 0.995))

    @classmethod
    def fit(
        cls, answer: np.ndarray, correct: np.ndarray, valid: np.ndarray, steps: int = 50
    ) -> WrongAnswerModel:
        """Fit on training pools: answer codes, 0/1 correctness and validity [Q, K].

        A question's p is its pool's share of correct candidates (clipped to half a candidate
        from 0 and 1); only its wrong candidates' answers enter the likelihood. With no
        question of two or more wrong answers the model is alpha = 1 everywhere.
        """
        valid = np.asarray(valid, dtype=bool)
        size = valid.sum(axis=1)
        share = np.where(valid, correct, 0).sum(axis=1) / np.maximum(size, 1)
        half = 0.5 / np.maximum(size, 1)
        x = _logit(np.clip(share, half, 1 - half))
        wrong_n, clusters = [], []
        for q in range(len(size)):
            codes = np.asarray(answer[q])[valid[q] & (np.asarray(correct[q]) < 0.5)]
            wrong_n.append(len(codes))
            clusters.append(len(np.unique(codes)))  # sum log (t_i - 1)! does not depend on alpha
        m, k = np.asarray(wrong_n), np.asarray(clusters, dtype=np.float64)
        keep = m >= 2
        if not keep.any():
            return cls(0.0, 0.0)
        x, m, k = x[keep], m[keep], k[keep]
        design = np.column_stack([np.ones_like(x), x])
        theta = np.zeros(2)
        steps_i = np.arange(int(m.max()))[None, :]
        inside = steps_i < m[:, None]  # the terms i = 0..m-1 of each question
        for _ in range(steps):
            alpha = np.exp(np.clip(design @ theta, -20, 20))
            frac = np.where(inside, alpha[:, None] / (alpha[:, None] + steps_i), 0.0)
            # d/du of k u - sum_i log(e^u + i), u = log alpha, and its (negative) curvature
            grad_u = k - frac.sum(axis=1)
            curv_u = (frac * (1 - frac)).sum(axis=1) + 1e-9
            grad = design.T @ grad_u - 1e-6 * theta
            hess = (design * curv_u[:, None]).T @ design + 1e-6 * np.eye(2)
            step = np.linalg.solve(hess, grad)
            step *= min(1.0, 2.0 / max(np.abs(step).max(), 1e-300))  # damped far from the optimum
            theta += step
            if np.abs(step).max() < 1e-10:
                break
        return cls(float(theta[0]), float(theta[1]))


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


def vote_order_outcomes(
    answer: np.ndarray,
    weight: np.ndarray,
    group_correct: np.ndarray,
    size: np.ndarray,
    orders: np.ndarray,
    seed: int,
) -> np.ndarray:
    """Correctness of an answer-level vote (``weighted-*``, ``majority``) after each n = 1..K
    draws of each order, as :func:`order_outcomes` for the ``highest-*`` rules.

    Args:
        answer: int [Q, K] answer-group codes (-1 padding).
        weight: [Q, K] vote weights (1 for majority; padding ignored).
        group_correct: [Q, K] correctness of each answer group
            (:meth:`dprm.ias.rules.Candidates.answer_correct`).
        size: [Q] pool sizes.
        orders: [T, Q, K] draw orders (:func:`draw_orders`).
        seed: seed of the uniform tie-break (question q: ``default_rng([seed, q, 43])``).

    Returns:
        float32 [T, Q, K] (beyond K_i: the whole pool's pick).
    """
    t_count, q_count, k_max = orders.shape
    out = np.zeros((t_count, q_count, k_max), dtype=np.float32)
    for q in range(q_count):
        k = int(size[q])
        rng = np.random.default_rng([seed, q, 43])
        won = vote_in_order(answer[q, :k], weight[q, :k], group_correct[q], orders[:, q, :k], rng)
        out[:, q, :k] = won
        out[:, q, k:] = won[:, k - 1 : k]
    return out


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
    """``auto-seq`` for one rule, fitted on a training BoN set.

    Args:
        model: the rule's selection-accuracy model g (fitted on the training pools).
        likelihood: the candidates' likelihood ratio (fitted on the training pools).
    """

    def __init__(
        self,
        model: SelectionModel,
        likelihood: CandidateLikelihood,
        answers: WrongAnswerModel | None = None,
    ):
        self.model = model
        self.likelihood = likelihood
        self.answers = answers

    @classmethod
    def fit(
        cls,
        model: SelectionModel,
        train_samples: np.ndarray,
        train_candidate: np.ndarray,
        train_correct: np.ndarray,
        train_valid: np.ndarray,
        train_answer: np.ndarray | None = None,
    ) -> SequentialAuto:
        """Fit the likelihoods on training pools: prior samples [Q, M], candidate estimates,
        correctness, validity and (BoN contract v2) answer codes [Q, K]; without answers the
        policy reads the candidates' estimates only."""
        prior_mean = np.asarray(train_samples, dtype=np.float64).mean(axis=1)
        like = CandidateLikelihood.fit(prior_mean, train_candidate, train_correct, train_valid)
        answers = None
        if train_answer is not None:
            answers = WrongAnswerModel.fit(train_answer, train_correct, train_valid)
        return cls(model, like, answers)

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
        log_p, log_q = np.log(np.clip(samples, _EPS, 1)), np.log(np.clip(1 - samples, _EPS, 1))
        cap = np.minimum(np.asarray(cap, dtype=np.int64), n_max)
        crp = None
        if majority and not answers:
            raise ValueError("the majority race index reads the draws' answers (answers=True)")
        if answers:
            if self.answers is None:
                raise ValueError("this auto-seq was fitted without answers (train_answer)")
            log_alpha = self.answers.log_alpha(samples)
            crp = (log_alpha, rising_log(np.exp(log_alpha), int(cap.max(initial=1))))
        return SequentialPolicy(step, log_p, log_q, cap, crp, race=majority)

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
        floor_share: float | Sequence[float] = 0.0,
        n_max: int = N_MAX,
        round_size: int = 1,
        answer: np.ndarray | None = None,
        majority: bool = False,
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

        Returns:
            int64 [len(mean_budgets), T, Q] with sum over Q = round(mean budget x Q) (unless
            every question is at its cap).
        """
        q_count = len(samples)
        shares = np.broadcast_to(np.asarray(floor_share, dtype=np.float64), (len(mean_budgets),))
        cap = np.minimum(size, n_max).astype(np.int64)
        base = self.policy(samples, cap, n_max, answers=answer is not None, majority=majority)
        log_r = self.log_ratio(samples, candidate)  # [Q, K]
        out = np.zeros((len(mean_budgets), orders.shape[0], q_count), dtype=np.int64)
        for t in range(orders.shape[0]):
            r_in_order = np.take_along_axis(log_r, orders[t], axis=1)  # [Q, K]
            a_in_order = None if answer is None else np.take_along_axis(answer, orders[t], axis=1)
            for j, (mb, share) in enumerate(zip(mean_budgets, shares, strict=True)):
                policy = base.fresh()
                floor = policy.start(mb, float(share))
                policy.observe_floor(
                    [r_in_order[q, : floor[q]] for q in range(q_count)],
                    None if a_in_order is None else [a_in_order[q, : floor[q]] for q in range(q_count)],
                )  # fmt: skip
                while picks := policy.next_round(round_size):
                    for q in picks:
                        n = policy.n[q]
                        policy.observe(
                            q, r_in_order[q, n], None if a_in_order is None else a_in_order[q, n]
                        )
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
    """

    def __init__(
        self,
        step: np.ndarray,
        log_p: np.ndarray,
        log_q: np.ndarray,
        cap: np.ndarray,
        crp: tuple[np.ndarray, np.ndarray] | None = None,
        race: bool = False,
    ):
        if race and crp is None:
            raise ValueError("the race index needs the answers' CRP (crp)")
        self.step, self.log_p, self.log_q = step, log_p, log_q
        self.cap = np.asarray(cap, dtype=np.int64)
        self.crp = crp
        self.race = race
        q_count, m = log_p.shape
        # the race merges consecutive prior samples (sorted quantiles) into RACE_GROUPS groups
        self._group_start = np.unique(np.linspace(0, m, RACE_GROUPS + 1).astype(np.int64)[:-1])
        self._joint: list[np.ndarray | None] = [None] * q_count  # log P(answers, H = j | p_m)
        if race:
            self._race_p, self._race_alpha = np.exp(log_p), np.exp(crp[0])
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
        return SequentialPolicy(self.step, self.log_p, self.log_q, self.cap, self.crp, self.race)

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
        fact = float(_LOG_FACT[sizes].sum())
        terms = np.empty((k + 1, len(lp)))
        terms[0] = n * lq + k * log_alpha + fact - rising[:, n]  # no draw is correct
        if k:
            terms[1:] = (
                sizes[:, None] * (lp - lq)[None, :]
                + n * lq[None, :]
                + (k - 1) * log_alpha[None, :]
                + (fact - _LOG_FACT[sizes] + log_r)[:, None]
                - rising[:, n - sizes].T
            )  # [k, M]: cluster j is the gold answer
        if self.race:  # the race index reads the joint posterior of (gold cluster, p)
            self._joint[q] = terms
        top = terms.max(axis=0)
        return top + np.log(np.exp(terms - top).sum(axis=0))

    def _read(self, q: int, log_r: np.ndarray, answers: np.ndarray | None) -> None:
        """Add draws (log r [d], answers [d] or None) to question q's posterior."""
        log_r = np.asarray(log_r, dtype=np.float64)
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

    def observe_floor(
        self, log_r: Sequence[np.ndarray], answers: Sequence[np.ndarray] | None = None
    ) -> None:
        """Read every question's floor draws: ``log_r[q]`` [n_q] (and ``answers[q]`` [n_q],
        hashable answer keys, when the policy reads answers) in draw order."""
        for q, r in enumerate(log_r):
            self.n[q] = 0
            self.log_w[q] = 0.0
            self._clusters[q], self._sizes[q], self._cluster_r[q] = {}, [], []
            self._read(q, r, None if answers is None else answers[q])
        self._heap = [(-self._index(q), q, 0) for q in range(len(self.n))]
        heapq.heapify(self._heap)

    def race_wins(self, q: int, horizon: int) -> np.ndarray:
        """Question q's posterior probability that a majority vote picks the gold answer after
        d = 0..horizon more draws [horizon + 1], in the race model of the vote.

        The current answers form clusters of sizes s_1..s_c; under the hypothesis "cluster j
        is gold" (j = 0: the gold answer is not drawn yet, a cluster of size 0) with success
        probability p, the vote is a race between the gold cluster and its largest rival
        (size r_j = max_{i != j} s_i): each further draw adds one to the gold cluster with
        probability p, one to the rival with probability (1 - p) max(r_j, 1) / (w_j + alpha(p))
        (a wrong draw joins the rival in the CRP; w_j the wrong draws so far) and otherwise
        leaves the lead L_j = s_j - r_j as it is. The vote is right when the lead is positive,
        and with probability 1/2 when it is 0 (the uniform tie-break of two). The lead's law
        after d draws is a trinomial walk (tabulated once: :func:`_race_table`), summed over the
        hypotheses' joint posterior (consecutive prior samples merged into ``RACE_GROUPS``
        groups). The
        race ignores rivals other than the largest and the urn's reinforcement: an index, not
        the vote's exact law, but it knows what the curves g cannot: that 5 of 5 agreeing
        draws have settled the vote, and that a 2-2 tie is where a draw pays.
        """
        terms = self._joint[q]  # [c + 1, M]
        post = np.exp(terms - terms.max())
        post /= post.sum()
        sizes = np.asarray(self._sizes[q], dtype=np.float64)
        n = float(self.n[q])
        ordered = np.sort(sizes)[::-1]
        top = ordered[0] if len(ordered) else 0.0
        second = ordered[1] if len(ordered) > 1 else 0.0
        rival = np.concatenate([[top], np.where(sizes < top, top, second)])  # [c + 1]
        lead = np.concatenate([[-top], sizes - rival[1:]])
        wrong = np.concatenate([[n], n - sizes])
        p, alpha = self._race_p[q], self._race_alpha[q]  # [M]
        share = np.minimum(np.maximum(rival, 1.0)[:, None] / (wrong[:, None] + alpha), 1.0)
        down = (1 - p) * share  # [c + 1, M]
        # merge consecutive samples: weights, and the weighted means of the step probabilities
        starts = self._group_start
        weight = np.add.reduceat(post, starts, axis=1)  # [c + 1, G]
        safe = np.maximum(weight, 1e-300)
        up = np.add.reduceat(post * p, starts, axis=1) / safe
        down = np.add.reduceat(post * down, starts, axis=1) / safe
        keep = weight > 1e-6
        weight, up, down = weight[keep], up[keep], down[keep]
        lead = np.broadcast_to(lead[:, None], keep.shape)[keep]
        # the trinomial walk's win probabilities, tabulated on a grid of (up, down) and
        # interpolated bilinearly (they are smooth in both); leads beyond +-(horizon + 1) are
        # decided within the look-ahead
        table = _race_table()  # [RACE_HORIZON + 1, leads, G, G]
        last = _RACE_GRID - 1
        lead_at = np.clip(lead.astype(np.int64), -RACE_HORIZON - 1, RACE_HORIZON + 1)
        lead_at = lead_at + RACE_HORIZON + 1
        u, v = up * last, down * last
        u0, v0 = np.minimum(u.astype(np.int64), last - 1), np.minimum(v.astype(np.int64), last - 1)
        du, dv = u - u0, v - v0
        corner_u = np.stack([u0, u0 + 1, u0, u0 + 1])  # [4, h]: the cell's four corners
        corner_v = np.stack([v0, v0, v0 + 1, v0 + 1])
        corner_w = np.stack([(1 - du) * (1 - dv), du * (1 - dv), (1 - du) * dv, du * dv]) * weight
        wins = np.einsum("dch,ch->d", table[:, lead_at[None, :], corner_u, corner_v], corner_w)
        return wins[: horizon + 1]

    def _race_index(self, q: int) -> float:
        """The majority race's best gain per draw: max_d [V(k + d) - V(k)] / d with V the
        :meth:`race_wins` and k the question's draws chosen but not read yet (a round)."""
        pending = int(self._pending[q])
        horizon = min(RACE_HORIZON, int(self.cap[q] - self.n[q]))
        wins = self.race_wins(q, horizon)
        gains = (wins[pending + 1 :] - wins[pending]) / _DRAWS[: horizon - pending]
        return float(gains.max())

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

    def observe(self, q: int, log_r: float, answer=None) -> None:
        """Read question ``q``'s next draw: its log r(e) and, when the policy reads answers,
        its final answer (any hashable key; equal keys are one answer)."""
        self._read(q, np.array([log_r]), None if answer is None else [answer])
        self._pending[q] -= 1
        self._push(q)
