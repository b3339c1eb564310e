"""Calibration metrics as plain functions over arrays (docs/design.md §3).

Notation: ``p`` point estimates [N], ``y`` success_prob labels [N] in [0, 1], ``q`` quantiles
[N, L] at ``levels`` [L]. Every function returns a Python float; NaN means undefined.
"""

from __future__ import annotations

import numpy as np

#: The 11 levels {0, 0.1, ..., 1} of the paper's WQL, trapezoid point estimate and QR head.
LEVELS_11 = np.round(np.linspace(0.0, 1.0, 11), 10)
#: The 101 levels {0, 0.01, ..., 1}: crossing rates and quantile curves of continuous calibrators.
LEVELS_101 = np.linspace(0.0, 1.0, 101)
#: ECE bin edges: 12 equal-width bins on a range widened past [0, 1] (docs/design.md §3).
ECE_EDGES = np.linspace(-0.001, 1.001, 13)


def midpoint_levels(m: int = 100) -> np.ndarray:
    """Levels (i - 0.5) / m, i = 1..m: the grid for truth errors and the IAS mixture."""
    return (np.arange(1, m + 1) - 0.5) / m


def _as_1d(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    return arr


def _pair(p, y) -> tuple[np.ndarray, np.ndarray]:
    p, y = _as_1d(p, "p"), _as_1d(y, "y")
    if p.shape != y.shape:
        raise ValueError(f"p and y must have the same length, got {p.shape} and {y.shape}")
    return p, y


def brier(p, y) -> float:
    """Mean squared error of point estimates against success_prob."""
    p, y = _pair(p, y)
    return float(np.mean((p - y) ** 2)) if len(p) else float("nan")


def pos_brier(p, y) -> float:
    """Over-estimation part of the Brier score: mean max(p - y, 0)^2."""
    p, y = _pair(p, y)
    return float(np.mean(np.maximum(p - y, 0.0) ** 2)) if len(p) else float("nan")


def neg_brier(p, y) -> float:
    """Under-estimation part of the Brier score: mean min(p - y, 0)^2; pos + neg = Brier."""
    p, y = _pair(p, y)
    return float(np.mean(np.minimum(p - y, 0.0) ** 2)) if len(p) else float("nan")


def ece_bins(p) -> np.ndarray:
    """Bin index [N] of each prediction: bins [a, b) on ``ECE_EDGES``, the last bin closed."""
    p = _as_1d(p, "p")
    if ((p < ECE_EDGES[0]) | (p > ECE_EDGES[-1])).any():
        raise ValueError(f"predictions must lie in [{ECE_EDGES[0]}, {ECE_EDGES[-1]}]")
    idx = np.searchsorted(ECE_EDGES, p, side="right") - 1
    return np.minimum(idx, len(ECE_EDGES) - 2)


def ece(p, y) -> float:
    """Expected calibration error with 12 equal-width bins: sum_b n_b/N |mean p_b - mean y_b|."""
    p, y = _pair(p, y)
    if not len(p):
        return float("nan")
    bins = ece_bins(p)
    n_bins = len(ECE_EDGES) - 1
    sum_p = np.bincount(bins, weights=p, minlength=n_bins)
    sum_y = np.bincount(bins, weights=y, minlength=n_bins)
    return float(np.sum(np.abs(sum_p - sum_y)) / len(p))


def pinball_rho(target, quantile, tau):
    """rho_tau(y - q) = max(tau u, (tau - 1) u), u = y - q, elementwise (broadcasting).

    The one definition of the pinball loss: numpy arrays here (the WQL metric), torch tensors
    in the training objectives of ``qr`` and ``mono`` (differentiable, same formula).
    """
    u = target - quantile
    lower, upper = tau * u, (tau - 1.0) * u
    return np.maximum(lower, upper) if isinstance(lower, np.ndarray) else lower.maximum(upper)


def pinball(q, y, levels) -> np.ndarray:
    """Pinball loss rho_tau(y - q) per record and level [N, L] (validated shapes)."""
    q = np.asarray(q, dtype=np.float64)
    y = _as_1d(y, "y")[:, None]
    tau = np.asarray(levels, dtype=np.float64)[None, :]
    if q.ndim != 2 or q.shape != (y.shape[0], tau.shape[1]):
        raise ValueError(f"q must have shape [N, L] = {(y.shape[0], tau.shape[1])}, got {q.shape}")
    return pinball_rho(y, q, tau)


def wql(q, y, levels=LEVELS_11) -> float:
    """Weighted quantile loss as the paper uses it: pinball averaged over records, then levels."""
    if not len(y):
        return float("nan")
    return float(np.mean(pinball(q, y, levels).mean(axis=0)))


def wql_interior(q, y, levels=LEVELS_11) -> float:
    """WQL over the interior levels only (0 < tau < 1; tau = 0.1..0.9 on the 11 levels).

    At tau = 0 and tau = 1 the pinball loss only charges a quantile above the smallest or below
    the largest label, so a head that predicts 0 and 1 there scores ~0 whatever it knows about
    h; this variant compares the part of the distribution the levels in between describe.
    """
    levels = np.asarray(levels, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 2 or q.shape[1] != levels.shape[0]:
        raise ValueError(f"q must have shape [N, {levels.shape[0]}], got {q.shape}")
    inside = (levels > 0.0) & (levels < 1.0)
    if not inside.any():
        return float("nan")
    return wql(q[:, inside], y, levels[inside])


def coverage(q, y) -> np.ndarray:
    """Quantile calibration curve [L]: share of records with y <= Q(tau)."""
    q = np.asarray(q, dtype=np.float64)
    y = _as_1d(y, "y")
    if q.ndim != 2 or q.shape[0] != y.shape[0]:
        raise ValueError(f"q must have shape [N, L] with N = {y.shape[0]}, got {q.shape}")
    return np.mean(y[:, None] <= q, axis=0)


def calibration_area(q, y, levels=LEVELS_11) -> float:
    """Mean over levels of |coverage(tau) - tau| (the early-stopping score)."""
    if not len(y):
        return float("nan")
    cov, levels = coverage(q, y), np.asarray(levels, dtype=np.float64)
    if levels.shape != cov.shape:
        raise ValueError(
            f"levels must have shape {cov.shape} (one per column of q), got {levels.shape}"
        )
    return float(np.mean(np.abs(cov - levels)))


def crossing_rate(q) -> float:
    """Share of (record, adjacent level pair) with Q(tau_{m+1}) < Q(tau_m)."""
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 2:
        raise ValueError(f"q must have shape [N, L], got {q.shape}")
    if q.shape[1] < 2 or q.shape[0] == 0:
        return float("nan")
    return float(np.mean(np.diff(q, axis=1) < 0))


def trapezoid_mean(q11) -> np.ndarray:
    """Point estimate integral_0^1 Q dtau by the trapezoid rule on the 11 levels [N]."""
    q11 = np.asarray(q11, dtype=np.float64)
    if q11.ndim != 2 or q11.shape[1] != len(LEVELS_11):
        raise ValueError(f"expected quantiles at the 11 levels, shape [N, 11], got {q11.shape}")
    return (q11[:, :-1] + q11[:, 1:]).sum(axis=1) * 0.5 / (len(LEVELS_11) - 1)


# ----------------------------------------------------------------------------- truth-based
def true_quantiles(true_mu, true_sigma, levels) -> np.ndarray:
    """Quantiles [N, L] of the synthetic worlds' truth, p = sigmoid(mu + sigma * xi)."""
    from statistics import NormalDist

    z = np.array([NormalDist().inv_cdf(float(t)) for t in np.clip(levels, 1e-12, 1 - 1e-12)])
    logit = (
        np.asarray(true_mu, np.float64)[:, None] + np.asarray(true_sigma, np.float64)[:, None] * z
    )
    return 1.0 / (1.0 + np.exp(-logit))


def quantile_error_true(q_mid, true_mu, true_sigma) -> float:
    """Mean |Q_hat(tau) - Q_true(tau)| over records and the 100 mid-point levels.

    Args:
        q_mid: predicted quantiles [N, M] at ``midpoint_levels(M)``.
    """
    q_mid = np.asarray(q_mid, dtype=np.float64)
    if q_mid.ndim != 2:
        raise ValueError(f"q_mid must have shape [N, M], got {q_mid.shape}")
    truth = true_quantiles(true_mu, true_sigma, midpoint_levels(q_mid.shape[1]))
    if truth.shape != q_mid.shape:
        raise ValueError(
            f"q_mid must have shape {truth.shape} (one row per true_mu), got {q_mid.shape}"
        )
    return float(np.mean(np.abs(q_mid - truth)))


def crps_true(q_mid, true_p) -> float:
    """CRPS of the predicted distribution at the realised true p, 2 x mean pinball on mid-points.

    CRPS(F, x) = integral_0^1 2 rho_tau(x - F^-1(tau)) dtau; the mid-point rule on M levels.
    """
    q_mid = np.asarray(q_mid, dtype=np.float64)
    return float(2.0 * np.mean(pinball(q_mid, true_p, midpoint_levels(q_mid.shape[1]))))


def linear_r2(
    train_hidden: np.ndarray,
    train_target: np.ndarray,
    test_hidden: np.ndarray,
    test_target: np.ndarray,
    alpha: float = 1.0,
) -> float:
    """Held-out R² of a ridge regression of ``target`` on standardised h: how *linearly*
    decodable a quantity is from the hidden state (the twin's linear R², docs/synth.md).

    Args:
        train_hidden: [n, d] hidden states the ridge is fitted on.
        train_target: [n] the target on those rows (e.g. the true success logit ``true_mu``).
        test_hidden: [m, d] held-out hidden states.
        test_target: [m] the target on the held-out rows.
        alpha: ridge penalty on the standardised scale.

    Returns:
        1 − mean squared held-out residual / variance of ``test_target`` (negative when the
        linear readout is worse than the held-out mean).
    """
    train_hidden = np.asarray(train_hidden, dtype=np.float64)
    test_hidden = np.asarray(test_hidden, dtype=np.float64)
    mean, scale = train_hidden.mean(0), train_hidden.std(0) + 1e-6
    a = (train_hidden - mean) / scale
    b = (test_hidden - mean) / scale
    centre = float(np.mean(train_target))
    weight = np.linalg.solve(a.T @ a + alpha * np.eye(a.shape[1]), a.T @ (train_target - centre))
    resid = np.asarray(test_target) - (b @ weight + centre)
    return float(1 - np.mean(resid**2) / np.var(test_target))


def median_ece_ceiling(y) -> float:
    """The largest ECE a converged median predictor can have on labels ``y``: E|y − median(y)|.

    A point estimate m(h) that is the conditional median of y given any features of h (or the
    pinball-loss minimiser over any model class that contains the constants, e.g. a converged
    linear QR's τ = 0.5 head) has E|y − m(h)| ≤ E|y − median(y)|, because the constant median
    is one of the candidates it beats. ECE is at most the mean absolute error (triangle
    inequality in each bin). So in distribution, ECE(m) ≤ E|y − median(y)| ≤ min(E y, 1 − E y)
    for y in [0, 1]. Population statement: a fit on finite data can exceed it by its
    estimation error. Used to show which of the paper's QR cells no converged QR can reach
    (docs/synth.md).

    Args:
        y: [n] labels (success rates in [0, 1]).

    Returns:
        The mean absolute deviation of ``y`` around its median.
    """
    y = _as_1d(y, "y")
    return float(np.mean(np.abs(y - np.median(y))))
