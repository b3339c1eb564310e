"""Tests for :mod:`dprm.metrics` (docs/design.md §3).

Where our conventions coincide with a reference library the metric is checked against it:

* ``brier`` against scikit-learn's ``brier_score_loss`` on hard 0/1 labels (sklearn rejects
  soft labels, so soft labels are checked by hand);
* the pinball loss per level against scikit-learn's ``mean_pinball_loss(alpha=tau)``, which is a
  regression metric and therefore accepts soft labels too;
* ``ece`` against torchmetrics' ``BinaryCalibrationError(n_bins=12, norm="l1")``.

The ECE cross-check needs care. torchmetrics bins on ``linspace(0, 1, 13)`` with
``bucketize(right=True) - 1`` (bins [a, b), and p = 1.0 gets its own extra bin), whereas ours bins
on the widened ``linspace(-0.001, 1.001, 13)`` (bins [a, b), last one closed). Our edge i lies at
``-0.001 + i * 1.002 / 12`` and torchmetrics' at ``i / 12``; the two differ by
``-0.001 + i * 0.002 / 12``, i.e. by at most 0.001 in absolute value. A prediction drawn from
``[(i + 0.05) / 12, (i + 0.95) / 12]`` is at least ``0.05 / 12 > 0.004`` away from every
torchmetrics edge, hence also more than 0.003 away from every one of ours, so it lands in bin i
under both conventions. On such inputs the two ECEs must agree; the test additionally asserts
that the binnings coincide so the construction itself is checked. Predictions stay inside
[0, 1] (torchmetrics would apply a sigmoid otherwise). With ``validate_args=False``
torchmetrics accepts soft targets and computes the same per-bin |mean p - mean y| average.
Values exactly on edges, where the libraries disagree, are checked by hand against the rule of
docs/design.md §3 (an edge value belongs to the upper bin; 1.001 to the last bin).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dprm import metrics as M

RNG_SEEDS = [0, 1, 2]


# ----------------------------------------------------------------------------- helpers
def _inside_bin_predictions(rng: np.random.Generator, n: int) -> np.ndarray:
    """Predictions well inside the 12 bins, so our binning and torchmetrics' coincide."""
    bins = rng.integers(0, 12, size=n)
    return (bins + rng.uniform(0.05, 0.95, size=n)) / 12.0


def _torchmetrics_ece(p: np.ndarray, y: np.ndarray, *, soft: bool) -> float:
    # imported here: torchmetrics pulls in transformers and scipy (seconds of import time)
    torch = pytest.importorskip("torch")
    classification = pytest.importorskip("torchmetrics.classification")
    metric = classification.BinaryCalibrationError(n_bins=12, norm="l1", validate_args=not soft)
    target = torch.tensor(y, dtype=torch.float64) if soft else torch.tensor(y, dtype=torch.long)
    metric.update(torch.tensor(p, dtype=torch.float64), target)
    return float(metric.compute())


def _sklearn_metrics():
    return pytest.importorskip("sklearn.metrics")


def _ece_by_hand(p: np.ndarray, y: np.ndarray, bins: np.ndarray) -> float:
    total = 0.0
    for b in np.unique(bins):
        sel = bins == b
        total += sel.sum() / len(p) * abs(p[sel].mean() - y[sel].mean())
    return total


# ----------------------------------------------------------------------------- Brier
@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_brier_matches_sklearn_on_hard_labels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 1, 200)
    y = (rng.uniform(0, 1, 200) < 0.4).astype(np.float64)
    assert M.brier(p, y) == pytest.approx(_sklearn_metrics().brier_score_loss(y, p), abs=1e-12)


def test_brier_soft_labels_by_hand() -> None:
    p = np.array([0.9, 0.2, 0.5, 0.0])
    y = np.array([0.5, 0.375, 0.5, 1.0])
    # (0.4^2 + 0.175^2 + 0 + 1^2) / 4
    assert M.brier(p, y) == pytest.approx((0.16 + 0.030625 + 0.0 + 1.0) / 4, abs=1e-12)
    # over-estimation only in record 0, under-estimation in records 1 and 3
    assert M.pos_brier(p, y) == pytest.approx(0.16 / 4, abs=1e-12)
    assert M.neg_brier(p, y) == pytest.approx((0.030625 + 1.0) / 4, abs=1e-12)


