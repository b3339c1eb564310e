"""``dprm solve --mode bon --auto-seq``: the live sequential allocation on tiny local models.

The live loop's budgets must equal the offline ``auto-seq`` policy (``SequentialAuto.budgets``,
what ``dprm ias --sequential`` runs) replayed on the same candidates in the order they were
drawn, with the same rounds and (a BoN v2 training set) the same final answers; the shard's
total budget is spent exactly; a resumed run redoes nothing; bad settings are refused in one
line before ``--out`` is claimed.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dprm.io import DataError

N_MAX, BASE_N, COST, ROUND = 64, 3, 0.1, 3
N_TRAIN, K_TRAIN = 40, 16


def _records(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def train_bon(tmp_path_factory, prm, math500, questions_file, calibrator_dirs):
    """A BoN v2 training set on this PRM's states: the first MATH-500 questions and the live
    ones (one population), K candidates each. A question's candidates are correct with
    probability p_q, the mono calibrator's estimate on its state made sharper (so allocating
    by question pays); a candidate's state is the question's moved along the direction from
    the calibrator's lowest to its highest question, up when correct, down when not (so the
    candidates' estimates carry signal); its PRM score is higher when correct (so best-of-n
    by the score gains with n)."""
    from dprm.data.contract import write_bon_set
    from dprm.llm.questions import load_questions
    from dprm.models import load

    questions = pd.concat([load_questions(math500, limit=N_TRAIN), load_questions(questions_file)])
    questions = questions.drop_duplicates("question_id").reset_index(drop=True)
    q_count = len(questions)
    scores, hidden = prm.question_state(questions["question"].tolist())
    mono = load(calibrator_dirs["mono"])
    mean = np.clip(mono.point_estimate(hidden, scores).astype(np.float64), 0.02, 0.98)
    p = 1 / (1 + np.exp(-4 * np.log(mean / (1 - mean))))
    rng = np.random.default_rng(0)
    correct = rng.random((q_count, K_TRAIN)) < p[:, None]
    direction = hidden[np.argmax(mean)] - hidden[np.argmin(mean)]
    noise = rng.normal(0, 0.3, (q_count, K_TRAIN, hidden.shape[1])) * hidden.std(0)
    cand_hidden = hidden[:, None, :] + noise + 0.3 * (2 * correct[..., None] - 1) * direction
    cand_hidden = cand_hidden.reshape(q_count * K_TRAIN, -1).astype(np.float32)
    cand_score = np.clip(0.5 + 0.2 * (2 * correct - 1) + rng.normal(0, 0.2, correct.shape), 0, 1)
    cand_score = cand_score.ravel().astype(np.float32)  # best-of-n by the PRM score pays
    responses = pd.DataFrame(
        {
            "question_id": np.repeat(questions["question_id"].to_numpy(), K_TRAIN),
            "response_id": np.tile(np.arange(K_TRAIN), q_count).astype(np.int32),
            "prm_score": cand_score,
            "correct": correct.ravel(),
            "answer": np.where(correct.ravel(), "7", "6"),
        }
    )
    path = tmp_path_factory.mktemp("train") / "bon"
    write_bon_set(
        path,
        pd.DataFrame({"question_id": questions["question_id"], "prm_score": scores.astype(np.float32)}),
        hidden.astype(np.float32),
        responses,
        {"source": "test"},
        dtype="float32",
        response_hidden=cand_hidden,
    )  # fmt: skip
    return path


def _without_answers(train_bon, dest):
    """A copy of the training set without final answers (BoN contract v1)."""
    import shutil

    from dprm.io import read_json, write_json

    shutil.copytree(train_bon, dest)
    responses = pd.read_parquet(dest / "responses.parquet").drop(columns="answer")
    responses.to_parquet(dest / "responses.parquet")
    meta = read_json(dest / "meta.json")
    meta["bon_version"] = 1
    write_json(dest / "meta.json", meta)
    return dest


class CountingGenerator:
    """Wraps a generator; records the size of every generate call."""

    def __init__(self, inner):
        self.inner, self.backend, self.model_name = inner, inner.backend, inner.model_name
        self.calls: list[tuple[int, int]] = []

    def generate(self, prompts, n, **kw):
        self.calls.append((len(prompts), n))
        return self.inner.generate(prompts, n, **kw)


def _config(questions_file, model_dirs, calibrator, train_bon, **changes):
    from dprm.live import SolveConfig

    settings = dict(
        mode="bon", questions=str(questions_file), generator=str(model_dirs["lm"]),
        prm=str(model_dirs["prm"]), calibrator=str(calibrator), n_max=N_MAX, baseline_n=BASE_N,
        max_new_tokens=48, auto_cost=COST,
        train_bon=None if train_bon is None else str(train_bon), auto_seq=True,
        round_size=ROUND,
    )  # fmt: skip
    settings.update(changes)
    return SolveConfig(**settings)


@pytest.fixture(scope="module")
def seq_run(
    tmp_path_factory, questions_file, model_dirs, calibrator_dirs, train_bon, load_cprm,
    generator, grading_pool,
):  # fmt: skip
    config = _config(questions_file, model_dirs, calibrator_dirs["mono"], train_bon)
    counting = CountingGenerator(generator)
    return _solved(tmp_path_factory.mktemp("seq"), config, load_cprm, counting, grading_pool)


def _solved(out, config, load_cprm, generator, pool):
    """run_bon with the mono calibrator: (out, summary, records, cprm, config, generator)."""
    from dprm.live import run_bon

    cprm = load_cprm(config.calibrator, n_max=N_MAX)
    summary = run_bon(config, cprm, generator, out, progress=False, pool=pool)
    return out, summary, _records(out / "bon.jsonl"), cprm, config, generator


def _live_states(out):
    from dprm.live.calibrated_prm import States

    table = pd.read_parquet(out / "question_states.parquet")
    hidden = np.load(out / "question_states.npy")
    return States(table["prm_score"].to_numpy(np.float32), hidden, np.zeros(len(table), bool))


def _answer_codes(out, records):
    """The drawn candidates' answer codes [Q, N_MAX] as the offline evaluator reads a BoN v2
    set (``Candidates.answer``): the run's exported answers, coded per question in candidate
    (= draw) order, a candidate stating no answer ("") a group of its own; -1 padding (never
    read if the policies agree)."""
    from dprm.data import read_bon_set

    responses = read_bon_set(out / "bon_set").responses
    codes = np.full((len(records), N_MAX), -1, dtype=np.int64)
    for i, r in enumerate(records):
        mine = responses[responses["question_id"] == r["question_id"]]
        text = mine.sort_values("response_id")["answer"].tolist()
        assert text == [c["answer"] for c in r["candidates"]]  # the export's answers
        keys = [a if a else ("", j) for j, a in enumerate(text)][:N_MAX]
        codes[i, : len(keys)] = pd.factorize(pd.Series(keys, dtype=object))[0]
    return codes


def _replay(records, seq, samples, share, answer=None, majority=False):
    """The offline policy's budgets [Q] on the live candidates in draw order (one order)."""
    # the candidates' estimates in draw order, padded to N_MAX (never read if the policies agree)
    # and their PRM scores, read by the highest-score index (the contract rule's pick)
    estimates = np.full((len(records), N_MAX), 0.5)
    scores = np.full((len(records), N_MAX), -np.inf)
    for i, r in enumerate(records):
        e = [c["estimate"] for c in r["candidates"]][:N_MAX]
        estimates[i, : len(e)] = e
        scores[i, : len(e)] = [c["prm_score"] for c in r["candidates"]][:N_MAX]
    identity = np.broadcast_to(np.arange(N_MAX), (1, len(records), N_MAX)).copy()
    return seq.budgets(
        samples, estimates, np.full(len(records), N_MAX), identity, [COST * N_MAX], share, N_MAX,
        round_size=ROUND, answer=answer, majority=majority,
        score=None if majority or seq.pick is None else scores,
    )[0, 0]  # fmt: skip


