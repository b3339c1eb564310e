"""Cost-accuracy curves of the peers and of ``auto-seq`` on the same pools and draw orders.

For one BoN set (any: a twin's, a recipe's), a training BoN set, a calibrator and a selection
rule, every method gets its curve: per level of its knob, each question's mean accuracy and
mean draws over ``trials`` draw orders (:func:`dprm.ias.selection.draws.draw_orders`, the orders
``auto-seq`` is scored on). The methods:

* the peers of :mod:`dprm.ias.peers.methods` (``uniform`` included);
* ``auto-seq[<prior>]`` for the priors of :data:`PRIORS`: the calibrated distribution
  (``calibrated``: the calibrator's prior and candidate estimates), the raw PRM (``base``: the
  question's score as a point prior, the candidates' scores as estimates), no prior
  (``none``: a flat prior, constant candidate estimates; the policy reads only the answers) and,
  on sets that know it, the truth (``truth``: the true distribution of p as prior, the
  calibrator's candidate estimates), at the mean budgets of :data:`SEQ_BUDGETS` (and n_max,
  where every question takes its whole pool); the floor
  share of each mean budget is the one chosen on the training pools at the nearest report cost.

Under a detected shift (:func:`dprm.ias.learnt.allocation.shift_auc` > ``SHIFT_AUC``) ``auto-seq``
with a calibrator's prior (``calibrated``, ``truth``) does not adapt on models learnt on unlike
questions: it **falls back to the best calibrator-free peer for the rule, chosen on the training
pools** (:func:`choose_fallback`), and its curve is that peer's (``falls_back_to`` names it).
``auto-seq[none]`` and ``auto-seq[base]`` read no calibrator: they are calibrator-free methods
themselves (:data:`dprm.ias.peers.methods.CALIBRATOR_FREE_AUTO_SEQ`) and run as such under a
shift, as the peers do. The fallback is chosen among the peers of :data:`PEERS` only, which a live
run can follow (:mod:`dprm.ias.peers.fallback`).

The figures users quote come from the curves (:func:`summarise`): the mean draws per question
at which a method first reaches uniform best-of-n's accuracy (n = 64, 16; within
:data:`MATCH_TOLERANCE`, linear along the curve), and the accuracy at mean cost 0.05 / 0.1 /
0.25 (linear along the curve: a mixture of the two neighbouring levels reaches it in
expectation), each with a standard error from a bootstrap over questions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from dprm.ias.constants import N_MAX
from dprm.ias.learnt.allocation import REPORT_COSTS, SHIFT_AUC, SelectionModel, shift_auc
from dprm.ias.learnt.auto import pool_share
from dprm.ias.learnt.inputs import CalibratorInput
from dprm.ias.paper.estimates import Estimate, estimate_samples
from dprm.ias.peers.methods import (
    CALIBRATOR_FREE,
    CALIBRATOR_FREE_AUTO_SEQ,
    PEERS,
    DrawView,
    TrainingScores,
    peers_for_rule,
)
from dprm.ias.selection.draws import draw_orders, rule_outcomes, table_weight
from dprm.ias.selection.rules import Candidates, rule_table, uses_answers
from dprm.ias.sequential.floor import fit_sequential, training_replay

#: an accuracy within this of the target counts as reaching it (Adaptive-Consistency's
#: "< 0.1 % accuracy drop")
MATCH_TOLERANCE = 0.001
#: bootstrap resamples of the questions
BOOTSTRAP = 200
#: the uniform best-of-n whose accuracy the samples-to-match figure targets
MATCH_TARGETS = (64, 16)
#: the mean budgets ``auto-seq`` is run at (then n_max: every question's whole pool)
SEQ_BUDGETS = (1.0, 2.0, 3.2, 4.0, 6.4, 8.0, 16.0, 32.0)


@dataclass
class Curve:
    """One method's curve on one set.

    Attributes:
        method: e.g. ``adaptive-consistency``, ``auto-seq[calibrated]``.
        levels: [L] its knob's levels.
        accuracy: [L, Q] each question's accuracy, mean over draw orders.
        draws: [L, Q] each question's draws, mean over draw orders.
        falls_back_to: the peer whose curve this is under a detected shift, or "".
    """

    method: str
    levels: np.ndarray
    accuracy: np.ndarray
    draws: np.ndarray
    falls_back_to: str = ""


@dataclass
class CurveSet:
    """Every method's curve on one (set, rule), with the shift check's AUC."""

    rule: str
    curves: dict[str, Curve]
    shift_auc: float
    fallback: str
    n_max: int = N_MAX
    extra: dict = field(default_factory=dict)


def per_question(outcomes: np.ndarray, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(accuracy [L, Q], draws [L, Q]) of budgets [L, T, Q] on outcomes [T, Q, K]: means over
    the draw orders."""
    t_count, q_count, k = outcomes.shape
    n = np.clip(budgets, 1, k) - 1
    t_idx = np.arange(t_count)[None, :, None]
    q_idx = np.arange(q_count)[None, None, :]
    acc = outcomes[t_idx, q_idx, n].astype(np.float64).mean(axis=1)
    return acc, budgets.astype(np.float64).mean(axis=1)