@settings(max_examples=60, deadline=None, database=None)
@given(
    st.integers(min_value=1, max_value=40).flatmap(
        lambda n: st.tuples(
            arrays(np.float64, n, elements=st.floats(0, 1, allow_nan=False)),
            arrays(np.float64, n, elements=st.floats(0, 1, allow_nan=False)),
        )
    )
)
def test_pos_plus_neg_brier_is_brier(py: tuple[np.ndarray, np.ndarray]) -> None:
    p, y = py
    pos, neg, total = M.pos_brier(p, y), M.neg_brier(p, y), M.brier(p, y)
    assert pos >= 0 and neg >= 0
    assert pos + neg == pytest.approx(total, rel=1e-12, abs=1e-15)


def test_brier_family_empty_is_nan() -> None:
    for fn in (M.brier, M.pos_brier, M.neg_brier, M.ece):
        assert np.isnan(fn([], []))


# ----------------------------------------------------------------------------- ECE
@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_ece_matches_torchmetrics_hard_labels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = _inside_bin_predictions(rng, 500)
    # miscalibrated in both directions (one-sided miscalibration would make any binning agree)
    y = (rng.uniform(0, 1, 500) < np.clip(p + 0.3 * np.sin(6 * p), 0, 1)).astype(np.float64)
    np.testing.assert_array_equal(M.ece_bins(p), np.floor(p * 12).astype(int))
    ours = M.ece(p, y)
    assert ours > 0.05  # the fixture is really miscalibrated
    assert ours == pytest.approx(_torchmetrics_ece(p, y, soft=False), abs=1e-9)
    assert ours == pytest.approx(_ece_by_hand(p, y, M.ece_bins(p)), abs=1e-12)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_ece_matches_torchmetrics_soft_labels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = _inside_bin_predictions(rng, 400)
    y = rng.integers(0, 9, size=400) / 8.0  # Monte Carlo success_prob, k/8
    np.testing.assert_array_equal(M.ece_bins(p), np.floor(p * 12).astype(int))
    assert M.ece(p, y) == pytest.approx(_torchmetrics_ece(p, y, soft=True), abs=1e-9)


def test_ece_bins_exact_edges_go_to_upper_bin() -> None:
    edges = M.ECE_EDGES
    assert len(edges) == 13
    assert edges[0] == pytest.approx(-0.001) and edges[-1] == pytest.approx(1.001)
    # every interior edge is the lower (closed) end of the bin above it
    np.testing.assert_array_equal(M.ece_bins(edges[:-1]), np.arange(12))
    # the upper end of the range belongs to the last (closed) bin
    assert M.ece_bins([1.001]).tolist() == [11]
    assert M.ece_bins([edges[-1]]).tolist() == [11]
    # just below an edge stays in the lower bin
    below = np.nextafter(edges[1:-1], -np.inf)
    np.testing.assert_array_equal(M.ece_bins(below), np.arange(11))
    # 0 and 1 are interior to the first and last bins
    assert M.ece_bins([0.0, 1.0]).tolist() == [0, 11]


def test_ece_on_edges_by_hand() -> None:
    edges = M.ECE_EDGES
    # two predictions exactly on the edge between bins 2 and 3, one just below it
    e = edges[3]
    p = np.array([e, e, np.nextafter(e, -np.inf), 1.001, 0.95])
    y = np.array([1.0, 1.0, 0.0, 1.0, 1.0])
    # bin 3: {e, e} -> |e - 1|; bin 2: {e-} -> |e - 0|; bin 11: {1.001, 0.95} -> |0.9755 - 1|
    expected = (2 * abs(e - 1.0) + 1 * abs(e - 0.0) + 2 * abs(0.9755 - 1.0)) / 5
    assert M.ece(p, y) == pytest.approx(expected, abs=1e-12)
    # had the edge values gone to the lower bin, bin 2 would hold all three
    wrong = (3 * abs(e - 2 / 3) + 2 * abs(0.9755 - 1.0)) / 5
    assert abs(expected - wrong) > 0.05
    # had 1.001 got a bin of its own (torchmetrics' rule for its upper end), bin 11 would split
    split = (2 * abs(e - 1.0) + abs(e) + abs(1.001 - 1.0) + abs(0.95 - 1.0)) / 5
    assert abs(expected - split) > 1e-4


