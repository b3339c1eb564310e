"""The race index of ``auto-seq`` under a majority vote with answers: the posterior probability
that the vote picks the gold answer after d more draws, in a race between the gold cluster and
its largest rival (:func:`race_wins`)."""

from __future__ import annotations

import functools

import numpy as np

#: the majority race index's look-ahead (draws) and the groups of consecutive prior samples it
#: merges (M = 100 samples -> 10 groups: the race's win probability is smooth in p)
RACE_HORIZON = 16
RACE_GROUPS = 10
RACE_GRID = 41  # grid points of the race table's up and down probabilities


@functools.cache
def race_table() -> np.ndarray:
    """P(L + shift > 0) + P(L + shift = 0) / 2 of a trinomial walk after d = 0..RACE_HORIZON
    steps (+1 with probability u, -1 with v, else 0), for leads L = -H - 1..H + 1 (H the
    horizon) and (u, v) on a ``RACE_GRID`` x ``RACE_GRID`` grid of [0, 1]^2 (points with
    u + v > 1 are rescaled to u + v = 1, only interpolation near that edge reads them).

    Returns:
        [H + 1, 2 H + 3, G, G].
    """
    horizon = RACE_HORIZON
    grid = np.linspace(0.0, 1.0, RACE_GRID)
    up, down = np.meshgrid(grid, grid, indexing="ij")
    total = np.maximum(up + down, 1.0)
    up, down = up / total, down / total
    stay = 1 - up - down
    dist = np.zeros((horizon + 1, RACE_GRID, RACE_GRID, 2 * horizon + 1))  # shift -H..H
    dist[0, :, :, horizon] = 1.0
    for d in range(1, horizon + 1):
        prev = dist[d - 1]
        dist[d] = prev * stay[..., None]
        dist[d, ..., 1:] += prev[..., :-1] * up[..., None]
        dist[d, ..., :-1] += prev[..., 1:] * down[..., None]
    lead = np.arange(-horizon - 1, horizon + 2)[:, None] + np.arange(-horizon, horizon + 1)
    credit = (lead > 0) + 0.5 * (lead == 0)  # [leads, shifts]
    return np.einsum("duvx,lx->dluv", dist, credit)


def race_wins(
    terms: np.ndarray,
    cluster_sizes: list[int],
    n_draws: int,
    p: np.ndarray,
    alpha: np.ndarray,
    group_start: np.ndarray,
    horizon: int,
) -> np.ndarray:
    """A question's posterior probability that a majority vote picks the gold answer after
    d = 0..horizon more draws [horizon + 1], in the race model of the vote.

    The current answers form clusters of sizes s_1..s_c; under the hypothesis "cluster j
    is gold" (j = 0: the gold answer is not drawn yet, a cluster of size 0) with success
    probability p, the vote is a race between the gold cluster and its largest rival
    (size r_j = max_{i != j} s_i): each further draw adds one to the gold cluster with
    probability p, one to the rival with probability (1 - p) max(r_j, 1) / (w_j + alpha(p))
    (a wrong draw joins the rival in the CRP; w_j the wrong draws so far) and otherwise
    leaves the lead L_j = s_j - r_j as it is. The vote is right when the lead is positive,
    and with probability 1/2 when it is 0 (the uniform tie-break of two). The lead's law
    after d draws is a trinomial walk (tabulated once: :func:`race_table`), summed over the
    hypotheses' joint posterior (consecutive prior samples merged into ``RACE_GROUPS``
    groups). The
    race ignores rivals other than the largest and the urn's reinforcement: an index, not
    the vote's exact law, but it knows what the curves g cannot: that 5 of 5 agreeing
    draws have settled the vote, and that a 2-2 tie is where a draw pays.

    Args:
        terms: [c + 1, M] log P(answers, H = j | p_m) of the question's draws (H = 0: no draw
            is correct; H = j: cluster j is gold).
        cluster_sizes: [c] the sizes of its answer clusters; n_draws: its draws so far.
        p: [M] the prior samples of p; alpha: [M] the wrong answers' CRP concentration at each.
        group_start: the first prior sample of each merged group (``RACE_GROUPS`` at most).
        horizon: the most further draws looked at (at most ``RACE_HORIZON``).

    Returns:
        [horizon + 1] the win probability after d = 0..horizon more draws.
    """
    post = np.exp(terms - terms.max())
    post /= post.sum()
    sizes = np.asarray(cluster_sizes, dtype=np.float64)
    n = float(n_draws)
    ordered = np.sort(sizes)[::-1]
    top = ordered[0] if len(ordered) else 0.0
    second = ordered[1] if len(ordered) > 1 else 0.0
    rival = np.concatenate([[top], np.where(sizes < top, top, second)])  # [c + 1]
    lead = np.concatenate([[-top], sizes - rival[1:]])
    wrong = np.concatenate([[n], n - sizes])
    share = np.minimum(np.maximum(rival, 1.0)[:, None] / (wrong[:, None] + alpha), 1.0)
    down = (1 - p) * share  # [c + 1, M]
    # merge consecutive samples: weights, and the weighted means of the step probabilities
    starts = group_start
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
    table = race_table()  # [RACE_HORIZON + 1, leads, G, G]
    last = RACE_GRID - 1
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