def peer_curve(
    name: str, view: DrawView, outcomes: np.ndarray, train: TrainingScores | None
) -> Curve:
    """One peer's curve on a view of the draws and the rule's outcomes [T, Q, K]."""
    peer = PEERS[name]
    if view.train is None and train is not None:
        view = replace(view, train=train)
    levels = peer.levels(view, train)
    acc, draws = per_question(outcomes, peer.budgets(view, levels))
    return Curve(name, np.asarray(levels, dtype=np.float64), acc, draws)


def curve_at_cost(draws: np.ndarray, accuracy: np.ndarray, mean_draws: float) -> float:
    """Accuracy at a mean draw count, linear along the curve (points sorted by cost; NaN
    outside the curve's range). draws, accuracy: [L] means over questions."""
    order = np.argsort(draws, kind="stable")
    x, y = draws[order], accuracy[order]
    if mean_draws < x[0] - 1e-9 or mean_draws > x[-1] + 1e-9:
        return float("nan")
    return float(np.interp(mean_draws, x, y))


def draws_to_reach(draws: np.ndarray, accuracy: np.ndarray, target: float) -> float:
    """The least mean draws at which the curve reaches ``target - MATCH_TOLERANCE`` (linear
    between the two points around the first crossing, points sorted by cost); NaN if never."""
    order = np.argsort(draws, kind="stable")
    x, y = draws[order], accuracy[order]
    goal = target - MATCH_TOLERANCE
    above = np.flatnonzero(y >= goal)
    if len(above) == 0:
        return float("nan")
    j = int(above[0])
    if j == 0:
        return float(x[0])
    x0, x1, y0, y1 = x[j - 1], x[j], y[j - 1], y[j]
    return float(x0 + (goal - y0) * (x1 - x0) / (y1 - y0))


def _flat_estimate(q_count: int, r_count: int, m: int = 100) -> Estimate:
    """No prior: p uniform on [0, 1] (its M mid-point quantiles) for each of ``q_count``
    questions, and 0.5 for each of their ``r_count`` candidates."""
    mid = (np.arange(m) + 0.5) / m
    q_mid = np.broadcast_to(mid, (q_count, m)).copy()
    return Estimate("none", "distribution", q_mid=q_mid, candidate=np.full(r_count, 0.5))


def flat_prior(bon, train_bon) -> CalibratorInput:
    """The ``none`` prior of ``auto-seq``: a flat prior and constant candidate estimates on
    both sets (the policy then reads only the answers)."""
    return CalibratorInput(
        "none",
        _flat_estimate(len(bon.questions), len(bon.responses)),
        _flat_estimate(len(train_bon.questions), len(train_bon.responses)),
    )


def auto_seq_curve(
    label: str,
    est: Estimate,
    train_est: Estimate,
    cands: Candidates,
    train_cands: Candidates,
    weight: np.ndarray,
    train_weight: np.ndarray,
    rule: str,
    orders: np.ndarray,
    outcomes: np.ndarray,
    replay,
    n_max: int = N_MAX,
    seed: int = 0,
) -> Curve:
    """``auto-seq`` with the prior and candidate estimates of ``est`` (fitted on ``train_est``
    over the training pools), at the mean budgets :data:`SEQ_BUDGETS` and n_max."""
    answers = cands.answer is not None and train_cands.answer is not None
    train_table = rule_table(train_cands, rule, n_max=n_max, trials=64, seed=seed)
    model = SelectionModel.fit(pool_share(train_cands), np.asarray(train_table.mean))
    fit = fit_sequential(
        model, train_cands, train_est, train_weight, REPORT_COSTS, rule, read_answers=answers,
        n_max=n_max, seed=seed, replay=replay,
    )  # fmt: skip
    report_shares = fit.floor_shares
    levels = [mb for mb in SEQ_BUDGETS if mb < n_max]
    report_mb = np.asarray(REPORT_COSTS) * n_max
    shares = [report_shares[int(np.argmin(np.abs(np.log(report_mb / mb))))] for mb in levels]
    budgets = fit.seq.budgets(
        estimate_samples(est), cands.gather(est.candidate, 0.5), cands.size, orders, levels,
        shares, n_max, answer=cands.answer if answers else None, majority=fit.majority,
        score=weight if fit.seq.pick is not None else None,
    )  # fmt: skip
    full = np.broadcast_to(np.minimum(cands.size, n_max), budgets.shape[1:])[None]
    budgets = np.concatenate([budgets, full], axis=0)
    acc, draws = per_question(outcomes, budgets)
    return Curve(label, np.asarray([*levels, float(n_max)]), acc, draws)


