"""Synthetic worlds: truth in closed form, the paper's qualitative picture, reproducibility."""

from __future__ import annotations

import numpy as np
import pytest

from dprm import metrics as M
from dprm.data import read_bon_set, read_calibration_set
from dprm.data.synth import GENERATORS, PRMS, preset_names, resolve_preset, write_world


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    root = tmp_path_factory.mktemp("worlds")
    out = {}
    for gen in ("llama-3.2-1b", "r1-qwen-7b"):
        out[gen] = write_world(root / gen, f"{gen}__qwen-prm", size="tiny", progress=False, seed=3)
    return out


def test_presets_cover_the_paper_grid():
    names = preset_names()
    assert len(names) == 1 + len(GENERATORS) * len(PRMS) == 19
    assert resolve_preset("demo")[1].name == "qwen-prm"
    with pytest.raises(ValueError, match="unknown preset"):
        resolve_preset("gpt-9__qwen-prm")


def test_sets_follow_the_contract(worlds):
    paths = worlds["llama-3.2-1b"]
    assert set(paths) == {"id/calib", "id/bon", "ood/calib", "ood/bon", "train/calib"}
    train_ids = set(read_calibration_set(paths["train/calib"]).records["question_id"])
    test_ids = set(read_calibration_set(paths["id/calib"]).records["question_id"])
    assert train_ids and test_ids and not train_ids & test_ids  # disjoint questions
    calib = read_calibration_set(paths["id/calib"])
    assert calib.hidden.dtype == np.float16 and calib.hidden_dim == 32
    assert calib.meta["preset"] == "llama-3.2-1b__qwen-prm" and calib.meta["seed"] == 3
    records = calib.records
    assert (records.groupby(["question_id", "response_id"])["step"].min() == 0).all()
    assert records["step"].max() <= 7  # tiny: at most 8 prefixes, steps 0..7
    bon = read_bon_set(paths["id/bon"])
    assert (bon.responses.groupby("question_id").size() == 64).all()
    assert len(bon.questions) == 40


def test_labels_are_binomial_draws_of_true_p(worlds):
    records = read_calibration_set(worlds["r1-qwen-7b"]["id/calib"]).records
    k = records["success_prob"] * records["n_rollouts"]
    assert np.allclose(k, np.round(k))
    # E[y | true_p] = true_p: the mean residual is within a few standard errors of zero.
    resid = records["success_prob"] - records["true_p"]
    se = np.sqrt(np.mean(records["true_p"] * (1 - records["true_p"]) / 8) / len(records))
    assert abs(resid.mean()) < 4 * se


def test_true_p_follows_the_closed_form_quantile_function(worlds):
    """PIT: the truth CDF at the realised p is uniform (KS distance small)."""
    from statistics import NormalDist

    records = read_calibration_set(worlds["llama-3.2-1b"]["id/calib"]).records
    p = records["true_p"].to_numpy(np.float64)
    z = (np.log(p / (1 - p)) - records["true_mu"]) / records["true_sigma"]
    pit = np.sort([NormalDist().cdf(v) for v in z])
    ks = np.max(np.abs(pit - (np.arange(1, len(pit) + 1) - 0.5) / len(pit)))
    assert ks < 1.63 / np.sqrt(len(pit))  # 1% level
    # and the quantile helper agrees with the same closed form
    q = M.true_quantiles(records["true_mu"][:5], records["true_sigma"][:5], [0.5])
    assert np.allclose(q[:, 0], 1 / (1 + np.exp(-records["true_mu"][:5])), atol=1e-6)


def test_base_overestimates_more_for_weak_generators_and_ood(worlds):
    def base_brier(gen, split):
        r = read_calibration_set(worlds[gen][f"{split}/calib"]).records
        return M.brier(r["prm_score"], r["success_prob"]), M.pos_brier(
            r["prm_score"], r["success_prob"]
        )

    weak_id, weak_id_pos = base_brier("llama-3.2-1b", "id")
    strong_id, _ = base_brier("r1-qwen-7b", "id")
    assert weak_id > 2 * strong_id
    assert weak_id_pos > 0.9 * weak_id  # nearly all of the error is over-estimation
    for gen in worlds:
        assert base_brier(gen, "ood")[0] > base_brier(gen, "id")[0]


def test_seed_reproducibility(tmp_path):
    a = write_world(tmp_path / "a", "qwen-2.5-7b__shepherd", size="tiny", seed=11, progress=False)
    b = write_world(tmp_path / "b", "qwen-2.5-7b__shepherd", size="tiny", seed=11, progress=False)
    c = write_world(tmp_path / "c", "qwen-2.5-7b__shepherd", size="tiny", seed=12, progress=False)
    ra, rb, rc = (read_calibration_set(x["id/calib"]) for x in (a, b, c))
    assert ra.records.equals(rb.records)
    assert np.array_equal(np.asarray(ra.hidden), np.asarray(rb.hidden))
    assert not ra.records["success_prob"].equals(rc.records["success_prob"])


def test_same_prm_shares_its_embedding(tmp_path):
    """The hidden-state map belongs to the PRM: two generators scored by one PRM share it."""
    from dprm.data.synth import Embedding

    e1, e2 = Embedding(PRMS["qwen-prm"], 16), Embedding(PRMS["qwen-prm"], 16)
    e3 = Embedding(PRMS["shepherd"], 16)
    u = np.random.default_rng(0).normal(size=(4, 8))
    assert np.array_equal(e1(u), e2(u)) and not np.allclose(e1(u), e3(u))
