"""The fitted best-of-N twin: curves within tolerance of the published points, one candidate
state behind the PRM score and the calibrator's input, attractor wrong answers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from dprm.data import read_bon_set
from dprm.data.synth import write_world
from dprm.data.synth.bon_fitted import (
    CURVE_NS,
    SINGLETON_BASE,
    draw_fit_pools,
    pool_curves,
    score_readout,
)
from dprm.data.synth.fitted_presets import (
    FITTED_FILE,
    FITTED_PAIRS,
    fitted_pair,
    fitted_preset_names,
    published_points,
    read_fitted,
    write_fitted,
)

ROOT = Path(__file__).resolve().parents[3]
TOLERANCE = 0.02  # tools/fit_bon_twin.py's TOLERANCE
PRESETS = fitted_preset_names()
V2_PRESET = "llama-3.1-8b__qwen-prm"


def _tool():
    spec = importlib.util.spec_from_file_location("fit_bon_twin", ROOT / "tools/fit_bon_twin.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fit_bon_twin"] = module
    spec.loader.exec_module(module)
    return module


def test_two_published_pairs_are_fitted():
    pairs = {(r["generator"], r["prm"]) for r in published_points()}
    assert len(pairs) >= 2
    assert {f"{g}__{p}" for g, p in pairs} == set(PRESETS)
    for row in published_points():  # provenance on every row
        assert row["source"].startswith("https://") and row["where"] and row["how_read"]


@pytest.mark.parametrize("preset", PRESETS)
def test_curves_stay_within_tolerance_of_published_points(preset):
    """Fresh draws (not the fit's seed) of pools of 64: every published point within 0.02."""
    pair = fitted_pair(preset)
    pools = draw_fit_pools(pair, 2000, 64, seed=123)
    curves = pool_curves(pools["score"], pools["correct"], pools["groups"], trials=4, seed=5)
    checked = 0
    for row in published_points():
        if f"{row['generator']}__{row['prm']}" != preset:
            continue
        twin = curves[row["rule"]][CURVE_NS.index(int(row["n"]))]
        assert abs(twin - float(row["accuracy"])) <= TOLERANCE, (row, twin)
        checked += 1
    assert checked >= 3
    # every curve rises with n and stays below pass@n
    for rule in ("highest", "weighted", "majority"):
        assert curves[rule][-1] > curves[rule][0]
        assert np.all(curves[rule] <= curves["pass"] + 1e-9)


def test_score_is_a_readout_of_the_candidate_state():
    pair = FITTED_PAIRS[PRESETS[0]]
    pools = draw_fit_pools(pair, 50, 16, seed=1)
    again = score_readout(pools["latent"], pair.prm, pair.cell("id")).reshape(50, 16)
    np.testing.assert_allclose(pools["score"], again)


def _within_question_probe_corr(world: dict) -> float:
    """Ridge probe of the candidates' hidden states for the PRM score logit, fitted on the
    training pools; its mean within-question correlation with the score on the ID pools."""
    train, test = read_bon_set(world["train/bon"]), read_bon_set(world["id/bon"])

    def xy(bon):
        h = np.asarray(bon.response_hidden, dtype=np.float64)
        s = bon.responses["prm_score"].to_numpy(np.float64).clip(1e-6, 1 - 1e-6)
        return h, np.log(s) - np.log1p(-s), bon.responses["question_id"].to_numpy()

    h, y, _ = xy(train)
    mu, sd = h.mean(axis=0), h.std(axis=0) + 1e-9
    x = (h - mu) / sd
    beta = np.linalg.solve(x.T @ x + 10 * np.eye(x.shape[1]), x.T @ (y - y.mean()))
    h2, y2, q = xy(test)
    pred = ((h2 - mu) / sd) @ beta
    corrs = [
        np.corrcoef(pred[q == k], y2[q == k])[0, 1]
        for k in np.unique(q)
        if y2[q == k].std() > 0 and pred[q == k].std() > 0
    ]
    return float(np.mean(corrs))


def test_prm_score_and_calibrator_input_come_from_one_state(tmp_path):
    """What the calibrator reads (the candidate's hidden state) carries the PRM score within a
    question; in the v2 pools (two independent draws) it does not."""
    fitted = write_world(tmp_path / "fit", PRESETS[0], size="tiny", seed=5, progress=False)
    v2 = write_world(tmp_path / "v2", V2_PRESET, size="tiny", seed=5, progress=False)
    assert _within_question_probe_corr(fitted) > 0.5
    assert abs(_within_question_probe_corr(v2)) < 0.15


def test_attractor_answers_exist(tmp_path):
    world = write_world(tmp_path / "w", PRESETS[0], size="tiny", seed=2, progress=False)
    bon = read_bon_set(world["id/bon"])
    wrong = bon.responses[~bon.responses["correct"].astype(bool)]
    per_question = wrong.groupby("question_id")["answer"]
    repeated = per_question.agg(lambda a: (a.value_counts() >= 2).sum())
    assert (repeated >= 1).mean() > 0.3  # many questions have a popular wrong value
    assert repeated.max() <= 3  # at most three attractors (singletons never repeat)
    singletons = wrong["answer"].str.startswith("s")
    assert singletons.any() and (~singletons).any()
    # correct candidates state the gold answer and nothing else does
    right = bon.responses[bon.responses["correct"].astype(bool)]
    assert set(right["answer"]) == {"a0"} and "a0" not in set(wrong["answer"])


def test_attractor_groups_are_not_a_gem_tail():
    pools = draw_fit_pools(FITTED_PAIRS[PRESETS[0]], 300, 64, seed=4)
    groups, correct = pools["groups"], pools["correct"]
    assert np.all((groups == 0) == correct)
    on_attractor = (groups > 0) & (groups < SINGLETON_BASE)
    assert on_attractor.any() and (groups >= SINGLETON_BASE).any()
    assert groups[on_attractor].max() <= 3


def test_fitted_world_is_deterministic(tmp_path):
    a = write_world(tmp_path / "a", PRESETS[1], size="tiny", seed=9, progress=False)
    b = write_world(tmp_path / "b", PRESETS[1], size="tiny", seed=9, progress=False)
    ra, rb = read_bon_set(a["ood/bon"]).responses, read_bon_set(b["ood/bon"]).responses
    assert ra["prm_score"].equals(rb["prm_score"]) and ra["answer"].equals(rb["answer"])


def test_fitted_numbers_round_trip():
    from importlib.resources import files

    text = files("dprm.data.synth").joinpath(FITTED_FILE).read_text()
    assert write_fitted(read_fitted(text)) == text
    with pytest.raises(ValueError, match=FITTED_FILE):
        read_fitted("generator,prm,skill\nx,y,1\n")


@pytest.mark.slow
def test_stored_numbers_are_what_the_fit_writes():
    """tools/fit_bon_twin.py at its default seed reproduces the package data."""
    tool = _tool()
    fitted, _ = tool.fit(0)
    from importlib.resources import files

    stored = read_fitted(files("dprm.data.synth").joinpath(FITTED_FILE).read_text())
    assert write_fitted(fitted) == write_fitted(stored)