def test_ece_empty_bins_count_zero_and_perfect_calibration_is_zero() -> None:
    p = np.array([0.05, 0.05, 0.95, 0.95])
    y = np.array([0.05, 0.05, 0.95, 0.95])
    assert M.ece(p, y) == 0.0
    # one-sided: ECE = |mean p - mean y| whatever the binning
    assert M.ece(p, y - 0.05) == pytest.approx(0.05, abs=1e-12)


def test_ece_rejects_predictions_out_of_range() -> None:
    with pytest.raises(ValueError, match="predictions must lie in"):
        M.ece([0.5, 1.01], [0.0, 1.0])
    with pytest.raises(ValueError, match="predictions must lie in"):
        M.ece_bins([-0.01])


# ----------------------------------------------------------------------------- pinball / WQL
@pytest.mark.parametrize("soft", [False, True])
def test_pinball_matches_sklearn_per_level(soft: bool) -> None:
    rng = np.random.default_rng(7)
    n = 150
    y = rng.integers(0, 9, n) / 8.0 if soft else (rng.uniform(size=n) < 0.5).astype(np.float64)
    q = np.sort(rng.uniform(0, 1, (n, 11)), axis=1)
    mean_pinball_loss = _sklearn_metrics().mean_pinball_loss
    loss = M.pinball(q, y, M.LEVELS_11)
    assert loss.shape == (n, 11)
    for j, tau in enumerate(M.LEVELS_11):
        ref = mean_pinball_loss(y, q[:, j], alpha=float(tau))
        assert loss[:, j].mean() == pytest.approx(ref, abs=1e-12)
    refs = [mean_pinball_loss(y, q[:, j], alpha=float(t)) for j, t in enumerate(M.LEVELS_11)]
    assert M.wql(q, y) == pytest.approx(np.mean(refs), abs=1e-12)


def test_wql_two_records_by_hand() -> None:
    levels = np.array([0.0, 0.5, 1.0])
    y = np.array([0.25, 1.0])
    q = np.array([[0.0, 0.5, 1.0], [0.5, 0.5, 0.5]])
    # record 0: u = y - q = [0.25, -0.25, -0.75]
    #   tau=0: max(0, -u) = 0 ; tau=0.5: 0.125 ; tau=1: max(u, 0) = 0 ... (tau-1)*u for u<0
    #   rho_0(0.25) = max(0, -0.25) = 0; rho_0.5(-0.25) = 0.125; rho_1(-0.75) = max(-0.75, 0) = 0
    # record 1: u = [0.5, 0.5, 0.5]
    #   rho_0(0.5) = max(0, -0.5) = 0; rho_0.5(0.5) = 0.25; rho_1(0.5) = 0.5
    # per level means over records: [0, 0.1875, 0.25] -> mean 0.4375 / 3
    assert M.wql(q, y, levels) == pytest.approx(0.4375 / 3, abs=1e-12)
    np.testing.assert_allclose(M.pinball(q, y, levels), [[0, 0.125, 0], [0, 0.25, 0.5]])


