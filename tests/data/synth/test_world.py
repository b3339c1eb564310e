"""Synthetic worlds: truth in closed form, the paper's qualitative picture, reproducibility."""

from __future__ import annotations

from importlib.resources import files

import numpy as np
import pandas as pd
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
    assert set(paths) == {"id/calib", "id/bon", "ood/calib", "ood/bon", "train/calib", "train/bon"}
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


#: (generator, PRM) worlds whose Base metrics are checked against the paper at paper size
TWIN_CHECKS = [("llama-3.2-1b", "qwen-prm"), ("r1-qwen-7b", "shepherd")]


@pytest.mark.parametrize(("gen", "prm"), TWIN_CHECKS)
def test_paper_size_base_metrics_match_the_paper(tmp_path, gen, prm):
    """The fitted twin: Base Brier / PosBrier / ECE within the tolerances on train, id and ood."""
    paper = pd.read_csv(files("dprm.report") / "paper_tables.csv")
    paper = paper[(paper["prm"] == prm) & (paper["generator"] == gen) & (paper["method"] == "base")]
    paths = write_world(tmp_path, f"{gen}__{prm}", size="paper", hidden_dim=4, progress=False)
    for split, dataset in (("train", "math500"), ("id", "math500"), ("ood", "aime24-25")):
        r = read_calibration_set(paths[f"{split}/calib"]).records
        p, y = r["prm_score"], r["success_prob"]
        target = paper[paper["dataset"] == dataset].set_index("metric")["value"]
        assert abs(M.brier(p, y) - target["brier"]) <= 0.02, split
        assert abs(M.pos_brier(p, y) - target["posbrier"]) <= 0.02, split
        assert abs(M.ece(p, y) - target["ece"]) <= 0.04, split


def test_prms_of_one_generator_score_the_same_rollouts(tmp_path):
    """As in the paper, three PRMs score one generator's rollouts: labels and truth-p shared."""
    a = write_world(tmp_path / "a", "qwen-2.5-7b__qwen-prm", size="tiny", progress=False)
    b = write_world(tmp_path / "b", "qwen-2.5-7b__shepherd", size="tiny", progress=False)
    ra, rb = (read_calibration_set(x["id/calib"]) for x in (a, b))
    for column in ("question_id", "response_id", "step", "success_prob", "true_p"):
        assert ra.records[column].equals(rb.records[column]), column
    assert not np.allclose(ra.records["prm_score"], rb.records["prm_score"])
    assert not np.allclose(np.asarray(ra.hidden), np.asarray(rb.hidden))


def test_step_zero_records_are_one_input_per_question(worlds):
    """The empty prefix is the same input for all responses of a question (as in Park's data)."""
    calib = read_calibration_set(worlds["r1-qwen-7b"]["id/calib"])
    first = calib.records["step"].to_numpy() == 0
    hidden = np.asarray(calib.hidden)[first]
    records = calib.records[first].reset_index(drop=True)
    for _, rows in records.groupby("question_id").groups.items():
        rows = np.asarray(rows)
        assert len(rows) == 4  # tiny: 4 responses
        assert (hidden[rows] == hidden[rows[0]]).all()
        for column in ("prm_score", "true_mu", "true_sigma", "true_p"):
            assert records.loc[rows, column].nunique() == 1, column


def test_hidden_state_carries_more_success_signal_for_qwen_prm_than_shepherd():
    """Share of the success logit's variance explained by the truth given h, per PRM."""
    from dprm.data import synth as S

    def explained(prm_name: str) -> float:
        gen, prm = S.GENERATORS["qwen-2.5-7b"], S.PRMS[prm_name]
        split, size = S.SIZES["paper"].splits[0], S.SIZES["paper"]
        rng, prm_rng, mask_rng = S.split_rngs(5, 0, prm)
        draws = S.draw_generator(rng, gen, split, size, 300)
        rec = S.simulate(
            gen, prm, S.DEFAULT_CELL, "id", draws, S.draw_prm(prm_rng, draws, mask_rng), 20
        )
        logit = np.log(rec.true_p / (1 - rec.true_p))
        return 1 - np.mean(rec.true_sigma**2) / np.var(logit)

    qwen, reasoneval, shepherd = (explained(p) for p in ("qwen-prm", "reasoneval", "shepherd"))
    assert qwen > reasoneval > shepherd
    assert qwen > 0.75 and shepherd < 0.45


