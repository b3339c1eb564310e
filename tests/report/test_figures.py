"""Figures render to PNG + PDF (Agg backend) from tidy frames, for any set of methods."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from dprm import ias  # noqa: E402
from dprm.metrics import midpoint_levels, true_quantiles  # noqa: E402
from dprm.report import figures as F  # noqa: E402


@pytest.fixture(scope="module")
def ias_frame():
    """Real sweeps (oracle estimates) for two generators x two datasets, two seeds."""
    frames = []
    for g, gen in enumerate(["gen-a", "gen-b"]):
        for dataset in ("id", "ood"):
            rng = np.random.default_rng(g * 10 + len(dataset))
            q_count = 25
            mu, sigma = rng.normal(-0.5 * g, 1.2, q_count), rng.uniform(0.4, 1.2, q_count)
            p = 1 / (1 + np.exp(-mu))
            correct = rng.random((q_count, 64)) < p[:, None]
            score = 1 / (
                1 + np.exp(-(1.0 + 1.5 * (2 * correct - 1) + rng.normal(0, 1, correct.shape)))
            )
            pools = ias.Pools.from_arrays(list(score), list(correct))
            levels = np.concatenate([midpoint_levels(100), ias.BETA_GRID])
            q = true_quantiles(mu, sigma, levels)
            est = [
                ias.Estimate("base", "point", p=np.clip(p + 0.3, 0, 1)),
                ias.Estimate("ot", "distribution", q_mid=q[:, :100], levels=levels, q_levels=q),
                ias.Estimate(
                    "qr",
                    "levels",
                    p=q[:, 101],
                    levels=np.asarray(ias.BETA_GRID),
                    q_levels=q[:, 100:],
                    beta=0.1,
                ),
                ias.Estimate("isotonic", "point", p=p),
            ]
            for seed in (0, 1):
                summary, _ = ias.run_sweeps(pools, est, mc_trials=0)
                frames.append(
                    summary.assign(dataset=dataset, generator=gen, prm="qwen-prm", seed=seed)
                )
    return pd.concat(frames, ignore_index=True)


def _ok(files):
    import matplotlib.image as mpimg

    # PNG + PDF, and the plotted numbers as CSV for figures that write them
    assert {".png", ".pdf"} <= {f.suffix for f in files} <= {".png", ".pdf", ".csv"}
    for f in files:
        assert f.exists() and f.stat().st_size > (100 if f.suffix == ".csv" else 1000)
    img = mpimg.imread(next(f for f in files if f.suffix == ".png"))
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 200


def test_flexibility(tmp_path):
    levels = np.linspace(0, 1, 101)
    qr_levels = np.linspace(0, 1, 11)
    qr = np.linspace(0.1, 0.9, 11)
    qr[6] = 0.4  # a crossing
    files, cap = F.flexibility_figure(
        tmp_path / "flex_qwen-2.5-7b", levels, levels**2, qr_levels, qr, levels
    )
    _ok(files)
    assert sorted(f.name for f in files) == ["flex_qwen-2.5-7b.pdf", "flex_qwen-2.5-7b.png"]
    assert "crosses itself 1 time" in cap and "true quantile" in cap
    _, cap = F.flexibility_figure(tmp_path / "flex2", levels, levels**2, qr_levels, np.sort(qr))
    assert "no crossing" in cap


def test_frontier_beta_tau(tmp_path, ias_frame):
    uniform = pd.DataFrame(
        [
            {"dataset": d, "generator": g, "n": n, "cost": n / 64, "accuracy": 0.5 + 0.001 * n}
            for d in ("id", "ood")
            for g in ("gen-a", "gen-b")
            for n in (1, 4, 16, 64)
        ]
    )
    files, cap = F.frontier_figure(ias_frame, tmp_path / "frontier", uniform)
    _ok(files)
    assert "cost" in cap
    files, _ = F.beta_figure(ias_frame, tmp_path / "beta", methods=["ot"])
    _ok(files)
    files, _ = F.tau_figure(ias_frame[ias_frame.generator == "gen-a"], tmp_path / "tau")
    _ok(files)


def test_calibration_figures(tmp_path):
    rows, bins = [], []
    for gen in ("gen-a", "gen-b"):
        for d in ("id", "ood"):
            for m in ("ot", "qr", "mono"):
                for t in np.linspace(0, 1, 11):
                    rows.append(
                        {
                            "dataset": d,
                            "generator": gen,
                            "method": m,
                            "seed": 0,
                            "level": t,
                            "coverage": min(1, t * 1.1),
                        }
                    )
            for m in ("base", "ot", "qr"):
                for b in range(12):
                    bins.append(
                        {
                            "dataset": d,
                            "generator": gen,
                            "method": m,
                            "seed": 0,
                            "bin": b,
                            "p_mean": (b + 0.5) / 12,
                            "y_mean": (b + 0.5) / 14,
                            "count": 0 if b == 11 else 10 + b,
                        }
                    )
    files, _ = F.coverage_figure(pd.DataFrame(rows), tmp_path / "coverage")
    _ok(files)
    files, cap = F.reliability_figure(pd.DataFrame(bins), tmp_path / "reliability")
    _ok(files)
    assert "over-confident" in cap


def test_colours_are_stable():
    methods = ["base", "ot", "qr", "isotonic", "platt"]
    assert F.color("ot", methods) == F.COLORS["ot"]
    assert F.color("isotonic", methods) != F.color("platt", methods)


def test_frontier_band_spans_the_seeds(tmp_path, ias_frame):
    """Two training seeds that differ: the figure's data has the min-max over seeds per point
    (bars drawn), and the caption says so; one seed: no band."""
    two = ias_frame.copy()
    moved = (two["seed"] == 1) & (two["method"] == "ot")
    two.loc[moved, "accuracy"] += 0.02
    two.loc[moved, "cost"] += 0.01
    files, cap = F.frontier_figure(two, tmp_path / "frontier")
    _ok(files)
    data = pd.read_csv(next(f for f in files if f.suffix == ".csv"))
    ot = data[data["method"] == "ot"]
    assert (ot["n_seeds"] == 2).all()
    assert np.allclose(ot["accuracy_max"] - ot["accuracy_min"], 0.02)
    assert np.allclose(ot["accuracy"], (ot["accuracy_max"] + ot["accuracy_min"]) / 2)
    assert np.allclose(ot["cost_max"] - ot["cost_min"], 0.01)
    assert "min–max over training seeds" in cap
    files, cap = F.frontier_figure(ias_frame[ias_frame["seed"] == 0], tmp_path / "one")
    data = pd.read_csv(next(f for f in files if f.suffix == ".csv"))
    assert (data["n_seeds"] == 1).all() and "min–max" not in cap


def test_budget_histogram(tmp_path):
    """Shares per method sum to one over the bins; the summary CSV has each method's budgets."""
    rng = np.random.default_rng(0)
    rows = []
    for method, high in (("base", 2), ("ot", 64), ("qr", 64)):
        for seed in (0, 1):
            n = rng.integers(1, high + 1, 30)
            rows += [
                {"dataset": d, "generator": "gen-a", "method": method, "seed": seed,
                 "question_id": f"q{i}", "n": int(k)}
                for d in ("id", "ood") for i, k in enumerate(n)
            ]  # fmt: skip
    budgets = pd.DataFrame(rows)
    files, cap = F.budget_figure(budgets, tmp_path / "budgets", n_max=64, c=0.99)
    _ok(files)
    assert "C = 0.99" in cap and "N_max = 64" in cap
    summary = pd.read_csv(next(f for f in files if f.suffix == ".csv"))
    base = summary[(summary["method"] == "base") & (summary["dataset"] == "id")].iloc[0]
    assert base["count"] == 60 and base["max"] <= 2  # 30 questions x 2 seeds, pooled
    assert set(summary["method"]) == {"base", "ot", "qr"}


