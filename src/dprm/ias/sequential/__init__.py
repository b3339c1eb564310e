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
* **index** (``weighted-*``, and every rule without candidate scores): the expected gain in
  selected-answer accuracy per draw of the best look-ahead,
  Delta_i(n) = max_d sum_m w_im [g_{n+d}(p_m) - g_n(p_m)] / d, with g the rule's
  selection-accuracy model (:class:`dprm.ias.learnt.allocation.SelectionModel`, learnt on the training
  pools as for ``auto``) and w_i the posterior weights after the question's n draws (for the
  concave ``highest-*`` curves, d = 1);
* **majority with answers**: the index reads the vote's state, not the fresh-draw curves g:
  max_d [V(d) - V(0)] / d with V(d) the posterior probability that the vote is right after d
  more draws in a race between the gold cluster and its largest rival
  (:meth:`SequentialPolicy.race_wins`). The curves cannot tell a settled vote (5 of 5 agree)
  from a contested one (2-2); the race can.
* **highest-score rules** (``highest-*``): the index reads the current pick, the top-scored
  draw so far: the posterior-expected gain of one more draw, P(it outscores the pick and is
  right while the pick is wrong) - P(it outscores a right pick and is wrong), with the score's
  distributions by correctness learnt on the training pools and the pick's posterior
  correctness from its likelihood ratio (and its answer cluster); each draw's rule score joins
  its calibrated estimate as evidence (:mod:`~dprm.ias.sequential.pick`). The curves g value
  a question by p alone and cannot tell a pick that scores near 1 from a weak one.

The policy draws the next candidate for the question of largest index until the total budget
round(mean_budget x Q) is spent (exactly: every draw is one candidate), after a uniform floor
(its share chosen on the training pools:
:func:`dprm.ias.sequential.floor.fit_sequential`); a question stops
at min(K_i, n_max). It is the global greedy on the posterior-expected curves, recomputed after
every draw: a batch of questions can run it live.

Evaluation: the accuracy depends on the order the candidates arrive in, so it is a seeded Monte
Carlo over ``trials`` uniformly random draw orders per question (the same orders for every
method: :func:`dprm.ias.selection.draws.draw_orders`), with the standard error over orders. Rules:
``highest-*`` (the pick of the first n in an order is its top-weighted candidate:
:func:`dprm.ias.selection.draws.order_outcomes`) and the answer-level votes
(:func:`dprm.ias.selection.draws.vote_order_outcomes`).

The package, by job: :mod:`~dprm.ias.sequential.posterior` (the candidate likelihood and the
wrong answers' CRP), :mod:`~dprm.ias.sequential.race` (the majority race index),
:mod:`~dprm.ias.sequential.pick` (the highest-score index),
:mod:`~dprm.ias.sequential.policy` (the policy state and the fitted allocator) and
:mod:`~dprm.ias.sequential.floor` (the one floor-share procedure). Its evaluation (draw orders,
outcomes) is :mod:`dprm.ias.selection.draws`; its equal-cost rows are :mod:`dprm.ias.curves.equal_cost`.
"""

from dprm.ias.sequential.floor import (
    SEQ_FLOOR_SHARES,
    SEQ_TRAIN_TRIALS,
    SequentialFit,
    fit_sequential,
    sequential_floor_shares,
    training_replay,
)
from dprm.ias.sequential.pick import PickModel, ScoredLikelihood, pick_gain
from dprm.ias.sequential.policy import SequentialAuto, SequentialPolicy, floor_draws
from dprm.ias.sequential.posterior import CandidateLikelihood, WrongAnswerModel, rising_log
from dprm.ias.sequential.race import RACE_GROUPS, RACE_HORIZON, race_wins

__all__ = [
    "RACE_GROUPS",
    "RACE_HORIZON",
    "SEQ_FLOOR_SHARES",
    "SEQ_TRAIN_TRIALS",
    "CandidateLikelihood",
    "PickModel",
    "ScoredLikelihood",
    "SequentialAuto",
    "SequentialFit",
    "SequentialPolicy",
    "WrongAnswerModel",
    "fit_sequential",
    "floor_draws",
    "pick_gain",
    "race_wins",
    "rising_log",
    "sequential_floor_shares",
    "training_replay",
]
