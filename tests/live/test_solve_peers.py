"""``dprm solve --mode bon --peer``: the calibrator-free peers live, on tiny local models.

A live run's budgets must be what the offline rule (:mod:`dprm.ias.peers.methods`, what
``benchmarks/experiments/adaptive_peers.py`` evaluates) gives on the same candidates in the order
they were drawn; bad settings are refused in one line before ``--out`` is claimed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

N_MAX, BASE_N = 8, 2


def _records(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _run(out, questions_file, model_dirs, calibrator_dirs, load_cprm, generator, pool, **peer):
    from dprm.live import SolveConfig, run_bon

    config = SolveConfig(
        mode="bon", questions=str(questions_file), generator=str(model_dirs["lm"]),
        prm=str(model_dirs["prm"]), calibrator=str(calibrator_dirs["mono"]), n_max=N_MAX,
        baseline_n=BASE_N, max_new_tokens=32, **peer,
    )  # fmt: skip
    cprm = load_cprm(config.calibrator, n_max=N_MAX)
    summary = run_bon(config, cprm, generator, out, progress=False, pool=pool)
    return summary, _records(out / "bon.jsonl")


def _codes(record, n):
    from dprm.ias.selection.rules import answer_key

    index: dict = {}
    keys = [answer_key(c["answer"], j) for j, c in enumerate(record["candidates"][:n])]
    return [index.setdefault(k, len(index)) for k in keys]


def test_adaptive_consistency_live_stops_where_the_offline_rule_does(
    tmp_path, questions_file, model_dirs, calibrator_dirs, load_cprm, generator, grading_pool
):  # fmt: skip
    from dprm.ias.peers.methods import PEERS, DrawView

    summary, records = _run(
        tmp_path / "ac", questions_file, model_dirs, calibrator_dirs, load_cprm, generator,
        grading_pool, peer="adaptive-consistency", peer_level=0.9,
    )  # fmt: skip
    assert summary["allocation"] == "peer:adaptive-consistency"
    for r in records:
        n = r["budget"]
        assert 1 <= n <= N_MAX and r["allocation"] == "peer:adaptive-consistency"
        assert len(r["candidates"]) == max(n, BASE_N)
        # the offline rule on all N_MAX would-be draws is unknown; on the drawn prefix it must
        # stop exactly at n (n = N_MAX: it may also not stop)
        codes = np.array(_codes(r, n))[None, None, :]
        view = DrawView(codes, np.zeros(codes.shape), None, np.array([N_MAX]), N_MAX)
        stop = int(PEERS["adaptive-consistency"].budgets(view, [0.9])[0, 0, 0])
        assert stop == n or (n == N_MAX and stop > n)
        if n > 1:  # it did not stop one draw earlier
            early = DrawView(codes[..., :-1], np.zeros((1, 1, n - 1)), None, np.array([N_MAX]))
            assert int(PEERS["adaptive-consistency"].budgets(early, [0.9])[0, 0, 0]) > n - 1


def test_vote_lead_live_spends_the_total_as_the_offline_sequence(
    tmp_path, questions_file, model_dirs, calibrator_dirs, load_cprm, generator, grading_pool
):  # fmt: skip
    from dprm.ias.peers.methods import matched_budgets, running_top2, vote_lead_sequence

    level = 3.0
    _, records = _run(
        tmp_path / "lead", questions_file, model_dirs, calibrator_dirs, load_cprm, generator,
        grading_pool, peer="vote-lead", peer_level=level, round_size=1,
    )  # fmt: skip
    budgets = np.array([r["budget"] for r in records])
    assert budgets.sum() == round(level * len(records))
    # replay: the leads of each question's drawn answers, in draw order, padded to N_MAX with
    # a lead no question reaches before its own draws run out
    lead = np.full((len(records), N_MAX), 10**6, dtype=np.int64)
    for q, r in enumerate(records):
        n = r["budget"]
        a, b = running_top2(np.array(_codes(r, n))[None, :])
        lead[q, :n] = (a - b)[0]
    sequence = vote_lead_sequence(lead, np.full(len(records), N_MAX))
    np.testing.assert_array_equal(matched_budgets(sequence, len(records), level), budgets)


def test_pandora_live_stops_at_the_reservation_value_fitted_on_the_training_set(
    tmp_path, questions_file, model_dirs, calibrator_dirs, load_cprm, generator, grading_pool,
    tiny_world,
):  # fmt: skip
    """``--peer pandora`` reads ``--train-bon``'s raw scores (no --auto-cost needed): each
    question stops at its first draw whose PRM score reaches sigma(c) of the training set."""
    from dprm.ias.peers.reward_stopping import reservation_value
    from dprm.live.bon_peers import training_scores_of

    train_bon = str(tiny_world("llama-3.1-8b__qwen-prm")["train/bon"])
    cost = 0.02
    sigma = reservation_value(training_scores_of(train_bon).raw, cost)
    _, records = _run(
        tmp_path / "pandora", questions_file, model_dirs, calibrator_dirs, load_cprm, generator,
        grading_pool, peer="pandora", peer_level=cost, train_bon=train_bon,
    )  # fmt: skip
    for r in records:
        n = r["budget"]
        scores = [c["prm_score"] for c in r["candidates"][:n]]
        assert all(s < sigma for s in scores[:-1])  # it did not stop earlier
        assert scores[-1] >= sigma or n == N_MAX


def test_peer_settings_refused_in_one_line(
    tmp_path, questions_file, model_dirs, calibrator_dirs, capsys
):  # fmt: skip
    from dprm.cli import main

    argv = ["solve", "--mode", "bon", "--questions", str(questions_file), "--generator",
            str(model_dirs["lm"]), "--prm", str(model_dirs["prm"]), "--calibrator",
            str(calibrator_dirs["mono"]), "--prm-device", "cpu", "--device", "cpu", "--quiet"]  # fmt: skip
    cases = [
        (["--peer", "vote-lead"], "needs --peer-level"),
        (["--peer", "score-raw"], "needs --peer-level"),
        (["--peer", "esc-4", "--mode", "beam"], "applies to --mode bon"),
        (["--peer", "vote-lead", "--peer-level", "100"], "in [1, --n-max]"),
        (["--peer", "beacon", "--peer-level", "0.1"], "needs --train-bon"),
        (["--peer", "pandora"], "needs --peer-level"),
    ]
    for i, (extra, message) in enumerate(cases):
        out = tmp_path / f"out{i}"
        assert main([*argv, *extra, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
        assert not out.exists()
    with pytest.raises(SystemExit):
        main(["solve", "--help"])
    assert "adaptive-consistency" in capsys.readouterr().out
