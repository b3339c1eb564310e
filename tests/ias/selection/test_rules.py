"""Selection rules (dprm.ias.selection.rules) and the paper's beta reading (threshold_mask_exact).

Voting rules are Monte Carlo: they are checked against full enumeration of every draw on small
pools (all subsets, ties split evenly) within 4 standard errors; the argmax rules are exact and
checked against the contract rule's table.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from dprm.data.contract import BonSet
from dprm.ias import Pools, exact_accuracy_table
from dprm.ias.paper.accuracy import monte_carlo, threshold_exact, threshold_mask_exact
from dprm.ias.selection.rules import Candidates, parse_rule, rule_table, uses_answers
from dprm.io import DataError


def make_bon(answers, correct, scores, steps=None, with_answers=True) -> BonSet:
    """A BoN set from per-question lists (ragged allowed)."""
    rows = []
    for q, (a, c, s) in enumerate(zip(answers, correct, scores, strict=True)):
        for r in range(len(c)):
            row = {"question_id": f"q{q}", "response_id": r, "prm_score": s[r], "correct": c[r]}
            if with_answers:
                row["answer"] = a[r]
            if steps is not None:
                row["step_scores"] = steps[q][r]
            rows.append(row)
    questions = pd.DataFrame({"question_id": [f"q{q}" for q in range(len(correct))]})
    questions["prm_score"] = 0.5
    return BonSet(questions, np.zeros((len(correct), 2), np.float32), pd.DataFrame(rows))


def brute_vote(answers, weights, correct, n) -> float:
    """Expected correctness of the heaviest answer over all n-subsets (ties split evenly)."""
    total = 0.0
    subsets = list(itertools.combinations(range(len(answers)), n))
    for sub in subsets:
        mass: dict[str, float] = {}
        for i in sub:
            mass[answers[i]] = mass.get(answers[i], 0.0) + weights[i]
        best = max(mass.values())
        winners = [a for a, m in mass.items() if m == best]
        ok = {answers[i]: correct[i] for i in range(len(answers))}
        total += np.mean([ok[a] for a in winners])
    return total / len(subsets)


def test_parse_rule_names():
    assert parse_rule("highest-last") == ("highest", "last")
    assert parse_rule("weighted-calibrated") == ("weighted", "calibrated")
    assert parse_rule("majority") == ("majority", "one")
    assert uses_answers("majority") and not uses_answers("highest-min")
    with pytest.raises(ValueError, match="unknown selection rule"):
        parse_rule("best")


def test_majority_and_weighted_match_enumeration():
    answers = [["a", "b", "b", "c", "a", "b"]]
    correct = [[1, 0, 0, 0, 1, 0]]
    scores = [[0.9, 0.3, 0.4, 0.2, 0.6, 0.5]]
    cands = Candidates.from_bon(make_bon(answers, correct, scores))
    for rule, w in (("majority", [1.0] * 6), ("weighted-last", scores[0])):
        table = rule_table(cands, rule, n_max=6, trials=4000, seed=1)
        assert not table.exact
        for n in range(1, 7):
            want = brute_vote(answers[0], w, correct[0], n)
            got = table.mean[0, n - 1]
            se = np.sqrt(max(want * (1 - want), 1e-4) / 4000)
            assert abs(got - want) < 4 * se + 1e-9, (rule, n, got, want)


def test_weighted_with_distinct_answers_is_highest_score():
    rng = np.random.default_rng(0)
    k = 12
    scores = [list(rng.random(k)) for _ in range(5)]
    correct = [list((rng.random(k) < 0.4).astype(int)) for _ in range(5)]
    answers = [[f"x{q}-{i}" for i in range(k)] for q in range(5)]
    cands = Candidates.from_bon(make_bon(answers, correct, scores))
    exact = rule_table(cands, "highest-last", n_max=k)
    mc = rule_table(cands, "weighted-last", n_max=k, trials=3000, seed=2)
    assert exact.exact
    ref = exact_accuracy_table(Pools.from_arrays(scores, correct), k)
    np.testing.assert_allclose(exact.mean, ref)
    se = np.sqrt(ref * (1 - ref) / 3000) + 1e-3
    assert (np.abs(mc.mean - ref) < 4 * se).all()


def test_unanimous_pool_and_standard_error():
    cands = Candidates.from_bon(make_bon([["7"] * 8], [[1] * 8], [[0.5] * 8]))
    table = rule_table(cands, "majority", n_max=10, trials=16)
    assert (table.mean == 1).all()  # n > K draws the whole pool
    acc, se = table.accuracy(np.array([3]))
    assert acc == 1 and se == 0


def test_step_aggregations_and_calibrated_weights():
    steps = [[[0.9, 0.1, 0.8], [0.6, 0.7, 0.5]]]
    bon = make_bon([["a", "b"]], [[0, 1]], [[0.8, 0.5]], steps=steps)
    cands = Candidates.from_bon(bon)
    np.testing.assert_allclose(cands.weights["min"][0], [0.1, 0.5])
    np.testing.assert_allclose(cands.weights["product"][0], [0.9 * 0.1 * 0.8, 0.6 * 0.7 * 0.5])
    assert rule_table(cands, "highest-last", n_max=2).mean[0, 1] == 0  # 0.8 wins, wrong
    assert rule_table(cands, "highest-min", n_max=2).mean[0, 1] == 1
    est = cands.gather(np.array([0.2, 0.7]))
    assert rule_table(cands, "highest-calibrated", calibrated=est, n_max=2).mean[0, 1] == 1


def test_vote_rules_refuse_v1_sets():
    bon = make_bon([["a"]], [[1]], [[0.5]], with_answers=False)
    assert bon.version == 1
    cands = Candidates.from_bon(bon)
    with pytest.raises(DataError, match="contract v1") as err:
        rule_table(cands, "majority")
    assert "\n" not in str(err.value)
    with pytest.raises(DataError, match="step_scores"):
        rule_table(cands, "highest-min")


def test_no_answer_responses_are_separate_groups():
    cands = Candidates.from_bon(make_bon([["", "", "5"]], [[0, 0, 1]], [[0.5, 0.5, 0.5]]))
    assert sorted(cands.answer[0]) == [0, 1, 2]
    # an empty answer is never grouped with a real answer that spells its row number
    cands = Candidates.from_bon(
        make_bon([["7", "7", "", "2", "7", ""]], [[1, 1, 0, 0, 1, 0]], [[0.5] * 6])
    )
    codes = cands.answer[0]
    assert codes[0] == codes[1] == codes[4]
    assert len({codes[2], codes[3], codes[5], codes[0]}) == 4


def test_mask_threshold_matches_score_threshold_and_monte_carlo():
    rng = np.random.default_rng(3)
    q, k = 6, 64
    scores = rng.random((q, k))
    correct = (rng.random((q, k)) < scores).astype(float)
    pools = Pools.from_arrays(list(scores), list(correct))
    t = rng.uniform(0.5, 0.99, q)
    caps = rng.integers(1, 40, q)
    a1, d1 = threshold_exact(pools, t, caps)
    a2, d2 = threshold_mask_exact(pools, pools.scores >= t[:, None], caps)
    np.testing.assert_allclose(a1, a2, atol=1e-12)
    np.testing.assert_allclose(d1, d2, atol=1e-12)
    # an acceptable set unrelated to the score order (the calibrated reading)
    accept = rng.random((q, k)) < 0.05
    a3, d3 = threshold_mask_exact(pools, accept, caps)
    mc = monte_carlo(pools, caps[None], accept=accept[None], trials=4000, seed=5)
    assert abs(mc["accuracy"][0] - a3.mean()) < 4 * mc["accuracy_se"][0] + 1e-3
    assert abs(mc["cost"][0] - d3.mean()) < 0.3


def test_mask_threshold_monte_carlo_at_the_full_pool():
    """No acceptable candidate and a cap of the whole pool: the pick is the pool's best."""
    rng = np.random.default_rng(7)
    scores = rng.random((5, 16))
    correct = (rng.random((5, 16)) < 0.5).astype(float)
    pools = Pools.from_arrays(list(scores), list(correct))
    caps = np.full(5, 16)
    for accept in (np.zeros((5, 16), bool), rng.random((5, 16)) < 0.1):
        exact, _ = threshold_mask_exact(pools, accept, caps)
        mc = monte_carlo(pools, caps[None], accept=accept[None], trials=2000, seed=1)
        assert abs(mc["accuracy"][0] - exact.mean()) < 4 * mc["accuracy_se"][0] + 1e-9