def training_scores(train_cands: Candidates, train_candidate: np.ndarray | None) -> TrainingScores:
    """The training pools' valid candidates' raw scores, calibrated estimates (or None) and
    question indices."""
    valid = train_cands.row >= 0
    cal = None if train_candidate is None else train_cands.gather(train_candidate, 0.5)[valid]
    question = np.nonzero(valid)[0]
    return TrainingScores(train_cands.weights["last"][valid], cal, question)


def training_peer_curves(
    train_cands: Candidates,
    train_weight: np.ndarray,
    rule: str,
    train_scores: TrainingScores,
    trials: int,
    seed: int,
    n_max: int = N_MAX,
    replay=None,
) -> tuple[DrawView, dict[str, Curve]]:
    """Every calibrator-free peer's curve for one rule on the *training* pools (their own draw
    orders, :func:`dprm.ias.sequential.floor.training_replay`), with the pools' draw view."""
    orders, outcomes = replay or training_replay(
        train_cands, train_weight, uses_answers(rule), trials, seed
    )
    view = DrawView.from_pools(
        train_cands.answer,
        train_cands.weights["last"],
        train_cands.size,
        orders,
        n_max=n_max,
        train=train_scores,
    )
    curves = {
        name: peer_curve(name, view, outcomes, train_scores)
        for name in peers_for_rule(rule, calibrated=False)
        if name in CALIBRATOR_FREE
    }
    return view, curves


def best_fallback(curves: dict[str, Curve], n_max: int = N_MAX) -> tuple[str, dict[str, float]]:
    """The peer of the highest mean accuracy at the report costs among ``curves``.

    Returns:
        (peer name, name -> its score).
    """
    scores = {}
    for name, c in curves.items():
        d, a = c.draws.mean(axis=1), c.accuracy.mean(axis=1)
        scores[name] = float(np.mean([curve_at_cost(d, a, c_ * n_max) for c_ in REPORT_COSTS]))
    best = max(scores, key=lambda k: (np.nan_to_num(scores[k], nan=-1.0), k))
    return best, scores


def choose_fallback(
    train_cands: Candidates,
    train_weight: np.ndarray,
    rule: str,
    train_scores: TrainingScores,
    trials: int,
    seed: int,
    n_max: int = N_MAX,
    replay=None,
) -> tuple[str, dict[str, float]]:
    """The calibrator-free peer ``auto-seq`` falls back to under a shift, for one rule: the one
    of the highest mean accuracy at the report costs on the *training* pools
    (:func:`training_peer_curves`, :func:`best_fallback`).

    Returns:
        (peer name, name -> its training score).
    """
    _, curves = training_peer_curves(
        train_cands, train_weight, rule, train_scores, trials, seed, n_max, replay
    )
    return best_fallback(curves, n_max)