def test_live_allocation_equals_the_offline_policy_replayed(seq_run):
    from dprm.ias.sequential import SEQ_FLOOR_SHARES
    from dprm.live.bon_seq import fit_sequential

    out, _, records, cprm, config, _ = seq_run
    seq, samples, share, _ = fit_sequential(cprm, _live_states(out), config.train_bon, COST)
    # a v2 training set: the policy reads the answers, with a floor share chosen on training
    assert seq.answers is not None and share in SEQ_FLOOR_SHARES
    assert all(r["floor_share"] == share for r in records)
    # as sequential_rows does when both sets carry answers: the test pools' answer codes
    offline = _replay(records, seq, samples, share, _answer_codes(out, records))
    live = np.array([r["budget"] for r in records])
    np.testing.assert_array_equal(live, offline)
    # the total budget exactly, and an allocation that adapts (else the test is weak)
    assert live.sum() == round(COST * N_MAX * len(records))
    assert len(set(live.tolist())) > 1, "identical budgets would make this test weak"
    rounds = {c["round"] for r in records for c in r["candidates"][: r["budget"]]}
    assert max(rounds) >= 2, "the policy should have chosen draws in several rounds"


def test_live_policy_reads_the_drawn_answers(seq_run):
    """The live budgets are the answer-reading policy's: replayed without the answers, or with
    other answers, the offline policy allocates otherwise."""
    from dprm.live.bon_seq import fit_sequential
    from dprm.llm.answers import canonical_answer

    out, _, records, cprm, config, _ = seq_run
    seq, samples, share, _ = fit_sequential(cprm, _live_states(out), config.train_bon, COST)
    for r in records:  # every candidate carries its canonical final answer
        assert [c["answer"] for c in r["candidates"]] == [
            canonical_answer(c["text"]) for c in r["candidates"]
        ]
    draws = _records(out / "seq_draws.jsonl")
    assert all(d["answer"] == canonical_answer(d["text"]) for d in draws)
    live = np.array([r["budget"] for r in records])
    codes = _answer_codes(out, records)
    np.testing.assert_array_equal(_replay(records, seq, samples, share, codes), live)
    # the same policy reading the estimates only
    assert not np.array_equal(_replay(records, seq, samples, share), live)
    # every draw of a question agreeing on one answer (unanimity: evidence of a large p)
    agree = np.where(codes >= 0, 0, -1)
    assert not np.array_equal(_replay(records, seq, samples, share, agree), live)
    answers = [c["answer"] for r in records for c in r["candidates"][: r["budget"]]]
    assert "" in answers and len(set(answers) - {""}) > 1, "answers too uniform for this test"