def test_training_curves(tmp_path):
    rows = [
        {"method": m, "seed": s, "step": step, "metric": "calibration_area",
         "validation": 0.2 / (1 + step) + 0.01 * s, "loss_name": "loss",
         "loss": None if step == 0 else 1.0 / step, "best_step": 30}
        for m in ("ot", "qr") for s in (0, 1) for step in (0, 10, 20, 30)
    ]  # fmt: skip
    files, cap = F.training_figure(pd.DataFrame(rows), tmp_path / "training")
    _ok(files)
    assert "2 seed(s)" in cap and "validation" in cap


def test_training_caption_names_the_rule_that_kept_the_star(tmp_path):
    rows = [
        {"method": m, "seed": s, "step": step, "metric": "calibration_area",
         "validation": {0: 0.3, 10: 0.1, 20: 0.2, 30: 0.15}[step], "loss_name": "loss",
         "loss": None if step == 0 else 1.0 / step, "best_step": 30, "eligible_from": 25,
         "min_step": 10}
        for m in ("qr", "mono") for s in (0, 1) for step in (0, 10, 20, 30)
    ]  # fmt: skip
    files, cap = F.training_figure(pd.DataFrame(rows), tmp_path / "training")
    _ok(files)
    assert "min(warmup_steps, warmup_fraction × max_steps)" in cap
    assert "QR 25" in cap and "Mono 25" in cap
    assert "○ = a lower score earlier, passed over by that rule (4 of 4 runs" in cap
    # the sentence a user reads first: where the minimum was, what was kept, where it stopped
    assert "QR: validation lowest at step 10, passed over by the warm-up in 2 of 2 runs: " in cap
    assert "still improving" not in cap  # its minimum was at step 10