def test_difficulty_is_skewed_and_r1_trajectories_are_long():
    from dprm.data import synth as S

    size = S.SIZES["paper"]
    steps = {}
    for name in ("qwen-2.5-7b", "r1-qwen-7b"):
        gen, prm = S.GENERATORS[name], S.PRMS["qwen-prm"]
        rng, prm_rng, mask_rng = S.split_rngs(1, 0, prm)
        draws = S.draw_generator(rng, gen, size.splits[0], size, 500)
        rec = S.simulate(
            gen, prm, S.DEFAULT_CELL, "id", draws, S.draw_prm(prm_rng, draws, mask_rng), 20
        )
        p_question = rec.true_p[draws.step == 0][:: size.n_responses]  # one per question
        assert np.mean((p_question < 0.05) | (p_question > 0.95)) > 0.3
        steps[name] = np.mean(np.bincount(draws.question * 8 + draws.response))
    assert steps["r1-qwen-7b"] > 1.6 * steps["qwen-2.5-7b"]


def test_bon_questions_follow_the_question_only_distribution(worlds):
    """BoN p_q and the calibration set's step-0 truth come from one distribution."""
    paths = worlds["llama-3.2-1b"]
    records = read_calibration_set(paths["id/calib"]).records
    step0 = records[records["step"] == 0].drop_duplicates("question_id")
    bon = read_bon_set(paths["id/bon"]).questions
    # same truth given h: identical (mu, sigma) law; compare the sigma (constant at step 0)
    assert np.allclose(bon["true_sigma"].unique(), step0["true_sigma"].unique())
    assert abs(bon["true_mu"].mean() - step0["true_mu"].mean()) < 1.5


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
    from dprm.data.synth import LATENT_DIM, Embedding

    e1, e2 = Embedding(PRMS["qwen-prm"], 16), Embedding(PRMS["qwen-prm"], 16)
    e3 = Embedding(PRMS["shepherd"], 16)
    u = np.random.default_rng(0).normal(size=(4, LATENT_DIM))
    assert np.array_equal(e1(u), e2(u)) and not np.allclose(e1(u), e3(u))


@pytest.mark.parametrize("prm_name", ["qwen-prm", "shepherd"])
@pytest.mark.parametrize("split_index", [0, 1])  # id, ood (the ood reading is offset)
def test_truth_is_exact_given_h_in_and_out_of_distribution(prm_name, split_index):
    """PIT of the realised logit under N(true_mu, true_sigma^2) is uniform, one record per
    trajectory (records of one trajectory share its draws, so they are not independent)."""
    from statistics import NormalDist

    from dprm.data import synth as S

    gen, prm, size = S.GENERATORS["r1-llama-8b"], S.PRMS[prm_name], S.SIZES["paper"]
    split = size.splits[split_index]
    rng, prm_rng, mask_rng = S.split_rngs(7, split_index, prm)
    draws = S.draw_generator(rng, gen, split, size, 400)
    rec = S.simulate(
        gen, prm, S.DEFAULT_CELL, split.kind, draws, S.draw_prm(prm_rng, draws, mask_rng), 20
    )
    last = np.flatnonzero(np.diff(np.append(draws.step, 0)) <= 0)  # last prefix of each response
    logit = np.log(rec.true_p[last] / (1 - rec.true_p[last]))
    z = (logit - rec.true_mu[last]) / rec.true_sigma[last]
    # questions share a_q across their 8 responses: take one response per question
    first_response = draws.response[last] == 0
    pit = np.sort([NormalDist().cdf(v) for v in z[first_response]])
    ks = np.max(np.abs(pit - (np.arange(1, len(pit) + 1) - 0.5) / len(pit)))
    assert len(pit) == 400 and ks < 1.63 / np.sqrt(len(pit))  # 1% level


# --- twin v2: h lossy and non-linear -----------------------------------------------------------


def _v2_world(linear_share: float, hidden_dim: int, prm_name: str = "qwen-prm", n_q: int = 200):
    """(h [n, D], true_mu [n], train mask [n]) of a small in-distribution split."""
    from dataclasses import replace

    from dprm.data import synth as S

    gen, prm, size = S.GENERATORS["qwen-2.5-7b"], S.PRMS[prm_name], S.SIZES["tiny"]
    rng, prm_rng, mask_rng = S.split_rngs(3, 0, prm)
    draws = S.draw_generator(rng, gen, size.splits[0], size, n_q)
    cell = replace(S.DEFAULT_CELL, linear_share=linear_share)
    rec = S.simulate(
        gen, prm, cell, "id", draws, S.draw_prm(prm_rng, draws, mask_rng), size.max_steps
    )
    hidden = S.Embedding(prm, hidden_dim)(rec.latent).astype(np.float64)
    return hidden, rec.true_mu, draws.question < int(0.75 * n_q)