def test_a_v1_training_set_keeps_the_estimates_only_policy(seq_run, tmp_path, train_bon):
    from dprm.live.bon_auto import fit_auto
    from dprm.live.bon_seq import fit_sequential

    out, _, _, cprm, _, _ = seq_run
    v1 = _without_answers(train_bon, tmp_path / "train-v1")
    states = _live_states(out)
    seq, _, share, _ = fit_sequential(cprm, states, str(v1), COST)
    assert seq.answers is None
    # the floor share of the estimates-only policy, chosen on the (v1) training pools
    from dprm.ias.paper.estimates import candidate_estimates
    from dprm.ias.selection.rules import Candidates
    from dprm.ias.sequential import sequential_floor_shares

    fitted = fit_auto(cprm, states, str(v1))
    train_est = fitted.train_estimate.with_candidate(
        candidate_estimates(cprm.calibrator, fitted.train)
    )
    cands = Candidates.from_bon(fitted.train)
    assert cands.answer is None
    (expect,), _ = sequential_floor_shares(
        seq, cands, train_est, cands.weights["last"], [COST], n_max=N_MAX
    )
    assert share == expect
    assert not seq.policy(np.full((1, 4), 0.5), np.array([N_MAX]), N_MAX).reads_answers


def test_answer_policy_floor_stays_uniform_under_shift(seq_run, monkeypatch):
    """Live questions unlike the training set's: floor share 1 even when answers are read."""
    import dprm.ias.learnt.allocation
    from dprm.live.bon_seq import fit_sequential

    out, _, _, cprm, config, _ = seq_run
    monkeypatch.setattr(dprm.ias.learnt.allocation, "shift_auc", lambda a, b, seed=0: 1.0)
    seq, _, share, shifted = fit_sequential(cprm, _live_states(out), config.train_bon, COST)
    assert seq.answers is not None and share == 1.0 and shifted


def _shifted(train_bon, dest):
    """A copy of the training set whose question states are moved far from the live ones (a
    shifted question set: the shift check's AUC is near 1); pools and answers kept, the
    candidates' PRM scores mapped (monotonely) into the tiny live PRM's range, 0.55 + 0.05 s,
    so that a score threshold learnt on them is one the live draws can cross."""
    import shutil

    shutil.copytree(train_bon, dest)
    hidden = np.load(dest / "hidden_states.npy")
    np.save(dest / "hidden_states.npy", (hidden + 8 * hidden.std(axis=0)).astype(hidden.dtype))
    responses = pd.read_parquet(dest / "responses.parquet")
    responses["prm_score"] = (0.55 + 0.05 * responses["prm_score"]).astype(np.float32)
    responses.to_parquet(dest / "responses.parquet")
    return dest


