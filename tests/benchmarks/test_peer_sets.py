"""benchmarks/experiments/peer_sets.py: the peer table on a world's own BoN sets
(``adaptive_peers.py --bon id=DIR --bon ood=DIR``)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "experiments"))
import adaptive_peers as ap  # noqa: E402
import peer_sets  # noqa: E402
import results_page as rp  # noqa: E402


def _set(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "responses.parquet").write_bytes(b"")
    return folder


def test_sets_are_named_by_split_and_bad_ones_fail_with_exit_2(tmp_path, capsys):
    a, b = _set(tmp_path / "a"), _set(tmp_path / "b")
    assert peer_sets.parse_sets([f"id={a}", f"ood={b}"]) == {"id": a, "ood": b}
    assert peer_sets.parse_sets([str(a)]) == {"test": a}
    for entries in ([f"id={a}", f"id={b}"], [f"id={tmp_path / 'missing'}"], [f"={a}"]):
        with pytest.raises(SystemExit) as err:
            peer_sets.parse_sets(entries)
        assert err.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def _bon():
    """Two questions, listed in the other order than their responses."""
    questions = pd.DataFrame({"question_id": ["q2", "q1"], "prm_score": [0.5, 0.5]})
    responses = pd.DataFrame({
        "question_id": ["q1", "q1", "q1", "q1", "q2", "q2"],
        "prm_score": [0.9, 0.1, 0.8, 0.2, 0.3, 0.85],
        "correct": [True, False, True, False, False, False],
    })  # fmt: skip
    return SimpleNamespace(questions=questions, responses=responses)


def test_pool_truth_is_each_questions_solve_rate_in_question_order():
    bon = _bon()
    np.testing.assert_allclose(peer_sets.pool_rates(bon), [0.0, 0.5])
    truth = peer_sets.pool_truth(bon, np.full(6, 0.3))
    assert truth.kind == "point" and truth.method == "truth"
    np.testing.assert_allclose(truth.p, [0.0, 0.5])
    np.testing.assert_allclose(truth.candidate, 0.3)


def test_set_facts_say_whether_the_prm_ranks_the_candidates():
    facts = peer_sets.set_facts(_bon(), "id")
    # q1: both correct candidates (0.9, 0.8) outscore both wrong ones (0.1, 0.2): AUROC 1;
    # pooled, q2's wrong 0.85 outscores the correct 0.8: 7 of 8 pairs ordered
    assert facts["auroc_within"] == pytest.approx(1.0)
    assert facts["questions_both"] == 1
    assert facts["auroc_pooled"] == pytest.approx(7 / 8)
    assert facts["solve_rate"] == pytest.approx(0.25)
    assert facts["any_correct"] == pytest.approx(0.5)
    assert facts["pool"] == 3  # the median pool size
    assert np.isnan(peer_sets._auroc(np.array([0.1, 0.2]), np.array([False, False])))
    assert peer_sets._auroc(np.array([0.5, 0.5]), np.array([True, False])) == 0.5


class _Captured(Exception):
    pass


def test_a_set_without_truth_gets_the_pool_solve_rate_ceiling(tiny_world, monkeypatch):
    """On real data (no true distribution of p) auto-seq[truth] runs on each pool's solve rate
    (the training pool's own for the training side); the twin's own truth is kept."""
    import dataclasses

    import dprm.ias.peers.curves as pc
    from dprm.data import read_bon_set
    from dprm.models.raw_score import RawScoreCalibrator

    def capture(bon, train, inputs, rule, **kwargs):
        truth = next(i for i in inputs if i.label == "truth")
        raise _Captured(truth.test, truth.train)

    monkeypatch.setattr(pc, "set_curves", capture)
    paths = tiny_world("llama-3.1-8b__qwen-prm")
    bon, train = read_bon_set(paths["id/bon"]), read_bon_set(paths["train/bon"])
    model = RawScoreCalibrator(bon.hidden_dim)
    with pytest.raises(_Captured) as twin:
        peer_sets.evaluate(bon, train, model, ("majority",), 2, 2, 10, 0)
    assert twin.value.args[0].kind == "distribution"  # the twin's true distribution of p
    real = [
        dataclasses.replace(b, questions=b.questions.drop(columns=["true_mu", "true_sigma"]))
        for b in (bon, train)
    ]
    with pytest.raises(_Captured) as got:
        peer_sets.evaluate(*real, model, ("majority",), 2, 2, 10, 0)
    test_truth, train_truth = got.value.args
    assert test_truth.kind == "point"
    np.testing.assert_allclose(test_truth.p, peer_sets.pool_rates(bon))
    np.testing.assert_allclose(train_truth.p, peer_sets.pool_rates(train))
    assert len(test_truth.candidate) == len(bon.responses)


@pytest.mark.slow
def test_adaptive_peers_runs_a_worlds_id_and_ood_sets_over_calibrator_seeds(
    tiny_world, tmp_path, run
):
    """``adaptive_peers.py --bon id=DIR --bon ood=DIR`` with two calibrators: one row per
    (seed, split, rule, method), a page that re-renders byte for byte, and a rerun that
    resumes from the cached cells."""
    from dprm.models.raw_score import RawScoreCalibrator

    paths = tiny_world("llama-3.1-8b__qwen-prm")
    for seed in (0, 1):
        RawScoreCalibrator(32).save(tmp_path / "cal" / f"seed{seed}")
    page = tmp_path / "results" / "peers-tiny.md"
    args = [
        "--bon",
        f"id={paths['id/bon']}",
        "--bon",
        f"ood={paths['ood/bon']}",
        "--train-bon",
        str(paths["train/bon"]),
        "--calibrator",
        "{tmp}/cal/seed0",
        "--calibrator",
        "{tmp}/cal/seed1",
        "--world",
        "tiny",
        "--rules",
        "majority",
        "--trials",
        "2",
        "--bootstrap",
        "10",
        "--root",
        "{tmp}/root",
        "--out",
        str(page),
    ]
    args += ["--calibrator-seeds", "0,1", "--question-resample", "1"]
    draws = tmp_path / "draws.toml"
    draws.write_text(
        '[worlds.tiny]\nkind = "trained"\n'
        "report = { calibrator_seeds = [0, 1], question_resamples = [1] }\n"
    )
    env = {"DPRM_DRAWS_FILE": str(draws)}
    script = ROOT / "benchmarks" / "experiments" / "adaptive_peers.py"
    assert "seed 1" in run(script, args, tmp_path, env=env)
    cells = pd.read_csv(page.parent / "peers-tiny" / "cells.csv")
    assert set(cells["split"]) == {"id", "ood"} and set(cells["world_seed"]) == {0, 1}
    assert not cells.duplicated(["split", "world_seed", "rule", "method"]).any()
    assert {"auto-seq[calibrated]", "auto-seq[truth]", "vote-lead"} <= set(cells["method"])
    before = cells.to_csv()
    assert "seed" not in run(script, args, tmp_path, env=env).split("wrote")[0]  # cached
    assert pd.read_csv(page.parent / "peers-tiny" / "cells.csv").to_csv() == before
    assert "it reused 4 of its 4 cells" in page.read_text()  # 2 seeds x 2 splits, all cached
    stored = page.read_bytes()
    page.unlink()
    run(script, ["--render", "--out", str(page)], tmp_path)
    assert page.read_bytes() == stored


def _hand_made(tmp_path, monkeypatch) -> str:
    cells = ap.smoke_cells()
    cells.loc[cells.index[0], "draws_to_u64"] = np.nan  # one seed never reaches uniform-64
    curves = pd.DataFrame([
        {"rule": rule, "method": "uniform", "knob": float(n), "draws": float(n),
         "accuracy": 0.1 + 0.001 * n, "world": "smoke", "world_seed": s, "split": split}
        for rule in ("highest-last", "majority") for split in ("id", "ood")
        for s in (11, 12) for n in (1, 4, 16, 64)
    ])  # fmt: skip
    facts = [peer_sets.set_facts(_bon(), split) for split in ("train", "id", "ood")]
    monkeypatch.setattr(rp, "RESULTS", tmp_path / "results")
    settings = {"calibrator": "binomial", "rules": ["highest-last", "majority"], "trials": 4,
                "train_trials": 2, "bootstrap": 10, "elapsed_min": 0.0}  # fmt: skip
    replicates = ap.smoke_replicates(cells)
    peer_sets.store(cells, curves, facts, ap.aggregate(cells), "peers-x", "cmd", settings,
                    replicates)  # fmt: skip
    return "peers-x"


def test_the_page_renders_from_its_csvs_alone_byte_for_byte(tmp_path, monkeypatch):
    name = _hand_made(tmp_path, monkeypatch)
    first = peer_sets.render(name).read_bytes()
    assert ap.render(name).read_bytes() == first  # adaptive_peers.py --render dispatches here
    text = first.decode()
    assert "--render --out docs/results/peers-x.md" in text
    assert "not reached (1/2 seeds)" in text
    assert "falls back to" in text
    assert "| id | 2 | " in text  # the sets' facts: two questions


def test_a_worlds_sets_need_report_draws(tmp_path, monkeypatch, capsys):
    """``--bon`` names its draws (calibrator seeds, question resample); development or
    unrecorded ones stop the run with one line and exit 2."""
    from dprm.models.raw_score import RawScoreCalibrator

    draws = tmp_path / "draws.toml"
    draws.write_text(
        '[worlds.arith]\nkind = "trained"\n'
        "development = { calibrator_seeds = [0], question_resamples = [0] }\n"
        "report = { calibrator_seeds = [3], question_resamples = [1] }\n"
    )
    monkeypatch.setenv("DPRM_DRAWS_FILE", str(draws))
    cal = RawScoreCalibrator(8).save(tmp_path / "cal")

    def refused(**given) -> str:
        args = SimpleNamespace(calibrator=[cal], calibrator_seeds="", question_resample=1)
        for key, value in given.items():
            setattr(args, key, value)
        with pytest.raises(SystemExit) as exit_:
            peer_sets.preregistered(args, "arith")
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err
        return err

    assert "no recorded seed" in refused()
    assert "development" in refused(calibrator_seeds="0")
    assert "needs --question-resample" in refused(calibrator_seeds="3", question_resample=None)
    assert "not pre-registered report draws" in refused(calibrator_seeds="3", question_resample=2)
    ok = SimpleNamespace(calibrator=[cal], calibrator_seeds="3", question_resample=1)
    record = peer_sets.preregistered(ok, "arith")
    assert record["draws"] == {"calibrator_seeds": [3], "question_resamples": [1]}
    # several resamples: every one must be a report draw, none named twice
    draws.write_text(draws.read_text().replace("question_resamples = [1] }",
                                               "question_resamples = [1, 2] }"))  # fmt: skip
    assert "development" in refused(calibrator_seeds="3", question_resample="0,1")
    assert "named twice" in refused(calibrator_seeds="3", question_resample="1,1")
    assert "expected resamples" in refused(calibrator_seeds="3", question_resample="1,x")
    many = SimpleNamespace(calibrator=[cal], calibrator_seeds="3", question_resample="1,2")
    record = peer_sets.preregistered(many, "arith")
    assert record["draws"] == {"calibrator_seeds": [3], "question_resamples": [1, 2]}
    assert many.question_resample_values == [1, 2]


def test_question_blocks_split_the_questions_in_file_order_with_their_candidates():
    from dprm.data.bon_set import BonSet

    questions = pd.DataFrame({"question_id": [f"q{i}" for i in range(5)]})
    responses = pd.DataFrame({"question_id": [f"q{i % 5}" for i in range(10)],
                              "prm_score": np.arange(10) / 10})  # fmt: skip
    hidden = np.arange(10, dtype=np.float32).reshape(5, 2)
    bon = BonSet(questions, hidden, responses, response_hidden=np.arange(10.0)[:, None])
    assert peer_sets.question_block(bon, 0, 1) is bon
    blocks = [peer_sets.question_block(bon, i, 2) for i in range(2)]
    assert [list(b.questions["question_id"]) for b in blocks] == [["q0", "q1"],
                                                                  ["q2", "q3", "q4"]]  # fmt: skip
    np.testing.assert_array_equal(blocks[1].hidden, hidden[2:])
    for block in blocks:  # each block keeps exactly its questions' candidates, rows aligned
        ids = set(block.questions["question_id"])
        assert set(block.responses["question_id"]) == ids and len(block.responses) == 2 * len(ids)
        np.testing.assert_array_equal(block.response_hidden[:, 0] / 10,
                                      block.responses["prm_score"])  # fmt: skip


def test_more_question_resamples_than_questions_stop_with_one_line(tmp_path, monkeypatch, capsys):
    import dprm.data

    monkeypatch.setattr(dprm.data, "read_bon_set", lambda path, check_hidden=True: _bon())
    args = SimpleNamespace(train_bon=tmp_path / "train", calibrator=[],
                           question_resample_values=[1, 2, 3])  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        peer_sets.run(args, {"id": tmp_path / "id"}, "arith")
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "id=" in err and "2 questions cannot make 3" in err
