"""Selection rules: which of n drawn candidates is the answer, and its accuracy for every n.

The contract rule (docs/design.md §4) takes the candidate with the highest final PRM score.
Practitioners also aggregate (search-and-learn, OpenR): *weighted best-of-N* sums a weight per
distinct final answer and answers the heaviest; *majority vote* counts answers. A candidate's
weight is a step aggregation of its PRM scores (``last``: the final step's = ``prm_score``;
``min``; ``product``) or its *calibrated* success estimate (a calibrator's point estimate on
the candidate's own hidden state, BoN contract v2).

Rule names: ``highest-<w>``, ``weighted-<w>`` for w in {last, min, product, calibrated} and
``majority``. ``highest-last`` is the contract rule.

Accuracy for every n = 1..N_max, candidates drawn uniformly without replacement from the
pool of K (``n > K`` draws the whole pool):

* ``highest-*``: exact, P(rank j is picked | n) = C(K - j, n - 1) / C(K, n) on the pool sorted
  by the weight, ties averaged (:func:`dprm.ias.paper.accuracy.exact_accuracy_table`);
* ``weighted-*`` and ``majority``: no closed form (the winner depends on the whole multivariate
  hypergeometric draw), so a seeded Monte Carlo: ``trials`` uniformly random orders per question,
  the first n of an order being the draw of n; ties between answers broken uniformly at random.
  The per-trial outcomes are kept, so the accuracy of *any* budget vector has a standard error
  (the spread of the question-mean over trials / sqrt(trials)). Every rule of one call uses the
  same orders (common random numbers).

An answer group's correctness is the mean ``correct`` of its members (one value when the grader
is consistent). Candidates without an answer (``""``) each form their own group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dprm.ias.constants import (  # noqa: F401 (re-exported)
    CONTRACT_RULE,
    N_MAX,
    RULES,
    STEP_AGGREGATIONS,
    WEIGHTS,
)
from dprm.ias.paper.accuracy import exact_accuracy_table
from dprm.ias.paper.pools import Pools, _tie_average, response_rows
from dprm.io import DataError

DEFAULT_TRIALS = 256


def parse_rule(rule: str) -> tuple[str, str]:
    """``"weighted-min"`` -> (``"weighted"``, ``"min"``); ``"majority"`` -> (``"majority"``, ``"one"``)."""
    if rule not in RULES:
        raise ValueError(f"unknown selection rule {rule!r}; choose from {list(RULES)}")
    if rule == "majority":
        return "majority", "one"
    kind, _, weight = rule.partition("-")
    return kind, weight


def rule_of_label(label: str) -> str:
    """The rule a table's label names: a ``*-calibrated`` rule runs once per calibrator and
    its table is labelled ``rule[calibrator]`` (``highest-calibrated[ot]`` -> ``highest-calibrated``)."""
    return label.split("[", 1)[0]


def uses_answers(rule: str) -> bool:
    """Whether a rule groups candidates by final answer (needs BoN contract v2)."""
    return parse_rule(rule)[0] in ("weighted", "majority")


def answer_key(answer: str, position: int) -> str:
    """The key a candidate's final answer is grouped by: the answer itself, or for a candidate
    that states none (``""``) a group of its own, its ``position`` (unique among the question's
    candidates) behind a NUL that no answer string holds."""
    return answer if answer else f"\0{position}"


def select_candidate(rule: str, weights, answers=None) -> int:
    """Which of n drawn candidates a rule answers with, deterministically (live runs).

    ``highest-*``: the first candidate of largest weight. ``weighted-*`` / ``majority``: the
    answer group (:func:`answer_key`) of largest summed weight / count; a tie between groups
    goes to the group holding the larger single weight (``majority``: pass the PRM scores as
    ``weights``, the count ignores them), then to the group seen first; the pick is that group's
    first candidate of largest weight. The offline tables break ties uniformly at random
    instead (their expectation); without ties both pick the same answer.

    Args:
        rule: a name from :data:`RULES`.
        weights: [n] the candidates' weights (``majority``: their PRM scores, the tie-break).
        answers: [n] canonical final answers ("" for none); needed by the voting rules.

    Returns:
        the index of the chosen candidate.

    Raises:
        ValueError: no candidates, or a voting rule without answers.
    """
    kind, _ = parse_rule(rule)
    weights = np.asarray(weights, dtype=np.float64)
    if not len(weights):
        raise ValueError("no candidates to select from")
    if kind == "highest":
        return int(np.argmax(weights))
    if answers is None or len(answers) != len(weights):
        raise ValueError(f"rule {rule!r} votes on final answers: one answer per candidate needed")
    groups: dict[str, list[int]] = {}
    for j, answer in enumerate(answers):
        groups.setdefault(answer_key(str(answer), j), []).append(j)
    members = list(groups.values())  # in order of first appearance

    def strength(idx: list[int]) -> tuple[float, float]:
        total = float(len(idx)) if kind == "majority" else float(weights[idx].sum())
        return total, float(weights[idx].max())

    best = max(range(len(members)), key=lambda g: strength(members[g]))  # first of the maxima
    group = members[best]
    return group[int(np.argmax(weights[group]))]


@dataclass
class Candidates:
    """Candidate pools of a BoN set in response order, padded to [Q, K].

    Attributes:
        question_id: [Q] ids.
        size: int64 [Q] pool sizes K_i.
        row: int64 [Q, K] row of each candidate in ``bon.responses`` (-1 padding).
        correct: float64 [Q, K] 0/1 (0 padding).
        weights: step aggregation -> float64 [Q, K] candidate scores (-inf padding); ``last``
            always, ``min`` / ``product`` when the set has ``step_scores``.
        answer: int64 [Q, K] answer-group code within the question (-1 padding), or None (v1).
    """

    question_id: np.ndarray
    size: np.ndarray
    row: np.ndarray
    correct: np.ndarray
    weights: dict[str, np.ndarray]
    answer: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.size)

    @classmethod
    def from_bon(cls, bon) -> Candidates:
        """Candidates of a :class:`dprm.data.contract.BonSet` (rows in ``bon.questions`` order)."""
        qid = bon.questions["question_id"].to_numpy()
        resp = bon.responses
        q_row, sizes = response_rows(bon)
        order = np.argsort(q_row, kind="stable")
        k = int(sizes.max())
        pos = np.arange(len(order)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        qr = q_row[order]
        row = np.full((len(qid), k), -1, dtype=np.int64)
        row[qr, pos] = order

        def padded(values: np.ndarray, fill: float) -> np.ndarray:
            out = np.full((len(qid), k), fill, dtype=np.float64)
            out[qr, pos] = values[order]
            return out

        correct = padded(resp["correct"].to_numpy().astype(np.float64), 0.0)
        weights = {"last": padded(resp["prm_score"].to_numpy(np.float64), -np.inf)}
        if "step_scores" in resp.columns:
            steps = [np.asarray(s, dtype=np.float64) for s in resp["step_scores"]]
            last = resp["prm_score"].to_numpy(np.float64)
            mins = np.array([s.min() if len(s) else v for s, v in zip(steps, last, strict=True)])
            prods = np.array(
                [np.prod(s) if len(s) else v for s, v in zip(steps, last, strict=True)]
            )
            weights["min"], weights["product"] = padded(mins, -np.inf), padded(prods, -np.inf)
        answer = None
        if "answer" in resp.columns:
            text = resp["answer"].astype(str).tolist()
            key = [answer_key(t, i) for i, t in enumerate(text)]
            codes = pd.Series(key).groupby(q_row).transform(lambda s: pd.factorize(s)[0])
            answer = np.full((len(qid), k), -1, dtype=np.int64)
            answer[qr, pos] = codes.to_numpy()[order]
        return cls(qid, sizes.astype(np.int64), row, correct, weights, answer)

    def gather(self, values: np.ndarray, fill: float = -np.inf) -> np.ndarray:
        """Per-response values [R] (``bon.responses`` order) as [Q, K] in candidate order."""
        values = np.asarray(values, dtype=np.float64)
        return np.where(self.row >= 0, values[np.clip(self.row, 0, None)], fill)

    def pools(self, weight: np.ndarray) -> Pools:
        """:class:`Pools` sorted by ``weight`` [Q, K] (for the exact argmax rule)."""
        order = np.argsort(-weight, axis=1, kind="stable")
        s = np.take_along_axis(weight, order, axis=1)
        c = np.take_along_axis(self.correct, order, axis=1)
        pad = np.arange(s.shape[1])[None, :] >= self.size[:, None]
        s = np.where(pad, -np.inf, s)
        return Pools(self.question_id, s, c, _tie_average(s, c), self.size)

    def answer_correct(self) -> np.ndarray:
        """[Q, K] mean correctness of answer group a (column a), 0 where no such group."""
        q, k = self.answer.shape
        flat = np.arange(q)[:, None] * k + np.clip(self.answer, 0, None)
        valid = self.answer >= 0
        total = np.bincount(flat[valid], weights=self.correct[valid], minlength=q * k)
        count = np.bincount(flat[valid], minlength=q * k)
        return (total / np.maximum(count, 1)).reshape(q, k)


@dataclass
class RuleTable:
    """Accuracy of one rule for every n: ``mean`` [Q, n_max]; ``trials`` float32 [T, Q, n_max]
    (Monte Carlo outcomes, None when ``mean`` is exact)."""

    rule: str
    mean: np.ndarray
    trials: np.ndarray | None = None

    @property
    def exact(self) -> bool:
        return self.trials is None

    def accuracy(self, budgets: np.ndarray) -> tuple[float, float]:
        """(mean accuracy, its standard error; 0 when exact) of per-question budgets [Q]."""
        n = np.clip(np.asarray(budgets, dtype=np.int64), 1, self.mean.shape[1]) - 1
        rows = np.arange(len(n))
        if self.trials is None:
            return float(self.mean[rows, n].mean()), 0.0
        per_trial = self.trials[:, rows, n].mean(axis=1, dtype=np.float64)  # [T]
        t = len(per_trial)
        se = per_trial.std(ddof=1) / np.sqrt(t) if t > 1 else float("nan")
        return float(per_trial.mean()), float(se)

    def uniform(self) -> np.ndarray:
        """Uniform best-of-n: mean accuracy for n = 1..n_max [n_max]."""
        return self.mean.mean(axis=0)


def vote_in_order(
    codes: np.ndarray,
    weight: np.ndarray,
    group_correct: np.ndarray,
    order: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Correctness of one question's answer-level vote after each n = 1..k draws of each order.

    Args:
        codes: int [k] answer-group codes of the pool's candidates.
        weight: [k] their vote weights (1 for majority).
        group_correct: [>= n_groups] correctness of each answer group.
        order: int [T, k] draw orders.
        rng: draws the uniform tie-break among tied heaviest groups (one key per order and group).

    Returns:
        float [T, k]: the pick's correctness after the first n draws of each order.
    """
    trials, k = order.shape
    t_idx = np.arange(trials)[:, None]
    n_groups = int(codes.max()) + 1
    mass = np.zeros((trials, k, n_groups))
    mass[t_idx, np.arange(k)[None, :], codes[order]] = weight[order]
    seen = np.zeros((trials, k, n_groups), dtype=bool)
    seen[t_idx, np.arange(k)[None, :], codes[order]] = True
    total = np.cumsum(mass, axis=1)
    drawn = np.maximum.accumulate(seen, axis=1)
    # uniform tie-break among tied heaviest groups: a random key far below any weight gap
    scale = max(float(np.abs(weight).max()), 1.0) * 1e-9
    key = np.where(drawn, total + scale * rng.random((trials, 1, n_groups)), -np.inf)
    winner = np.argmax(key, axis=2)  # [T, k]
    return group_correct[winner]