def test_training_conclusion_says_when_the_wql_beside_the_area_stopped_improving() -> None:
    rows = [
        {"method": "qr", "seed": 0, "step": step, "metric": "calibration_area", "validation": v,
         "best_step": 250, "min_step": 0, "proper_score": "wql", "proper_min_step": 100}
        for step, v in ((0, 0.2), (100, 0.25), (250, 0.24), (300, 0.26))
    ]  # fmt: skip
    text = F.training.conclusion(pd.DataFrame(rows), "qr")
    assert text == (
        "QR: validation lowest at step 0, passed over by the warm-up in 1 of 1 runs: kept 250, "
        "stopped at 300 (its WQL, lowest at step 100, had stopped improving before the kept "
        "step)."
    )


def test_training_conclusion_of_a_run_that_kept_its_minimum() -> None:
    rows = [
        {"method": "binomial", "seed": 0, "step": step, "validation": v, "best_step": 175}
        for step, v in ((0, 1.0), (175, 0.5), (250, 0.7), (350, 0.9))
    ]
    text = F.training.conclusion(pd.DataFrame(rows), "binomial")
    assert text == "Binomial: validation got worse after step 175: stopped at 350, kept 175."


def _crowding(fig) -> list[str]:
    """Tick labels of one axis that overlap each other, and legends drawn over an axes."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    for ax in fig.axes:
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            low, high = sorted(axis.get_view_interval())
            boxes = [
                label.get_window_extent(renderer)
                for tick, label in zip(
                    axis.get_majorticklocs(), axis.get_majorticklabels(), strict=True
                )
                if low <= tick <= high and label.get_visible() and label.get_text()
            ]
            boxes.sort(key=lambda b: b.x0 if name == "x" else b.y0)
            found += [
                f"{name} ticks" for a, b in zip(boxes, boxes[1:], strict=False) if a.overlaps(b)
            ]
        legend = ax.get_legend()
        if legend is not None and legend.get_window_extent(renderer).overlaps(
            ax.get_window_extent(renderer)
        ):
            found.append("legend over the axes")
    return found


def test_no_legend_over_data_no_crowded_ticks(tmp_path, ias_frame, monkeypatch):
    """The flexibility figure's legend covered its data; the β figure's tick labels
    overlapped. Every figure is checked just before it is saved."""
    from dprm.report.figures import calibration, style

    problems: dict[str, list[str]] = {}
    real_save = style.save

    def checked_save(fig, stem):
        problems[Path(stem).name] = _crowding(fig)
        return real_save(fig, stem)

    monkeypatch.setattr(style, "save", checked_save)
    monkeypatch.setattr(calibration, "save", checked_save)
    levels, qr_levels = np.linspace(0, 1, 101), np.linspace(0, 1, 11)
    qr = np.linspace(0.1, 0.99, 11)
    qr[8] = 0.97  # a crossing near the top, where the legend used to sit
    F.flexibility_figure(tmp_path / "flex", levels, 1 - (1 - levels) ** 3, qr_levels, qr, levels)
    narrow = ias_frame.assign(cost=0.0172 + ias_frame["cost"] * 0.0026)  # narrow cost ranges
    F.beta_figure(narrow, tmp_path / "beta", methods=["ot"])
    F.frontier_figure(ias_frame, tmp_path / "frontier")
    assert set(problems) == {"flex", "beta", "frontier"}
    assert all(not p for p in problems.values()), problems