def _draw_view(record, n, train=None):
    """The offline peers' view of a record's first n draws (answer codes, raw scores,
    estimates), one order, one question; ``train``: the training pools' scores the fitted
    stopping rules read."""
    from dprm.ias.peers.methods import DrawView
    from dprm.ias.selection.rules import answer_key

    index: dict = {}
    cands = record["candidates"][:n]
    codes = [index.setdefault(answer_key(c["answer"], j), len(index)) for j, c in enumerate(cands)]
    return DrawView(
        np.array(codes)[None, None, :], np.array([c["prm_score"] for c in cands])[None, None, :],
        np.array([c["estimate"] for c in cands])[None, None, :], np.array([N_MAX]), N_MAX, train,
    )  # fmt: skip


def test_live_auto_seq_under_shift_falls_back_to_the_offline_peer(
    tmp_path, seq_run, train_bon, generator, grading_pool
):  # fmt: skip
    """Live questions unlike the training set's: as offline, auto-seq runs the calibrator-free
    peer chosen on the training pools (dprm.ias.peers.fallback.shift_fallback), not uniform
    best-of-N; records and summary say so; each question's draws stop where the offline rule
    stops on them, or where the shard's total round(c N_max Q) ran out (a budget-matched peer
    spends it exactly)."""
    import dataclasses

    from dprm.data import read_bon_set
    from dprm.ias.learnt.allocation import uniform_budgets
    from dprm.ias.peers.curves import training_scores
    from dprm.ias.peers.fallback import shift_fallback
    from dprm.ias.peers.methods import PEERS
    from dprm.ias.selection.rules import Candidates
    from dprm.live import run_bon
    from dprm.live.bon_seq import fit_sequential

    _, _, _, cprm, config, _ = seq_run
    shifted_train = _shifted(train_bon, tmp_path / "train-shifted")
    config = dataclasses.replace(config, train_bon=str(shifted_train))
    out = tmp_path / "shifted"
    summary = run_bon(config, cprm, generator, out, progress=False, pool=grading_pool)
    records = _records(out / "bon.jsonl")
    assert fit_sequential(cprm, _live_states(out), str(shifted_train), COST)[3]  # detected
    cands = Candidates.from_bon(read_bon_set(shifted_train, check_hidden=False))
    expect = shift_fallback(cands, cands.weights["last"], config.rule, COST, N_MAX)
    assert expect.peer not in ("uniform", "")
    assert summary["allocation"] == "auto-seq" and summary["falls_back_to"] == expect.peer
    budgets = np.array([r["budget"] for r in records])
    total = round(COST * N_MAX * len(records))
    assert budgets.sum() <= total
    stopped = 0
    for r in records:
        assert r["allocation"] == "auto-seq" and r["falls_back_to"] == expect.peer
        assert r["peer_level"] == pytest.approx(expect.level) and r["floor_share"] == 1.0
        if PEERS[expect.peer].budget_matched:
            continue
        n = r["budget"]
        view = _draw_view(r, n, training_scores(cands, None))
        stop = int(PEERS[expect.peer].budgets(view, [expect.level])[0, 0, 0])
        assert stop == n or (stop > n and (n == N_MAX or budgets.sum() == total))
        stopped += stop == n
    if PEERS[expect.peer].budget_matched:
        assert budgets.sum() == total
    else:
        # a rule stop somewhere, or the shard's whole budget spent (then every question's draws
        # were cut by the total, which the loop above checked)
        assert stopped >= 1 or budgets.sum() == total, "neither a rule stop nor the total"
    assert not np.array_equal(budgets, uniform_budgets(len(records), COST * N_MAX, N_MAX))
    assert {c["round"] for r in records for c in r["candidates"]} != {0}, "not the floor alone"


