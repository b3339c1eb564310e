"""The highest-score index of ``auto-seq``: what one more draw is worth to a question whose
answer is its top-scored draw so far (``highest-*`` rules).

The fresh-draw curves g value a question by its success probability p alone: after n draws
they cannot tell a question whose current pick has a top score from one whose pick is weak.
Under a ``highest-*`` rule one more draw changes the answer only when it outscores the current
pick. With s* the pick's score and c* its correctness, and (s', c') the next draw's,

    gain(p) = P(s' > s*, c' = 1, c* = 0 | p) - P(s' > s*, c' = 0, c* = 1 | p)
            = (1 - pi(p)) p A_1(s*) - pi(p) (1 - p) A_0(s*),

with

* A_c(s) = P(s' > s | c' = c), the exceedance of the rule's candidate score given the
  candidate's correctness, the empirical one of the *training* pools' candidates
  (:class:`PickModel`; the new draw is independent of the pick given p);
* pi(p) = P(c* = 1 | p, the draws), the pick's posterior correctness: p r* / (p r* + 1 - p)
  with r* the pick's likelihood ratio, or, when the policy reads answers, the posterior
  probability that the pick's answer cluster is the gold one (the CRP likelihood of
  :mod:`dprm.ias.sequential.posterior`).

The index is the posterior expectation sum_m w_m gain(p_m) (:func:`pick_gain`): a pick that is
probably right is worth little more (or less: a wrong draw may outscore it), a weak pick of a
question that can be solved is worth most. With k of the question's draws chosen but not read
yet (a round), the next one pays only if the pick survives them: the gain is multiplied by
(1 - u - v)^k, u = p A_1(s*) and v = (1 - p) A_0(s*) (the probabilities that a draw outscores
the pick and is right, or wrong). That is also why the one-step gain is the best gain per draw
of any look-ahead: d draws change the pick with probability 1 - (1 - u - v)^d, concave in d.

The candidate's score is evidence about p as its calibrated estimate is: the likelihood ratio
r(e, s) = odds(c = 1 | e, s, m) / odds(c = 1 | m) (:class:`ScoredLikelihood`), a logistic
regression on (1, logit m, logit e, logit s) fitted on the training pools, replaces r(e) for
these rules (a calibrated estimate and a PRM score of one candidate need not carry the same
evidence).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dprm.ias.sequential.posterior import _fit_logistic, logit


def score_feature(score: np.ndarray) -> np.ndarray:
    """The feature a candidate score enters the likelihood and the exceedance by: logit s of a
    score in [0, 1] (clipped; every ``highest-*`` weight is a PRM probability), any shape."""
    return logit(np.nan_to_num(np.asarray(score, dtype=np.float64), neginf=0.0))


@dataclass
class ScoredLikelihood:
    """log r(e, s) = logit P(c = 1 | e, s, m) - logit P(c = 1 | m), fitted on training pools.

    Attributes:
        with_score: [4] coefficients of (1, logit m, logit e, logit s).
        prior_only: [2] coefficients of (1, logit m).
    """

    with_score: np.ndarray
    prior_only: np.ndarray

    @classmethod
    def fit(
        cls,
        prior_mean: np.ndarray,
        estimate: np.ndarray,
        score: np.ndarray,
        correct: np.ndarray,
        valid: np.ndarray,
    ) -> ScoredLikelihood:
        """Fit on training pools: prior means m [Q]; candidate estimates e, rule scores s,
        0/1 correctness and validity [Q, K]."""
        lm = np.broadcast_to(logit(prior_mean)[:, None], estimate.shape)[valid]
        le, ls = logit(estimate)[valid], score_feature(score)[valid]
        y = np.asarray(correct, dtype=np.float64)[valid]
        ones = np.ones_like(lm)
        return cls(
            _fit_logistic(np.column_stack([ones, lm, le, ls]), y),
            _fit_logistic(np.column_stack([ones, lm]), y),
        )

    def log_ratio(self, prior_mean: np.ndarray, estimate: np.ndarray, score: np.ndarray):
        """log r(e, s) [Q, K] for prior means [Q], estimates and scores [Q, K]."""
        lm = logit(prior_mean)[:, None]
        a, b = self.with_score, self.prior_only
        joint = a[0] + a[1] * lm + a[2] * logit(estimate) + a[3] * score_feature(score)
        return joint - (b[0] + b[1] * lm)


@dataclass
class PickModel:
    """What the highest-score index learns on the training pools: the score's exceedance by
    correctness and the candidates' likelihood ratio with the score.

    Attributes:
        likelihood: log r(e, s).
        correct_scores, wrong_scores: sorted score features (:func:`score_feature`) of the
            training pools' correct / wrong candidates.
    """

    likelihood: ScoredLikelihood
    correct_scores: np.ndarray
    wrong_scores: np.ndarray

    @classmethod
    def fit(
        cls,
        prior_mean: np.ndarray,
        estimate: np.ndarray,
        score: np.ndarray,
        correct: np.ndarray,
        valid: np.ndarray,
    ) -> PickModel:
        """Fit on training pools: prior means [Q]; candidate estimates, the rule's candidate
        scores, 0/1 correctness and validity [Q, K]."""
        valid = np.asarray(valid, dtype=bool)
        like = ScoredLikelihood.fit(prior_mean, estimate, score, correct, valid)
        feature = score_feature(score)
        right = valid & (np.asarray(correct) > 0.5)
        return cls(like, np.sort(feature[right]), np.sort(feature[valid & ~right]))

    def exceed(self, score: float) -> tuple[float, float]:
        """(A_1, A_0): the share of the training pools' correct / wrong candidates that score
        above ``score`` (-inf: 1, 1), with half a candidate added above and below so that
        neither is exactly 0 or 1."""
        if not np.isfinite(score) and score < 0:
            return 1.0, 1.0
        x = float(score_feature(np.array([score]))[0])
        out = []
        for values in (self.correct_scores, self.wrong_scores):
            above = len(values) - int(np.searchsorted(values, x, side="right"))
            out.append((above + 0.5) / (len(values) + 1.0))
        return out[0], out[1]


def pick_gain(
    weight: np.ndarray,
    p: np.ndarray,
    pick_right: np.ndarray,
    exceed: tuple[float, float],
    pending: int = 0,
) -> float:
    """The posterior-expected change in the selected answer's correctness from one more draw.

    Args:
        weight: [M] posterior weights of the prior samples p_m (sum 1).
        p: [M] the prior samples of p.
        pick_right: [M] pi(p_m), the current pick's probability of being correct given p_m
            and the draws (0 before any draw).
        exceed: (A_1(s*), A_0(s*)) of the pick's score s* (:meth:`PickModel.exceed`).
        pending: draws of the question chosen but not read yet.

    Returns:
        sum_m w_m (1 - u_m - v_m)^pending [(1 - pi_m) u_m - pi_m v_m], u_m = p_m A_1,
        v_m = (1 - p_m) A_0 (module docstring).
    """
    up, down = p * exceed[0], (1 - p) * exceed[1]
    gain = (1 - pick_right) * up - pick_right * down
    if pending:
        gain = gain * (1 - up - down) ** pending
    return float(weight @ gain)
