"""The peers' stopping rules pinned to their formulas on hand-worked vote sequences."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from dprm.ias.peers.methods import (
    PEERS,
    DrawView,
    TrainingScores,
    beta_stop_probability,
    first_stop,
    matched_budgets,
    running_top2,
    vote_lead_sequence,
)

# P(p1 > p2) = int_{0.5}^1 x^a (1 - x)^b dx / B(a + 1, b + 1), worked by hand as
# 2^-(a+b+1) sum_{k<=a} C(a+b+1, k). The same values came out of the reference implementation,
# the MIT-licensed `AdaptiveConsistency` 1.0.0 package (BetaStoppingCriteria.should_stop, by
# numerical quadrature), run once outside the test suite on these vote sequences:
# A 0.75, AA 0.875, AB 0.49999999999999994, AAA 0.9375, AAB 0.6875, AAAA 0.96875,
# AAAB 0.8125, AAAAB 0.890625, AAAAA 0.984375, ABACAAA (a=5, b=1) 0.9375.
HAND_WORKED = {
    (1, 0): 3 / 4,  # n = 2: P(Bin <= 1) = 3/4
    (2, 0): 7 / 8,
    (1, 1): 1 / 2,  # n = 3: (1 + 3) / 8
    (3, 0): 15 / 16,
    (2, 1): 11 / 16,  # n = 4: (1 + 4 + 6) / 16
    (4, 0): 31 / 32,
    (3, 1): 26 / 32,  # n = 5: (1 + 5 + 10 + 10) / 32
    (4, 1): 57 / 64,  # n = 6: (1 + 6 + 15 + 20 + 15) / 64
    (5, 0): 63 / 64,
    (5, 1): 120 / 128,  # n = 7: (1 + 7 + 21 + 35 + 35 + 21) / 128
}


@pytest.mark.parametrize(("ab", "expected"), sorted(HAND_WORKED.items()))
def test_beta_stop_probability_matches_the_hand_worked_values(ab, expected):
    assert beta_stop_probability(np.array(ab[0]), np.array(ab[1])) == pytest.approx(expected)


def test_beta_stop_probability_is_the_papers_integral():
    x = np.linspace(0, 1, 400_001)
    for a, b in [(0, 0), (3, 2), (7, 1), (10, 9), (20, 3)]:
        f = x**a * (1 - x) ** b
        upper = np.trapezoid(f[x >= 0.5], x[x >= 0.5])
        assert beta_stop_probability(np.array(a), np.array(b)) == pytest.approx(
            upper / np.trapezoid(f, x), abs=1e-7
        )


def _view(answers: list[str], scores=None, cap=None) -> DrawView:
    codes = {a: i for i, a in enumerate(dict.fromkeys(answers))}
    ans = np.array([[[codes[a] for a in answers]]], dtype=np.int64)  # [T=1, Q=1, K]
    score = np.zeros(ans.shape) if scores is None else np.array([[scores]], dtype=np.float64)
    return DrawView(ans, score, None, np.array([cap or len(answers)]), n_max=64)


def _stop(name: str, answers, level, scores=None, cap=None) -> int:
    return int(PEERS[name].budgets(_view(answers, scores, cap), [level])[0, 0, 0])


def test_adaptive_consistency_stops_where_the_hand_worked_probability_clears_the_threshold():
    # AAB A A: P = .75 .875 .6875 .8125 .890625 -> never >= 0.95 in 5 draws: the cap
    assert _stop("adaptive-consistency", list("AABAA"), 0.95) == 5
    # AAAA: .75 .875 .9375 .96875 -> 0.95 first cleared at n = 4
    assert _stop("adaptive-consistency", list("AAAAAAA"), 0.95) == 4
    assert _stop("adaptive-consistency", list("AAAAAAA"), 0.9) == 3  # .9375 >= 0.9
    assert _stop("adaptive-consistency", list("ABAAAAA"), 0.8) == 4  # AB .5, ABA .6875, ABAA .8125
    assert _stop("adaptive-consistency", list("AAAAAAA"), 0.7) == 1  # one vote: 0.75
    assert _stop("adaptive-consistency", list("AAAAAAA"), 1.0) == 7  # 1.0: never (the cap)


def test_esc_stops_after_the_first_unanimous_window():
    seq = list("ABAA") + list("CCCC") + list("DDDDDDDD")
    assert _stop("esc-4", seq, 64) == 8  # window 1 split, window 2 all C
    assert _stop("esc-4", seq, 4) == 4  # at most 4 draws
    assert _stop("esc-8", seq, 64) == 16  # 1..8 split, 9..16 all D
    assert _stop("esc-4", list("AAAA") + list("BBBB"), 64) == 4
    assert _stop("esc-4", list("ABCDEFGH"), 64) == 8  # never unanimous: the cap


def test_score_threshold_stops_at_the_first_draw_that_clears_it():
    scores = [0.2, 0.5, 0.9, 0.95, 0.1]
    assert _stop("score-raw", list("ABCDE"), 0.8, scores) == 3
    assert _stop("score-raw", list("ABCDE"), 0.1, scores) == 1
    assert _stop("score-raw", list("ABCDE"), np.inf, scores) == 5
    view = _view(list("ABCDE"), scores)
    levels = PEERS["score-raw"].levels(view, TrainingScores(np.linspace(0, 1, 101)))
    assert levels[3] == pytest.approx(0.5) and levels[-1] == np.inf  # training quantiles


def test_running_top2_counts_the_two_leading_answers():
    rng = np.random.default_rng(0)
    ans = rng.integers(0, 5, (3, 4, 30))
    a, b = running_top2(ans)
    for idx in np.ndindex(3, 4):
        for n in range(30):
            top = [c for _, c in Counter(ans[idx][: n + 1].tolist()).most_common(2)] + [0]
            assert (a[idx][n], b[idx][n]) == (top[0], top[1])


def test_vote_lead_draws_the_closest_vote_next():
    # leads after n draws: q0 1, 2, 3 (agreeing); q1 1, 0, 1; q2 1, 0 (cap 2)
    lead = np.array([[1, 2, 3, 4], [1, 0, 1, 0], [1, 0, 0, 0]])
    seq = vote_lead_sequence(lead, np.array([4, 4, 2]))
    # q0 and q1 at lead 1 with one draw: q0 first (question order); q0 now lead 2. q1 (lead 1,
    # before q2 by order) -> lead 0 after its 2nd draw, the smallest: q1 again -> lead 1, n = 3.
    # Then q2 (lead 1, n = 1 < 3) -> its cap 2; q1 (lead 1) -> its cap 4; q0 (lead 2) twice.
    assert seq.tolist() == [0, 1, 1, 2, 1, 0, 0]  # sum(cap) - Q = 7 further draws
    budgets = matched_budgets(seq, 3, 8 / 3)  # total 8: one each + 5 further draws
    assert budgets.tolist() == [2, 4, 2] and budgets.sum() == 8


def test_first_stop_respects_each_questions_cap():
    signal = np.array([[[0.1, 0.2, 0.9], [0.9, 0.1, 0.1]]])
    assert first_stop(signal, 0.5, np.array([2, 3])).tolist() == [[2, 1]]