def test_live_allocation_under_shift_without_answers_is_uniform_best_of_n(
    tmp_path, seq_run, train_bon, generator, grading_pool
):  # fmt: skip
    """A training set without final answers (BoN contract v1) has no answer-reading peer to
    fall back to: as offline, exactly uniform best-of-N's budgets (the fractional part of
    c N_max included), the policy choosing no draw, recorded as falling back to uniform."""
    import dataclasses

    from dprm.ias.learnt.allocation import uniform_budgets
    from dprm.live import run_bon

    _, _, records, cprm, config, _ = seq_run
    assert len({r["budget"] for r in records}) > 1  # unshifted: the policy adapts
    v1 = _without_answers(_shifted(train_bon, tmp_path / "shifted-v2"), tmp_path / "shifted-v1")
    out = tmp_path / "shifted"
    summary = run_bon(dataclasses.replace(config, train_bon=str(v1)), cprm, generator, out,
                      progress=False, pool=grading_pool)  # fmt: skip
    shifted = _records(out / "bon.jsonl")
    budgets = np.array([r["budget"] for r in shifted])
    np.testing.assert_array_equal(budgets, uniform_budgets(len(shifted), COST * N_MAX, N_MAX))
    assert all(r["floor_share"] == 1.0 and r["falls_back_to"] == "uniform" for r in shifted)
    assert summary["falls_back_to"] == "uniform"
    policy_rounds = {c["round"] for r in shifted for c in r["candidates"][: r["budget"]]}
    assert policy_rounds == {0}, "every paid draw is the floor's"


def test_estimates_are_the_calibrator_on_each_candidates_own_state(seq_run, prm, questions_file):
    from dprm.llm.prompts import split_steps
    from dprm.llm.questions import load_questions

    _, _, records, cprm, _, _ = seq_run
    questions = load_questions(questions_file).set_index("question_id")
    r = max(records, key=lambda r: r["budget"])
    question = questions.loc[r["question_id"], "question"]
    outs = prm.score_steps(question, [split_steps(c["text"]) for c in r["candidates"]])
    hidden = np.stack([o.hidden[-1] for o in outs]).astype(np.float32)
    scores = np.array([o.scores[-1] for o in outs], np.float32).clip(0, 1)
    np.testing.assert_allclose(
        [c["estimate"] for c in r["candidates"]],
        cprm.calibrator.point_estimate(hidden, scores),
        atol=1e-6,
    )


def test_records_draw_order_baseline_and_batching(seq_run):
    out, summary, records, _, _, counting = seq_run
    orders = []
    for r in records:
        cands, n = r["candidates"], r["budget"]
        assert len(cands) == max(n, BASE_N) and r["samples"] == n
        policy = cands[:n]
        assert [c["round"] for c in policy[: r["floor"]]] == [0] * r["floor"]
        assert all(c["round"] is None and c["order"] is None for c in cands[n:])  # top-ups
        rounds = [c["round"] for c in policy]
        assert rounds == sorted(rounds)  # a question's draws come in the order they were made
        orders += [c["order"] for c in policy]
        scores = [c["prm_score"] for c in cands]
        assert r["chosen"]["index"] == int(np.argmax(scores[:n]))
        assert r["baseline"]["chosen"]["index"] == int(np.argmax(scores[:BASE_N]))
    assert sorted(orders) == list(range(sum(r["budget"] for r in records)))
    assert summary["allocation"] == "auto-seq"
    assert summary["adaptive"]["samples"] == sum(r["budget"] for r in records)
    assert summary["baseline"]["samples"] == BASE_N * len(records)
    assert all(n == 1 and size <= ROUND for size, n in counting.calls)  # batched by rounds
    from dprm.data import read_bon_set

    bon = read_bon_set(out / "bon_set")  # the export says how many draws and in what order
    assert bon.questions["live_budget"].tolist() == [r["budget"] for r in records]
    flat = [c for r in records for c in r["candidates"]]
    assert bon.responses["draw_order"].tolist() == [
        -1 if c["order"] is None else c["order"] for c in flat
    ]
    assert bon.responses["draw_round"].tolist() == [
        -1 if c["round"] is None else c["round"] for c in flat
    ]
    draws = _records(out / "seq_draws.jsonl")
    assert len(draws) == sum(len(r["candidates"]) for r in records)