def test_select_candidate_hand_worked():
    """The live pick (deterministic tie-break) on cases worked by hand."""
    from dprm.ias.selection.rules import select_candidate

    assert select_candidate("highest-last", [0.2, 0.9, 0.9, 0.1]) == 1  # first of the maxima
    # majority: "7" has 3 votes; its highest-scored member answers
    answers, scores = ["6", "7", "7", "6", "7"], [0.9, 0.1, 0.2, 0.8, 0.3]
    assert select_candidate("majority", scores, answers) == 4
    # a 2-2 tie goes to the group holding the higher single score
    assert select_candidate("majority", [0.1, 0.95, 0.2, 0.3], ["6", "7", "6", "7"]) == 1
    assert select_candidate("majority", [0.99, 0.95, 0.2, 0.3], ["6", "7", "6", "7"]) == 0
    # weighted: "6" sums 0.9, "7" sums 0.8
    assert select_candidate("weighted-last", [0.9, 0.5, 0.3], ["6", "7", "7"]) == 0
    assert select_candidate("weighted-last", [0.7, 0.5, 0.3], ["6", "7", "7"]) == 1
    # no stated answer: each blank is a group of its own, so blanks do not pool their votes
    assert select_candidate("majority", [0.1, 0.2, 0.3, 0.05], ["", "", "5", "5"]) == 2
    with pytest.raises(ValueError, match="votes on final answers"):
        select_candidate("majority", [0.1, 0.2])
    with pytest.raises(ValueError, match="no candidates"):
        select_candidate("highest-last", [])


@pytest.mark.parametrize("rule", ["weighted-last", "majority"])
def test_select_candidate_agrees_with_the_offline_vote(rule):
    """Where no two answer groups tie, the live pick is the offline vote's (vote_in_order)."""
    from dprm.ias.selection.rules import select_candidate, vote_in_order

    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(40):
        k = int(rng.integers(3, 12))
        codes = rng.integers(0, 4, k)
        scores = rng.random(k)
        group_correct = (rng.random(4) < 0.4).astype(float)
        weight = np.ones(k) if rule == "majority" else scores
        order = np.stack([rng.permutation(k) for _ in range(5)])
        offline = vote_in_order(codes, weight, group_correct, order, rng)
        for t in range(len(order)):
            for n in range(1, k + 1):
                drawn = order[t, :n]
                mass = np.bincount(codes[drawn], weights=weight[drawn], minlength=4)
                present = np.bincount(codes[drawn], minlength=4) > 0
                top = mass[present].max()
                if np.sum(np.isclose(mass[present], top)) > 1:
                    continue  # a tie: offline draws uniformly, live takes the higher score
                pick = select_candidate(rule, scores[drawn], [str(c) for c in codes[drawn]])
                assert group_correct[codes[drawn][pick]] == offline[t, n - 1]
                checked += 1
    assert checked > 200
