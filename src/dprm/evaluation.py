"""Score calibrators on a calibration set: the metrics JSON of ``dprm evaluate`` (contract).

Per method: ``brier, pos_brier, neg_brier, ece, wql, calibration_area, crossing_rate, n`` (NaN
where undefined), ``wql_interior`` (the WQL over the levels 0.1..0.9 only, without the end levels
tau = 0 and 1), the comparison with the raw PRM score on the same records (``brier_vs_raw``,
``brier_vs_raw_se``, ``worse_than_raw``: :func:`versus_raw`) and, on synthetic sets with truth,
``quantile_error_true`` and ``crps_true``.

Conventions (docs/design.md §3; the branching is :func:`dprm.models.interface.predict`): point
estimates are the trapezoid mean over the 11 levels for
full-distribution calibrators, Q(0.5) for fixed-level ones (QR) and the value itself for point
calibrators (Base: the PRM score). WQL and the calibration area use the 11 levels; a point
calibrator has neither. The crossing rate is measured at 101 levels for continuous calibrators and
at the trained levels for fixed-level ones. Truth-based errors use the 100 mid-point levels; a
fixed-level calibrator is linearly interpolated between its levels there, and a point calibrator
counts as the point mass at its estimate.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dprm import metrics as M
from dprm.data.contract import CalibrationSet
from dprm.models.do_no_harm import clustered_difference, worse_than_raw
from dprm.models.interface import Calibrator, predict
from dprm.models.park_qr import score_input

METRIC_KEYS = (
    "brier",
    "pos_brier",
    "neg_brier",
    "ece",
    "wql",
    "calibration_area",
    "crossing_rate",
    "n",
)


def _interp_rows(q: np.ndarray, levels: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Row-wise linear interpolation of quantiles [N, L] at ``levels`` onto ``targets``."""
    idx = np.clip(np.searchsorted(levels, targets, side="right") - 1, 0, len(levels) - 2)
    w = (targets - levels[idx]) / (levels[idx + 1] - levels[idx])
    return q[:, idx] * (1 - w) + q[:, idx + 1] * w


def evaluate_calibrator(model: Calibrator, data: CalibrationSet, batch_size: int = 8192) -> dict:
    """All metrics of one calibrator on one calibration set."""
    records = data.records
    y = records["success_prob"].to_numpy(np.float64)
    score = score_input(model, records)  # the scores, plus the columns a calibrator reads
    hidden = data.hidden if model.uses_hidden else None
    nan = float("nan")
    out: dict[str, float] = {"n": int(len(y))}
    mid = M.midpoint_levels(100)
    pred = predict(model, hidden, score, M.LEVELS_101, batch_size)
    p = pred.p
    q_mid = None
    if pred.q is None:  # point
        out.update(wql=nan, wql_interior=nan, calibration_area=nan, crossing_rate=nan)
        q_mid = np.repeat(p[:, None], len(mid), axis=1) if data.has_truth else None
    elif pred.kind == "levels":
        out.update(
            wql=M.wql(pred.q, y, pred.levels),
            wql_interior=M.wql_interior(pred.q, y, pred.levels),
            calibration_area=M.calibration_area(pred.q, y, pred.levels),
            crossing_rate=M.crossing_rate(pred.q),
        )
        q_mid = _interp_rows(pred.q, pred.levels, mid) if data.has_truth else None
    else:
        q11 = pred.q[:, ::10]
        out.update(
            wql=M.wql(q11, y),
            wql_interior=M.wql_interior(q11, y),
            calibration_area=M.calibration_area(q11, y),
            crossing_rate=M.crossing_rate(pred.q),
        )
        if data.has_truth:
            q_mid = model.quantiles(hidden, mid, score, batch_size).astype(np.float64)
    out.update(
        brier=M.brier(p, y),
        pos_brier=M.pos_brier(p, y),
        neg_brier=M.neg_brier(p, y),
        ece=M.ece(p, y),
    )
    out.update(versus_raw(p, records))
    if data.has_truth and q_mid is not None:
        out["quantile_error_true"] = M.quantile_error_true(
            q_mid, records["true_mu"].to_numpy(), records["true_sigma"].to_numpy()
        )
        out["crps_true"] = (
            M.crps_true(q_mid, records["true_p"].to_numpy()) if "true_p" in records else nan
        )
    ordered = {k: out[k] for k in METRIC_KEYS}
    ordered.update({k: v for k, v in out.items() if k not in ordered})
    return ordered


def versus_raw(p: np.ndarray, records) -> dict[str, float | bool]:
    """Brier of estimates ``p`` [N] minus the raw PRM score's on the same records.

    Returns ``brier_vs_raw`` (positive: worse than the raw score), ``brier_vs_raw_se`` (its
    standard error clustered by question) and ``worse_than_raw`` (the difference is above
    ``NOISE_SE`` standard errors, :mod:`dprm.models.do_no_harm`).
    """
    y = records["success_prob"].to_numpy(np.float64)
    raw = records["prm_score"].to_numpy(np.float64).clip(0.0, 1.0)
    p = np.asarray(p, np.float64)
    delta, se = clustered_difference(
        (p - y) ** 2, (raw - y) ** 2, records["question_id"].to_numpy()
    )
    return {
        "brier_vs_raw": delta,
        "brier_vs_raw_se": se,
        "worse_than_raw": worse_than_raw(delta, se),
    }


def model_names(models: list[tuple[str, Calibrator]]) -> list[str]:
    """Unique display names: the method name, or ``method:dir`` when a method repeats."""
    methods = [m.method for _, m in models]
    return [m.method if methods.count(m.method) == 1 else f"{m.method}:{src}" for src, m in models]


def evaluate(
    data: CalibrationSet, models: Mapping[str, Calibrator] | None = None
) -> dict[str, dict]:
    """Metrics for Base, then each named calibrator, on ``data``."""
    from dprm.models.raw_score import RawScoreCalibrator

    results = {"base": evaluate_calibrator(RawScoreCalibrator(data.hidden_dim), data)}
    for name, model in (models or {}).items():
        results[name] = evaluate_calibrator(model, data)
    return results