def test_wql_interior_drops_the_end_levels_by_hand() -> None:
    levels = np.array([0.0, 0.5, 1.0])
    y = np.array([0.25, 1.0])
    q = np.array([[0.0, 0.5, 1.0], [0.5, 0.5, 0.5]])
    # only tau = 0.5 is interior: rho_0.5 = 0.125 (record 0) and 0.25 (record 1) -> 0.1875
    assert M.wql_interior(q, y, levels) == pytest.approx(0.1875, abs=1e-12)
    # a QR-like head exact at the ends but wrong inside: the full WQL hides a third of the error
    q_ends = np.array([[0.25, 0.0, 0.25], [1.0, 0.0, 1.0]])
    # interior: rho_0.5(0.25) = 0.125, rho_0.5(1.0) = 0.5 -> 0.3125; ends: 0
    assert M.wql_interior(q_ends, y, levels) == pytest.approx(0.3125, abs=1e-12)
    assert M.wql(q_ends, y, levels) == pytest.approx(0.3125 / 3, abs=1e-12)
    # on the 11 levels the interior ones are 0.1..0.9
    q11 = np.tile(M.LEVELS_11, (2, 1))
    y2 = np.array([0.0, 1.0])
    interior = M.LEVELS_11[1:-1]
    # record 0 (y = 0): rho_t(-t) = (1 - t) t; record 1 (y = 1): rho_t(1 - t) = t (1 - t)
    expected = float(np.mean(interior * (1 - interior)))
    assert M.wql_interior(q11, y2) == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError):
        M.wql_interior(np.zeros((2, 10)), y2)


def test_wql_default_levels_are_the_eleven() -> None:
    np.testing.assert_allclose(M.LEVELS_11, np.arange(11) / 10, atol=1e-12)
    y = np.array([0.3])
    q = np.full((1, 11), 0.3)
    assert M.wql(q, y) == 0.0
    assert np.isnan(M.wql(np.zeros((0, 11)), np.zeros(0)))


# ----------------------------------------------------------------------------- quantile curves
def test_coverage_and_calibration_area_by_hand() -> None:
    levels = np.array([0.0, 0.5, 1.0])
    y = np.array([0.0, 0.5, 1.0, 0.25])
    q = np.array(
        [
            [0.0, 0.2, 1.0],  # y=0: covered at all levels (y <= Q is inclusive)
            [0.1, 0.4, 0.45],  # y=0.5: covered nowhere
            [0.5, 0.6, 1.0],  # y=1: covered at tau=1 only
            [0.0, 0.25, 0.3],  # y=0.25: covered at 0.5 and 1
        ]
    )
    cov = M.coverage(q, y)
    np.testing.assert_allclose(cov, [0.25, 0.5, 0.75])
    # |0.25 - 0| + |0.5 - 0.5| + |0.75 - 1| = 0.5 -> mean 0.5/3
    assert M.calibration_area(q, y, levels) == pytest.approx(0.5 / 3, abs=1e-12)


def test_calibration_area_zero_for_true_quantiles_in_the_limit() -> None:
    rng = np.random.default_rng(3)
    y = rng.uniform(0, 1, 20000)
    q = np.tile(M.LEVELS_11, (len(y), 1))  # the true quantiles of U(0, 1)
    assert M.calibration_area(q, y) < 0.01


def test_crossing_rate_by_hand() -> None:
    q = np.array([[0.1, 0.2, 0.15, 0.3], [0.5, 0.4, 0.3, 0.3], [0.0, 0.0, 0.0, 0.0]])
    # record 0: one crossing of 3 pairs; record 1: two; record 2: none (ties are not crossings)
    assert M.crossing_rate(q) == pytest.approx(3 / 9)
    assert M.crossing_rate(np.sort(q, axis=1)) == 0.0
    assert np.isnan(M.crossing_rate(np.zeros((0, 11))))
    assert np.isnan(M.crossing_rate(np.zeros((4, 1))))


def test_trapezoid_mean_of_linear_quantile_function_is_exact() -> None:
    a = np.array([0.0, 0.1, 0.3, 0.5])
    b = np.array([1.0, 0.5, 0.2, 0.0])
    q11 = a[:, None] + b[:, None] * M.LEVELS_11[None, :]
    np.testing.assert_allclose(M.trapezoid_mean(q11), a + b / 2, atol=1e-12)


def test_trapezoid_mean_of_step_function() -> None:
    # Q = 0 up to tau=0.5 and 1 from tau=0.6: trapezoids give 0.5*0.1 + 4*0.1 = 0.45
    q11 = (M.LEVELS_11 >= 0.6).astype(float)[None, :]
    assert M.trapezoid_mean(q11)[0] == pytest.approx(0.45, abs=1e-12)