def test_resume_replays_the_log_without_generating(
    seq_run, tmp_path, questions_file, model_dirs, calibrator_dirs, train_bon, load_cprm,
    generator, grading_pool,
):  # fmt: skip
    import shutil

    from dprm.live import run_bon

    out, _, records, _, config, _ = seq_run
    # an interrupted run: the draw log holds the first draws, no question is finished yet
    part = tmp_path / "part"
    part.mkdir()
    for name in ("run.json", "question_states.parquet", "question_states.npy"):
        shutil.copy(out / name, part / name)
    lines = (out / "seq_draws.jsonl").read_text().splitlines(keepends=True)
    (part / "seq_draws.jsonl").write_text("".join(lines[:7]) + lines[7][:20])  # a torn last line
    counting = CountingGenerator(generator)
    cprm = load_cprm(calibrator_dirs["mono"], n_max=N_MAX)
    run_bon(config, cprm, counting, part, progress=False, pool=grading_pool)
    assert sum(size for size, _ in counting.calls) == len(lines) - 7  # only the missing draws
    resumed = _records(part / "bon.jsonl")
    assert [r["budget"] for r in resumed] == [r["budget"] for r in records]
    # a finished run: nothing is generated and the log is unchanged
    counting = CountingGenerator(generator)
    before = (out / "bon.jsonl").read_bytes()
    run_bon(config, cprm, counting, out, progress=False, pool=grading_pool)
    assert counting.calls == [] and (out / "bon.jsonl").read_bytes() == before


def test_a_draw_log_without_answers_is_refused_in_one_line(
    seq_run, tmp_path, calibrator_dirs, load_cprm, generator, grading_pool
):
    """A draw log whose lines have no ``answer`` (another dprm's) fails naming the file and the
    draw, and generates nothing."""
    import shutil

    from dprm.live import run_bon

    out, _, _, _, config, _ = seq_run
    old = tmp_path / "old"
    old.mkdir()
    for name in ("run.json", "question_states.parquet", "question_states.npy"):
        shutil.copy(out / name, old / name)
    draws = _records(out / "seq_draws.jsonl")
    assert all("answer" in d for d in draws)
    text = "".join(json.dumps({k: v for k, v in d.items() if k != "answer"}) + "\n" for d in draws)
    (old / "seq_draws.jsonl").write_text(text, encoding="utf-8")
    counting = CountingGenerator(generator)
    cprm = load_cprm(calibrator_dirs["mono"], n_max=N_MAX)
    with pytest.raises(DataError, match="no 'answer'") as err:
        run_bon(config, cprm, counting, old, progress=False, pool=grading_pool)
    assert "\n" not in str(err.value) and "seq_draws.jsonl" in str(err.value)
    assert counting.calls == []
    assert (old / "seq_draws.jsonl").read_text(encoding="utf-8") == text  # the log is kept