def _held_out_r2(features, target, train, alpha):
    """R^2 on the held-out questions of a ridge regression on standardised features."""
    mean, scale = features[train].mean(0), features[train].std(0) + 1e-9
    x = (features - mean) / scale
    a, centre = x[train], target[train].mean()
    weight = np.linalg.solve(a.T @ a + alpha * np.eye(a.shape[1]), a.T @ (target[train] - centre))
    resid = target[~train] - (x[~train] @ weight + centre)
    return 1 - np.mean(resid**2) / np.var(target[~train])


def test_v2_hidden_state_is_only_non_linearly_informative_without_its_linear_channel():
    """linear_share 0: a ridge readout of true_mu from h explains almost nothing, a quadratic
    one (ridge on h and its pairwise products) most of it; linear_share 1: the linear one too."""
    hidden, true_mu, train = _v2_world(0.0, 32)
    z = (hidden - hidden[train].mean(0)) / hidden[train].std(0)
    upper = np.triu_indices(z.shape[1])
    quadratic = np.column_stack([z, (z[:, :, None] * z[:, None, :])[:, upper[0], upper[1]]])
    linear_r2 = _held_out_r2(hidden, true_mu, train, alpha=1.0)
    quadratic_r2 = _held_out_r2(quadratic, true_mu, train, alpha=10.0)
    assert linear_r2 < 0.1 and quadratic_r2 > 0.5, (linear_r2, quadratic_r2)
    hidden, true_mu, train = _v2_world(1.0, 160)
    assert _held_out_r2(hidden, true_mu, train, alpha=1.0) > 0.8


def test_v2_linear_r2_falls_with_linear_share():
    r2 = [_held_out_r2(*_v2_world(share, 160), alpha=1.0) for share in (1.0, 0.5, 0.1)]
    assert r2[0] > r2[1] > r2[2], r2


def test_v2_keyed_units_are_odd_in_the_key():
    """Flipping the key s flips the keyed units and leaves the tanh units: a linear readout of
    the keyed units is blind to z (E[g(z) unit] = 0 for a symmetric independent key)."""
    from dprm.data import synth as S

    embed = S.Embedding(PRMS["reasoneval"], 64)
    u = np.random.default_rng(0).normal(size=(50, S.LATENT_DIM))
    u[:, S.KEY_COL] = 1.0
    flipped = u.copy()
    flipped[:, S.KEY_COL] = -1.0
    a, b = embed.features(u), embed.features(flipped)
    assert np.allclose(a[:, : S.TANH_WIDTH], b[:, : S.TANH_WIDTH])
    assert np.allclose(a[:, S.TANH_WIDTH :], -b[:, S.TANH_WIDTH :], atol=1e-6)


def test_v2_linear_share_changes_h_only():
    """Scores, labels and truth do not depend on linear_share (the Base fit holds for every
    value); the latent does, and at linear_share 1 its linear channel is the readings."""
    from dataclasses import replace

    from dprm.data import synth as S

    gen, prm, size = S.GENERATORS["llama-3.1-8b"], S.PRMS["shepherd"], S.SIZES["tiny"]
    recs = []
    for share in (0.0, 1.0):
        rng, prm_rng, mask_rng = S.split_rngs(4, 0, prm)
        draws = S.draw_generator(rng, gen, size.splits[0], size, 30)
        cell = replace(S.DEFAULT_CELL, linear_share=share)
        prm_draws = S.draw_prm(prm_rng, draws, mask_rng)
        recs.append(S.simulate(gen, prm, cell, "id", draws, prm_draws, size.max_steps))
    for name in ("true_mu", "true_sigma", "true_p", "n_correct", "prm_score"):
        assert np.array_equal(getattr(recs[0], name), getattr(recs[1], name)), name
    assert not np.allclose(recs[0].latent[:, S.LINEAR_COLS], recs[1].latent[:, S.LINEAR_COLS])
    assert np.allclose(recs[1].latent[:, S.LINEAR_COLS], recs[1].latent[:, S.RAW_COLS])
    assert set(np.unique(recs[0].latent[:, S.KEY_COL])) == {-1.0, 1.0}


def test_v2_worlds_say_their_format(worlds):
    from dprm.data.synth import SYNTH_FORMAT

    calib = read_calibration_set(worlds["llama-3.2-1b"]["id/calib"])
    assert SYNTH_FORMAT == 2 and calib.meta["synth_format"] == 2


def test_write_world_refuses_a_folder_with_files_unless_overwrite(tmp_path):
    out = tmp_path / "w"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_world(out, "qwen-2.5-7b__qwen-prm", size="tiny", progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # nothing written
    paths = write_world(out, "qwen-2.5-7b__qwen-prm", size="tiny", progress=False, overwrite=True)
    assert (paths["train/calib"] / "meta.json").exists()