def set_curves(
    bon,
    train_bon,
    inputs: Sequence[CalibratorInput],
    rule: str,
    *,
    trials: int = 16,
    seed: int = 0,
    n_max: int = N_MAX,
    train_trials: int = 2,
    shifted: bool | None = None,
    priors: tuple[str, ...] | None = None,
) -> CurveSet:
    """Every method's curve on one BoN set for one rule.

    Args:
        bon, train_bon: the test and training BoN sets (contract v2: candidate answers).
        inputs: the priors (:func:`prior_inputs`), labelled ``calibrated``, ``base``, ``none``
            or ``truth``, each with candidate estimates on both sets (``none`` may be omitted:
            :func:`flat_prior` is added here).
        rule: ``highest-last``, ``weighted-last`` or ``majority``.
        trials: draw orders per question; seed: their seed (as ``auto-seq``'s).
        shifted: override the shift check (None: ``shift_auc`` > ``SHIFT_AUC``).
        priors: the ``auto-seq`` priors to run (default :data:`PRIORS`, those available).
    """
    cands, train_cands = Candidates.from_bon(bon), Candidates.from_bon(train_bon)
    if cands.answer is None or train_cands.answer is None:
        raise ValueError("the peers read the candidates' final answers (BoN contract v2)")
    vote = uses_answers(rule)
    weight, train_weight = table_weight(cands, rule, None), table_weight(train_cands, rule, None)
    orders = draw_orders(cands.size, trials, seed)
    outcomes = rule_outcomes(cands, weight, orders, vote, seed)
    by_label = {inp.label: inp for inp in inputs}
    calibrated = by_label.get("calibrated")
    cal_cand = None if calibrated is None else cands.gather(calibrated.test_candidates, 0.5)
    scores = training_scores(
        train_cands, None if calibrated is None else calibrated.train_candidates
    )
    view = DrawView.from_pools(
        cands.answer, cands.weights["last"], cands.size, orders, cal_cand, n_max, scores
    )
    curves = {
        name: peer_curve(name, view, outcomes, scores)
        for name in peers_for_rule(rule, calibrated=cal_cand is not None)
    }
    replay = training_replay(train_cands, train_weight, vote, train_trials, seed)
    fallback, fallback_scores = choose_fallback(
        train_cands, train_weight, rule, scores, train_trials, seed, n_max, replay
    )
    auc = float(shift_auc(train_bon.hidden, bon.hidden, seed))
    is_shifted = auc > SHIFT_AUC if shifted is None else bool(shifted)
    if "none" not in by_label:
        by_label["none"] = flat_prior(bon, train_bon)
    for label in PRIORS if priors is None else priors:
        prior = by_label.get(label)
        if prior is None or prior.train is None:
            continue
        name = f"auto-seq[{label}]"
        if is_shifted and name not in CALIBRATOR_FREE_AUTO_SEQ:
            peer = curves[fallback]
            curves[name] = Curve(name, peer.levels, peer.accuracy, peer.draws, fallback)
            continue
        curves[name] = auto_seq_curve(
            name, prior.test, prior.train, cands, train_cands, weight, train_weight, rule, orders,
            outcomes, replay, n_max, seed,
        )  # fmt: skip
    return CurveSet(rule, curves, auc, fallback, n_max, {"fallback_scores": fallback_scores,
                                                         "shifted": is_shifted})  # fmt: skip


#: the priors ``auto-seq`` runs with
PRIORS = ("calibrated", "base", "none", "truth")


def _summary_of(curve: Curve, targets: dict[int, float], n_max: int) -> dict[str, float]:
    d, a = curve.draws.mean(axis=1), curve.accuracy.mean(axis=1)
    row = {f"draws_to_u{n}": draws_to_reach(d, a, t) for n, t in targets.items()}
    row.update({f"acc_at_{c:g}": curve_at_cost(d, a, c * n_max) for c in REPORT_COSTS})
    return row


def summarise(curve_set: CurveSet, bootstrap: int = BOOTSTRAP, seed: int = 0) -> pd.DataFrame:
    """The quoted figures of every method of a curve set, with bootstrap standard errors.

    Returns:
        one row per method: ``rule, method, falls_back_to, draws_to_u64, draws_to_u16``
        (mean draws per question to reach uniform best-of-64 / -16's accuracy; NaN: never),
        ``saved_u64`` (1 - draws / 64), ``acc_at_0.05 / 0.1 / 0.25``, each figure's ``*_se``
        (bootstrap over questions; the targets are resampled with the questions; NaN where
        fewer than half the resamples reach the target) and ``reach_u64`` (share of resamples
        that reach it), ``target_u64``, ``target_u16``, ``shift_auc``.
    """
    n_max = curve_set.n_max
    uni = curve_set.curves["uniform"]

    def targets_of(acc: np.ndarray) -> dict[int, float]:
        return {n: float(acc[list(uni.levels).index(float(n))]) for n in MATCH_TARGETS}

    rows = []
    rng = np.random.default_rng([seed, 97])
    q_count = uni.accuracy.shape[1]
    picks = [rng.integers(0, q_count, q_count) for _ in range(bootstrap)]
    base_targets = targets_of(uni.accuracy.mean(axis=1))
    for name, curve in curve_set.curves.items():
        row = _summary_of(curve, base_targets, n_max)
        boot = []
        for idx in picks:
            sub = Curve(name, curve.levels, curve.accuracy[:, idx], curve.draws[:, idx])
            boot.append(_summary_of(sub, targets_of(uni.accuracy[:, idx].mean(axis=1)), n_max))
        frame = pd.DataFrame(boot)
        for key in list(row):
            values = frame[key].to_numpy(float)
            ok = np.isfinite(values)
            row[f"{key}_se"] = float(values[ok].std(ddof=1)) if ok.mean() >= 0.5 else np.nan
        row["reach_u64"] = float(np.isfinite(frame["draws_to_u64"]).mean())
        row["saved_u64"] = 1 - row["draws_to_u64"] / 64
        rows.append({"rule": curve_set.rule, "method": name,
                     "falls_back_to": curve.falls_back_to, **row})  # fmt: skip
    out = pd.DataFrame(rows)
    out["target_u64"], out["target_u16"] = base_targets[64], base_targets[16]
    out["shift_auc"] = curve_set.shift_auc
    return out


