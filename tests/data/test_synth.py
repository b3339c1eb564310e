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
        rng, prm_rng = S.split_rngs(5, 0, prm)
        draws = S.draw_generator(rng, gen, split, size, 300)
        rec = S.simulate(gen, prm, S.DEFAULT_CELL, "id", draws, S.draw_prm(prm_rng, draws), 20)
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
        rng, prm_rng = S.split_rngs(1, 0, prm)
        draws = S.draw_generator(rng, gen, size.splits[0], size, 500)
        rec = S.simulate(gen, prm, S.DEFAULT_CELL, "id", draws, S.draw_prm(prm_rng, draws), 20)
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
    rng, prm_rng = S.split_rngs(7, split_index, prm)
    draws = S.draw_generator(rng, gen, split, size, 400)
    rec = S.simulate(gen, prm, S.DEFAULT_CELL, split.kind, draws, S.draw_prm(prm_rng, draws), 20)
    last = np.flatnonzero(np.diff(np.append(draws.step, 0)) <= 0)  # last prefix of each response
    logit = np.log(rec.true_p[last] / (1 - rec.true_p[last]))
    z = (logit - rec.true_mu[last]) / rec.true_sigma[last]
    # questions share a_q across their 8 responses: take one response per question
    first_response = draws.response[last] == 0
    pit = np.sort([NormalDist().cdf(v) for v in z[first_response]])
    ks = np.max(np.abs(pit - (np.arange(1, len(pit) + 1) - 0.5) / len(pit)))
    assert len(pit) == 400 and ks < 1.63 / np.sqrt(len(pit))  # 1% level