def test_settings_refused_in_one_line(tmp_path, questions_file, model_dirs, calibrator_dirs, train_bon, capsys):  # fmt: skip
    import shutil

    from dprm.cli import main

    v1 = tmp_path / "train-v1"  # the same set without candidate states
    shutil.copytree(train_bon, v1)
    (v1 / "response_hidden_states.npy").unlink()
    argv = ["solve", "--mode", "bon", "--questions", str(questions_file), "--generator",
            str(model_dirs["lm"]), "--prm", str(model_dirs["prm"]), "--calibrator",
            str(calibrator_dirs["mono"]), "--prm-device", "cpu", "--device", "cpu", "--quiet"]  # fmt: skip
    seq = ["--auto-seq", "--auto-cost", "0.5", "--train-bon"]
    cases = [
        (["--auto-seq"], "--auto-seq needs --auto-cost"),
        ([*seq, str(tmp_path / "nope")], "not a directory"),
        ([*seq, str(train_bon), "--round-size", "0"], "--round-size 0"),
        ([*seq, str(v1)], "no candidate states"),
        ([*seq, str(train_bon), "--mode", "beam"], "bon only"),
    ]
    for i, (extra, message) in enumerate(cases):
        out = tmp_path / f"out{i}"
        assert main([*argv, *extra, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
        assert not out.exists()  # refused before --out was claimed
    # a calibrator that reads only the PRM score needs no candidate states
    from dprm.live.bon_seq import check_sequential_training
    from dprm.models import load

    check_sequential_training(load(calibrator_dirs["base"]), str(v1))


def test_help_explains_auto_seq(capsys):
    from dprm.cli import main

    with pytest.raises(SystemExit):
        main(["solve", "--help"])
    text = capsys.readouterr().out
    assert "--auto-seq" in text and "--round-size" in text and "posterior" in text


def test_a_run_json_without_a_setting_is_refused_in_one_line(tmp_path):
    """run.json lacking a fingerprinted setting (another dprm's) is not resumed."""
    from dprm.io import read_json, write_json
    from dprm.live import SolveConfig
    from dprm.live.run import start_run

    base = dict(mode="bon", questions="q", generator="g", prm="p", calibrator="c")
    start_run(tmp_path, SolveConfig(**base), {})
    start_run(tmp_path, SolveConfig(**base), {})  # the same settings: resumes
    old = read_json(tmp_path / "run.json")
    del old["auto_seq"], old["round_size"]
    write_json(tmp_path / "run.json", old)
    with pytest.raises(DataError, match="has no 'auto_seq', 'round_size'") as err:
        start_run(tmp_path, SolveConfig(**base), {})
    assert "\n" not in str(err.value)


def test_cli_runs_auto_seq(tmp_path, questions_file, model_dirs, calibrator_dirs, train_bon):
    from dprm.cli import main

    out = tmp_path / "cli"
    argv = ["solve", "--mode", "bon", "--questions", str(questions_file), "--generator",
            str(model_dirs["lm"]), "--prm", str(model_dirs["prm"]), "--calibrator",
            str(calibrator_dirs["base"]), "--prm-device", "cpu", "--prm-dtype", "float32",
            "--device", "cpu", "--grade-workers", "1", "--n-max", str(N_MAX), "--baseline-n", "0",
            "--max-new-tokens", "32", "--auto-cost", "0.05", "--train-bon", str(train_bon),
            "--auto-seq", "--round-size", "2", "--limit", "3", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    records = _records(out / "bon.jsonl")
    assert sum(r["budget"] for r in records) == round(0.05 * N_MAX * 3)
    assert all(r["baseline"] is None and len(r["candidates"]) == r["budget"] for r in records)
    run = json.loads((out / "run.json").read_text())
    assert run["auto_seq"] is True and run["round_size"] == 2
    assert json.loads((out / "summary.json").read_text())["allocation"] == "auto-seq"


@pytest.fixture(scope="module")
def majority_run(
    tmp_path_factory, questions_file, model_dirs, calibrator_dirs, train_bon, load_cprm,
    generator, grading_pool,
):  # fmt: skip
    """``--rule majority --auto-seq``; records how the policy was asked for."""
    from dprm.ias.sequential import SequentialAuto

    config = _config(
        questions_file, model_dirs, calibrator_dirs["mono"], train_bon, rule="majority"
    )
    calls, original = [], SequentialAuto.policy

    def spy(self, *args, **kwargs):
        calls.append(kwargs)
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SequentialAuto, "policy", spy)
        run = _solved(
            tmp_path_factory.mktemp("seq-majority"), config, load_cprm, generator, grading_pool
        )
    return (*run[:5], calls)


@pytest.mark.slow
def test_majority_auto_seq_runs_the_vote_race_live(majority_run):
    """--rule majority: the live policy indexes the vote race (as dprm ias --sequential does
    for majority), its budgets equal the offline race replayed on the same draws, and every
    question answers by majority vote over the draws it paid for."""
    from dprm.ias.selection.rules import select_candidate
    from dprm.ias.sequential import SEQ_FLOOR_SHARES
    from dprm.live.bon_seq import fit_sequential

    out, summary, records, cprm, config, calls = majority_run
    # the floor-share choice on the training pools and the live policy: both the race
    assert len(calls) >= 2 and all(c.get("majority") is True for c in calls), calls
    seq, samples, share, _ = fit_sequential(
        cprm, _live_states(out), config.train_bon, COST, "majority"
    )
    assert seq.answers is not None and share in SEQ_FLOOR_SHARES
    assert all(r["floor_share"] == share for r in records)
    codes = _answer_codes(out, records)
    live = np.array([r["budget"] for r in records])
    np.testing.assert_array_equal(_replay(records, seq, samples, share, codes, True), live)
    assert live.sum() == round(COST * N_MAX * len(records))
    for r in records:
        paid = r["candidates"][: r["budget"]]
        pick = select_candidate(
            "majority", [c["prm_score"] for c in paid], [c["answer"] for c in paid]
        )
        assert r["chosen"]["index"] == pick and r["chosen"]["answer"] == paid[pick]["answer"]
        assert r["correct"] == paid[pick]["correct"]
    assert summary["rule"] == "majority" and summary["allocation"] == "auto-seq"


@pytest.mark.slow
def test_majority_floor_share_is_chosen_for_the_vote(majority_run):
    """The floor share is the one the race does best with on the training pools under majority
    vote (sequential_floor_shares with vote and majority), not highest-last's."""
    from dprm.ias.paper.estimates import candidate_estimates
    from dprm.ias.selection.draws import table_weight
    from dprm.ias.selection.rules import Candidates
    from dprm.ias.sequential import sequential_floor_shares
    from dprm.live.bon_auto import fit_auto
    from dprm.live.bon_seq import fit_sequential

    out, _, records, cprm, config, _ = majority_run
    states = _live_states(out)
    seq, _, share, _ = fit_sequential(cprm, states, config.train_bon, COST, "majority")
    fitted = fit_auto(cprm, states, config.train_bon, "majority")
    train_est = fitted.train_estimate.with_candidate(
        candidate_estimates(cprm.calibrator, fitted.train)
    )
    cands = Candidates.from_bon(fitted.train)
    (expect,), _ = sequential_floor_shares(
        seq, cands, train_est, table_weight(cands, "majority", None), [COST],
        vote=True, majority=True, n_max=N_MAX,
    )  # fmt: skip
    assert share == expect


def test_fixed_budget_run_picks_by_the_rule(
    tmp_path, questions_file, model_dirs, calibrator_dirs, load_cprm, generator, grading_pool
):
    """The C rule with --rule majority / weighted-last: the adaptive pick, the baseline's and
    the fixed-n curve all vote on the candidates' final answers."""
    from dprm.ias.selection.rules import select_candidate
    from dprm.live import run_bon
    from dprm.llm.answers import canonical_answer

    cprm = load_cprm(calibrator_dirs["base"], n_max=8)
    for rule in ("majority", "weighted-last"):
        config = _config(
            questions_file, model_dirs, calibrator_dirs["base"], None, n_max=8, baseline_n=8,
            auto_cost=None, auto_seq=False, C=0.7, rule=rule,
        )  # fmt: skip
        out = tmp_path / rule
        summary = run_bon(config, cprm, generator, out, progress=False, pool=grading_pool)
        records = _records(out / "bon.jsonl")
        for r in records:
            cands = r["candidates"]
            assert [c["answer"] for c in cands] == [canonical_answer(c["text"]) for c in cands]
            scores, answers = [c["prm_score"] for c in cands], [c["answer"] for c in cands]
            n = r["budget"]
            assert r["chosen"]["index"] == select_candidate(rule, scores[:n], answers[:n])
            assert r["baseline"]["chosen"]["index"] == select_candidate(rule, scores, answers)
        by_rule = [
            np.mean([c["correct"] for r in records for c in [r["candidates"][select_candidate(
                rule, [c["prm_score"] for c in r["candidates"][:n]],
                [c["answer"] for c in r["candidates"][:n]])]]])
            for n in (1, 2, 4, 8)
        ]  # fmt: skip
        assert [c["accuracy"] for c in summary["fixed_curve"]] == pytest.approx(by_rule)
        assert summary["rule"] == rule
    # the vote differs from highest-last on these draws somewhere (else the test is weak)
    records = _records(tmp_path / "majority" / "bon.jsonl")
    assert any(
        r["baseline"]["chosen"]["index"]
        != int(np.argmax([c["prm_score"] for c in r["candidates"]]))
        for r in records
    )


def test_voting_rules_refused_in_one_line(
    tmp_path, questions_file, model_dirs, calibrator_dirs, train_bon, capsys
):
    from dprm.cli import main

    v1 = _without_answers(train_bon, tmp_path / "train-v1")
    argv = ["solve", "--mode", "bon", "--questions", str(questions_file), "--generator",
            str(model_dirs["lm"]), "--prm", str(model_dirs["prm"]), "--calibrator",
            str(calibrator_dirs["mono"]), "--prm-device", "cpu", "--device", "cpu", "--quiet"]  # fmt: skip
    cases = [
        (["--rule", "majority", "--mode", "beam"], "bon only"),
        (["--rule", "majority", "--auto-cost", "0.1", "--train-bon", str(v1)], "contract v1"),
    ]
    for i, (extra, message) in enumerate(cases):
        out = tmp_path / f"out{i}"
        assert main([*argv, *extra, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
        assert not out.exists()  # refused before --out was claimed or any model loaded
    with pytest.raises(SystemExit):
        main([*argv, "--rule", "highest-min", "--out", str(tmp_path / "bad")])
    assert "invalid choice" in capsys.readouterr().err