def prior_inputs(model, bon, train_bon) -> tuple[CalibratorInput, ...]:
    """The priors ``auto-seq`` runs with, on a test and a training BoN set (contract v2,
    candidate states): ``calibrated`` (``model``'s distribution and candidate estimates),
    ``base`` (the raw PRM: question score as a point prior, candidates' scores) and, on
    synthetic sets, ``truth`` (the true distribution of p, with the calibrator's candidate
    estimates). ``none`` is added by :func:`set_curves`."""
    from dprm.ias.learnt.inputs import calibrator_input
    from dprm.ias.paper.estimates import truth_estimate
    from dprm.models.raw_score import RawScoreCalibrator

    both = dict(train_bon=train_bon, test_candidates=True, train_candidates=True)
    calibrated = calibrator_input(model, bon, "calibrated", **both)
    base = calibrator_input(RawScoreCalibrator(bon.hidden_dim), bon, "base", **both)
    out = [calibrated, base]
    truth, train_truth = truth_estimate(bon), truth_estimate(train_bon)
    if truth is not None and train_truth is not None:
        out.append(
            CalibratorInput(
                "truth",
                truth.with_candidate(calibrated.test_candidates),
                train_truth.with_candidate(calibrated.train_candidates),
            )
        )
    return tuple(out)


def shuffle_priors(
    inputs: Sequence[CalibratorInput], labels, seed: int
) -> tuple[CalibratorInput, ...]:
    """A subtle shift: the test questions' priors of ``labels`` permuted across questions (a
    calibrator wrong about every question while the question states look as in training);
    candidate estimates (each candidate's own state) and the training set are kept."""
    out = []
    for inp in inputs:
        if inp.label in labels:
            est = inp.test
            perm = np.random.default_rng([seed, 61]).permutation(
                len(est.p if est.p is not None else est.q_mid)
            )
            permuted = {
                attr: np.asarray(getattr(est, attr))[perm]
                for attr in ("p", "q_mid", "q_levels")
                if getattr(est, attr) is not None
            }
            inp = replace(inp, test=replace(est, **permuted))
        out.append(inp)
    return tuple(out)


def peer_tables(
    bon, train_bon, model, rules, *, trials: int = 4, seed: int = 0, n_max: int = N_MAX
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``dprm ias --peers``: (:func:`summarise` rows of every rule, the mean curves: ``rule,
    method, knob, draws, accuracy``) on one BoN set, with ``model`` as the calibrated prior.

    ``knob`` is the setting of the method at that point of its curve: uniform's n, a peer's
    threshold or window count, ``auto-seq``'s target mean draws per question."""
    priors = prior_inputs(model, bon, train_bon)
    rows, curves = [], []
    for rule in rules:
        cs = set_curves(bon, train_bon, priors, rule, trials=trials, seed=seed, n_max=n_max)
        rows.append(summarise(cs, seed=seed).assign(fallback=cs.fallback))
        for name, c in cs.curves.items():
            curves.append(pd.DataFrame({"rule": rule, "method": name, "knob": c.levels,
                                        "draws": c.draws.mean(axis=1),
                                        "accuracy": c.accuracy.mean(axis=1)}))  # fmt: skip
    return pd.concat(rows, ignore_index=True), pd.concat(curves, ignore_index=True)