# ----------------------------------------------------------------------------- truth metrics
def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def test_true_quantiles_closed_form() -> None:
    levels = np.array([0.025, 0.5, 0.975])
    q = M.true_quantiles([0.0, 1.0, 0.0, -2.0], [0.0, 0.0, 1.0, 2.0], levels)
    assert q.shape == (4, 3)
    np.testing.assert_allclose(q[0], 0.5, atol=1e-15)  # mu=0, sigma=0: a point mass at 1/2
    np.testing.assert_allclose(q[1], _sigmoid(1.0), atol=1e-15)  # sigma=0: point mass
    z975 = 1.959963984540054  # standard normal 0.975 quantile
    np.testing.assert_allclose(q[2], _sigmoid(np.array([-z975, 0.0, z975])), atol=1e-9)
    np.testing.assert_allclose(q[3], _sigmoid(-2.0 + 2.0 * np.array([-z975, 0, z975])), atol=1e-9)
    # symmetry for mu=0: Q(tau) + Q(1 - tau) = 1; monotone in tau
    assert q[2, 0] + q[2, 2] == pytest.approx(1.0, abs=1e-12)
    grid = M.true_quantiles([0.3], [1.5], M.midpoint_levels(100))
    assert np.all(np.diff(grid[0]) > 0)


def test_true_quantiles_end_levels_are_finite() -> None:
    q = M.true_quantiles([0.0], [1.0], [0.0, 1.0])
    assert np.all(np.isfinite(q)) and 0.0 <= q[0, 0] < 0.5 < q[0, 1] <= 1.0


def test_midpoint_levels() -> None:
    np.testing.assert_allclose(M.midpoint_levels(4), [0.125, 0.375, 0.625, 0.875])
    assert M.midpoint_levels().shape == (100,)
    assert M.midpoint_levels().mean() == pytest.approx(0.5, abs=1e-15)


def test_quantile_error_true_zero_for_perfect_quantiles() -> None:
    mu, sigma = np.array([-1.0, 0.0, 2.0]), np.array([0.5, 1.0, 0.0])
    perfect = M.true_quantiles(mu, sigma, M.midpoint_levels(100))
    assert M.quantile_error_true(perfect, mu, sigma) == pytest.approx(0.0, abs=1e-15)
    # a constant shift by 0.01 gives an error of exactly 0.01
    assert M.quantile_error_true(perfect + 0.01, mu, sigma) == pytest.approx(0.01, abs=1e-12)


@pytest.mark.parametrize(("c", "x"), [(0.3, 0.8), (0.8, 0.3), (0.5, 0.5), (0.0, 1.0)])
def test_crps_true_of_a_point_mass_is_absolute_error(c: float, x: float) -> None:
    # With all quantiles equal to c, 2 * mean_tau rho_tau(x - c) = 2 * |x - c| * mean(tau or
    # 1 - tau), and the mid-point levels average exactly 1/2: the relation is exact, not
    # merely a 1e-3 approximation.
    q_mid = np.full((1, 100), c)
    assert M.crps_true(q_mid, [x]) == pytest.approx(abs(x - c), abs=1e-12)


def test_crps_true_of_uniform_matches_closed_form() -> None:
    # CRPS(U(0,1), x) = x^3/3 + (1-x)^3/3; the mid-point rule on 100 levels is O(1/M^2) away
    x = np.array([0.0, 0.2, 0.5, 0.9])
    q_mid = np.tile(M.midpoint_levels(100), (len(x), 1))
    per_record = [M.crps_true(q_mid[i : i + 1], x[i : i + 1]) for i in range(len(x))]
    np.testing.assert_allclose(per_record, x**3 / 3 + (1 - x) ** 3 / 3, atol=1e-4)
    assert M.crps_true(q_mid, x) == pytest.approx(np.mean(per_record), abs=1e-12)