def _vote_trials(
    answer: np.ndarray,
    weight: np.ndarray,
    group_correct: np.ndarray,
    size: np.ndarray,
    n_max: int,
    trials: int,
    seed: int,
) -> np.ndarray:
    """Monte Carlo outcomes float32 [T, Q, n_max] of answer-level voting (see module docstring)."""
    q_count = len(size)
    out = np.zeros((trials, q_count, n_max), dtype=np.float32)
    for q in range(q_count):
        k = int(size[q])
        rng = np.random.default_rng([seed, q])  # common random numbers across rules
        order = np.argsort(rng.random((trials, k)), axis=1)  # [T, k] uniformly random orders
        won = vote_in_order(answer[q, :k], weight[q, :k], group_correct[q], order, rng)
        m = min(k, n_max)
        out[:, q, :m] = won[:, :m]
        if m < n_max:
            out[:, q, m:] = won[:, m - 1 : m]
    return out


def rule_table(
    cands: Candidates,
    rule: str,
    *,
    calibrated: np.ndarray | None = None,
    n_max: int = N_MAX,
    trials: int = DEFAULT_TRIALS,
    seed: int = 0,
) -> RuleTable:
    """Accuracy of ``rule`` for n = 1..n_max per question.

    Args:
        cands: the candidate pools.
        rule: a name from :data:`RULES`.
        calibrated: [Q, K] calibrated candidate estimates (candidate order; required by the
            ``*-calibrated`` rules).
        n_max: the largest budget.
        trials: Monte Carlo orders for the voting rules.
        seed: their seed.

    Raises:
        DataError: a voting rule on a v1 set (no final answers), or a step aggregation the set
            has no step scores for.
    """
    kind, weight_name = parse_rule(rule)
    if weight_name == "calibrated":
        if calibrated is None:
            raise ValueError(f"rule {rule!r} needs calibrated candidate estimates")
        weight = np.where(cands.row >= 0, calibrated, -np.inf)
    elif weight_name == "one":
        weight = np.where(cands.row >= 0, 1.0, -np.inf)
    elif weight_name in cands.weights:
        weight = cands.weights[weight_name]
    else:
        raise DataError(None, f"rule {rule!r} needs per-step scores (column 'step_scores')")
    if kind == "highest":
        return RuleTable(rule, exact_accuracy_table(cands.pools(weight), n_max))
    if cands.answer is None:
        raise DataError(
            None,
            f"rule {rule!r} needs final answers: this BoN set is contract v1 (no 'answer' "
            "column); rebuild it with this dprm version",
        )
    outcome = _vote_trials(
        cands.answer,
        np.where(np.isfinite(weight), weight, 0.0),
        cands.answer_correct(),
        cands.size,
        n_max,
        trials,
        seed,
    )
    return RuleTable(rule, outcome.mean(axis=0, dtype=np.float64), outcome)