# ----------------------------------------------------------------------------- bad shapes
def test_errors_on_wrong_shapes() -> None:
    with pytest.raises(ValueError, match="same length"):
        M.brier([0.1, 0.2], [0.1])
    with pytest.raises(ValueError, match="1-D"):
        M.brier(np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="same length"):
        M.ece([0.1, 0.2, 0.3], [0.0, 1.0])
    with pytest.raises(ValueError, match=r"q must have shape \[N, L\]"):
        M.wql(np.zeros((3, 10)), np.zeros(3))
    with pytest.raises(ValueError, match=r"q must have shape \[N, L\]"):
        M.pinball(np.zeros((2, 11)), np.zeros(3), M.LEVELS_11)
    with pytest.raises(ValueError, match=r"shape \[N, 11\]"):
        M.trapezoid_mean(np.zeros((3, 10)))
    with pytest.raises(ValueError, match=r"shape \[N, 11\]"):
        M.trapezoid_mean(np.zeros(11))
    with pytest.raises(ValueError, match="1-D"):
        M.crps_true(np.zeros((2, 100)), np.zeros((2, 1)))
    # a single label must not broadcast silently against five rows of quantiles
    with pytest.raises(ValueError, match=r"q must have shape \[N, L\]"):
        M.calibration_area(np.zeros((5, 11)), np.zeros(1))
    with pytest.raises(ValueError, match=r"q must have shape \[N, L\]"):
        M.coverage(np.zeros(5), np.zeros(5))
    with pytest.raises(ValueError, match="levels must have shape"):
        M.calibration_area(np.zeros((5, 11)), np.zeros(5), levels=np.linspace(0, 1, 5))
    with pytest.raises(ValueError, match="levels must have shape"):
        M.calibration_area(np.zeros((5, 1)), np.zeros(5), levels=[0.0, 0.5])
    with pytest.raises(ValueError, match=r"q must have shape \[N, L\]"):
        M.crossing_rate(np.zeros(11))
    with pytest.raises(ValueError, match="q_mid must have shape"):
        M.quantile_error_true(np.zeros((1, 100)), np.zeros(5), np.ones(5))
    with pytest.raises(ValueError, match="q_mid must have shape"):
        M.quantile_error_true(np.zeros(100), np.zeros(1), np.ones(1))


def test_linear_r2_hand_cases():
    """A target linear in h is recovered (R² -> 1); one independent of h scores <= ~0; the
    held-out mean predictor scores 0 by definition."""
    from dprm.metrics import linear_r2

    rng = np.random.default_rng(0)
    h_train, h_test = rng.normal(size=(2000, 5)), rng.normal(size=(500, 5))
    w = np.array([1.0, -2.0, 0.5, 0.0, 3.0])
    assert linear_r2(h_train, h_train @ w, h_test, h_test @ w) > 0.999
    noise_train, noise_test = rng.normal(size=2000), rng.normal(size=500)
    assert linear_r2(h_train, noise_train, h_test, noise_test) < 0.01
    # squares of h are invisible to a linear readout (E[x^2 x] = 0 for a symmetric x)
    assert linear_r2(h_train, h_train[:, 0] ** 2, h_test, h_test[:, 0] ** 2) < 0.02


def test_median_ece_ceiling_hand_worked():
    # median 0.25 (even count: mean of the middle two), |y - 0.25| = .25, 0, 0, .75 -> 0.25
    assert M.median_ece_ceiling([0.0, 0.25, 0.25, 1.0]) == pytest.approx(0.25)
    assert M.median_ece_ceiling([0.4] * 5) == 0.0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_a_conditional_median_never_has_ece_above_the_ceiling(seed):
    """The bound behind docs/synth.md's unreachable QR cells: the per-group median of y (the
    converged median given a discrete feature) has ECE <= E|y - median(y)|, however skewed."""
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, rng.integers(1, 30), size=400)
    y = rng.binomial(8, rng.beta(0.3, 0.6, size=groups.max() + 1)[groups]) / 8
    median = np.zeros_like(y)
    for g in np.unique(groups):
        median[groups == g] = np.median(y[groups == g])
    assert M.ece(median, y) <= np.mean(np.abs(y - median)) + 1e-12
    assert M.ece(median, y) <= M.median_ece_ceiling(y) + 1e-12
    assert M.median_ece_ceiling(y) <= min(y.mean(), 1 - y.mean()) + 1e-12
