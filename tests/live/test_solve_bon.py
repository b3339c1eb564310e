"""``dprm solve --mode bon`` on tiny local models and four MATH-500 questions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dprm.io import DataError
from dprm.metrics import midpoint_levels

C, N_MAX, BASE_N = 0.7, 8, 4


def _config(questions_file, model_dirs, calibrator, **changes):
    from dprm.live import SolveConfig

    settings = dict(
        mode="bon",
        questions=str(questions_file),
        generator=str(model_dirs["lm"]),
        prm=str(model_dirs["prm"]),
        calibrator=str(calibrator),
        C=C,
        n_max=N_MAX,
        baseline_n=BASE_N,
        max_new_tokens=64,
        batch_questions=3,
    )
    settings.update(changes)
    return SolveConfig(**settings)


class CountingGenerator:
    """Wraps a generator and records the prompts it was asked for."""

    def __init__(self, inner):
        self.inner, self.backend, self.model_name = inner, inner.backend, inner.model_name
        self.prompts: list[str] = []

    def generate(self, prompts, n, **kw):
        self.prompts += list(prompts)
        return self.inner.generate(prompts, n, **kw)


def _records(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def bon_run(
    tmp_path_factory,
    questions_file,
    model_dirs,
    calibrator_dirs,
    load_cprm,
    generator,
    grading_pool,
):
    from dprm.live import run_bon

    out = tmp_path_factory.mktemp("bon")
    config = _config(questions_file, model_dirs, calibrator_dirs["mono"])
    cprm = load_cprm(calibrator_dirs["mono"], n_max=N_MAX)
    summary = run_bon(config, cprm, generator, out, progress=False, pool=grading_pool)
    return out, summary, _records(out / "bon.jsonl"), cprm


def test_budgets_follow_the_mixture_rule_of_the_calibrator(
    bon_run, prm, questions_file, budget_rule
):
    from dprm.llm.questions import load_questions

    _, _, records, cprm = bon_run
    questions = load_questions(questions_file)
    assert [r["question_id"] for r in records] == questions["question_id"].tolist()
    scores, hidden = prm.question_state(questions["question"].tolist())
    q_mid = cprm.calibrator.quantiles(hidden, midpoint_levels(100), scores)
    expect = [budget_rule(row, C, N_MAX) for row in q_mid]
    assert [r["budget"] for r in records] == expect
    assert len(set(expect)) > 1, "the fixture calibrator should give different budgets"
    np.testing.assert_allclose([r["question_prm_score"] for r in records], scores, atol=1e-6)
    np.testing.assert_allclose(
        [r["question_p_hat"] for r in records],
        cprm.calibrator.point_estimate(hidden, scores),
        atol=1e-6,
    )


def test_records_pick_grade_and_count_consistently(bon_run, prm, questions_file):
    from dprm.llm.grading import verify_answer
    from dprm.llm.prompts import split_steps
    from dprm.llm.questions import load_questions

    _, _, records, _ = bon_run
    questions = load_questions(questions_file).set_index("question_id")
    for r in records:
        cands, n = r["candidates"], r["budget"]
        assert len(cands) == max(n, BASE_N) and r["samples"] == n
        assert r["tokens"] == sum(c["n_tokens"] for c in cands[:n]) > 0
        scores = [c["prm_score"] for c in cands]
        assert r["chosen"]["index"] == int(np.argmax(scores[:n]))
        assert r["chosen"]["prm_score"] == max(scores[:n])
        assert r["correct"] == cands[r["chosen"]["index"]]["correct"]
        base = r["baseline"]
        assert base["samples"] == BASE_N and base["chosen"]["index"] == int(
            np.argmax(scores[:BASE_N])
        )
        assert base["tokens"] == sum(c["n_tokens"] for c in cands[:BASE_N])
        gold = questions.loc[r["question_id"], "answer"]
        assert r["gold"] == gold
        for c in cands:  # each candidate graded against its own question's gold answer
            assert c["correct"] == verify_answer(gold, c["text"]), c["text"]
    # candidate scores are the PRM's last-step score of the split response
    first = records[0]
    question = questions.loc[first["question_id"], "question"]
    outs = prm.score_steps(question, [split_steps(c["text"]) for c in first["candidates"]])
    np.testing.assert_allclose(
        [c["prm_score"] for c in first["candidates"]], [o.scores[-1] for o in outs], atol=1e-6
    )
    assert any(c["correct"] for r in records for c in r["candidates"]), (
        "no correct candidate: a weak test"
    )


def test_summary_matches_records(bon_run):
    out, summary, records, _ = bon_run
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    adaptive, base = summary["adaptive"], summary["baseline"]
    assert adaptive["samples"] == sum(r["budget"] for r in records)
    assert adaptive["tokens"] == sum(r["tokens"] for r in records)
    assert adaptive["accuracy"] == pytest.approx(np.mean([r["correct"] for r in records]))
    assert adaptive["cost"] == pytest.approx(np.mean([r["budget"] for r in records]) / N_MAX)
    assert base["samples"] == BASE_N * len(records) and base["n"] == BASE_N
    assert base["accuracy"] == pytest.approx(np.mean([r["baseline"]["correct"] for r in records]))
    assert summary["saving"]["samples"] == pytest.approx(1 - adaptive["samples"] / base["samples"])
    curve = summary["fixed_curve"]
    assert [c["n"] for c in curve] == [1, 2, 4]
    for point in curve:
        picks = [
            int(np.argmax([c["prm_score"] for c in r["candidates"][: point["n"]]])) for r in records
        ]
        acc = np.mean([r["candidates"][i]["correct"] for r, i in zip(records, picks, strict=True)])
        assert point["accuracy"] == pytest.approx(acc) and point["samples"] == point["n"] * len(
            records
        )


def test_resume_skips_finished_questions_and_repairs_a_torn_line(
    tmp_path, questions_file, model_dirs, calibrator_dirs, load_cprm, generator, grading_pool
):
    from dprm.live import run_bon

    cprm = load_cprm(calibrator_dirs["base"], n_max=4)
    counting = CountingGenerator(generator)
    config = _config(
        questions_file, model_dirs, calibrator_dirs["base"], n_max=4, baseline_n=0, C=0.5, limit=2
    )
    run_bon(config, cprm, counting, tmp_path, progress=False, pool=grading_pool)
    first = _records(tmp_path / "bon.jsonl")
    assert len(first) == 2 and len(counting.prompts) == 2
    with open(tmp_path / "bon.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"question_id": "test/alg')  # a run killed mid-write
    counting.prompts.clear()
    summary = run_bon(
        _config(questions_file, model_dirs, calibrator_dirs["base"], n_max=4, baseline_n=0, C=0.5),
        cprm,
        counting,
        tmp_path,
        progress=False,
        pool=grading_pool,
    )
    records = _records(tmp_path / "bon.jsonl")
    assert len(counting.prompts) == 2, "only the two unfinished questions are generated"
    assert records[:2] == first and len(records) == 4 and summary["n_questions"] == 4
    assert summary["baseline"] is None
    with pytest.raises(DataError, match=r"run\.json.*C: was 0\.5, now 0\.6"):
        run_bon(
            _config(
                questions_file, model_dirs, calibrator_dirs["base"], n_max=4, baseline_n=0, C=0.6
            ),
            cprm,
            counting,
            tmp_path,
            progress=False,
            pool=grading_pool,
        )


def test_cli_help_and_fail_fast(tmp_path, capsys):
    from dprm.cli import build_parser, main

    help_text = build_parser()._subparsers._group_actions[0].choices["solve"].format_help()
    for flag in ("--mode", "--questions", "--generator", "--prm", "--calibrator", "--out", "--C",
                 "--n-max", "--backend", "--baseline-n", "--limit", "--shard"):  # fmt: skip
        assert flag in help_text
    missing = tmp_path / "nope.jsonl"
    rc = main(["solve", "--mode", "bon", "--questions", str(missing), "--generator", "g", "--prm", "p",
               "--calibrator", "c", "--out", str(tmp_path / "o")])  # fmt: skip
    assert rc == 2 and str(missing) in capsys.readouterr().err
    rc = main(["solve", "--mode", "beam", "--questions", str(missing), "--generator", "g", "--prm", "p",
               "--calibrator", "c", "--out", str(tmp_path / "o"), "--n-max", "10", "--beam-width", "4"])  # fmt: skip
    assert rc == 2 and "multiple of --beam-width" in capsys.readouterr().err


def test_shards_without_gold_answers(
    tmp_path, model_dirs, calibrator_dirs, load_cprm, generator, grading_pool
):
    from dprm.data import read_bon_set
    from dprm.live import run_bon
    from dprm.llm.shard import merge_shards

    questions = tmp_path / "open.jsonl"
    texts = ["What is 3 + 4?", "What is 2 + 5?", "What is 9 + 9?"]
    questions.write_text(
        "".join(
            json.dumps({"question_id": f"open/{i}", "question": q}) + "\n"
            for i, q in enumerate(texts)
        )
    )
    cprm = load_cprm(calibrator_dirs["base"], n_max=2)
    out = tmp_path / "run"
    for shard in ("0/2", "1/2"):
        config = _config(
            questions,
            model_dirs,
            calibrator_dirs["base"],
            n_max=2,
            baseline_n=0,
            max_new_tokens=8,
            shard=shard,
        )
        summary = run_bon(config, cprm, generator, out, progress=False, pool=grading_pool)
    first = _records(out / "bon.shard-00000-of-00002.jsonl")
    second = _records(out / "bon.shard-00001-of-00002.jsonl")
    assert [r["question_id"] for r in first + second] == ["open/0", "open/1", "open/2"]
    assert all(r["gold"] is None and r["correct"] is None for r in first + second)
    assert summary["n_questions"] == 3 and summary["adaptive"]["accuracy"] is None
    assert summary["adaptive"]["n_graded"] == 0
    merge_shards(out / "bon_set")
    merged = read_bon_set(out / "bon_set")
    assert merged.questions["question_id"].tolist() == ["open/0", "open/1", "open/2"]
    assert not merged.responses["graded"].any()


def test_grading_failures_are_flagged_and_counted(
    tmp_path, questions_file, model_dirs, calibrator_dirs, load_cprm, generator, grading_pool
):
    """A grader timeout or error grades False; the candidate says so (``grade_failed``) and the
    summary counts them, so a run whose grader struggled is not read as a run of wrong answers."""
    from dprm.live import run_bon
    from dprm.llm.grading import GradeResult

    class FlakyPool:
        """The real pool, with every third item reported as timed out (and graded False)."""

        flagged = 0

        def grade(self, golds, predictions):
            real = grading_pool.grade(golds, predictions)
            timed_out = np.arange(len(golds)) % 3 == 0
            self.flagged += int(timed_out.sum())
            return GradeResult(real.correct & ~timed_out, timed_out, real.error, real.seconds)

    config = _config(questions_file, model_dirs, calibrator_dirs["mono"])
    cprm = load_cprm(calibrator_dirs["mono"], n_max=N_MAX)
    pool = FlakyPool()
    summary = run_bon(config, cprm, generator, tmp_path, progress=False, pool=pool)
    cands = [c for r in _records(tmp_path / "bon.jsonl") for c in r["candidates"]]
    failed = [c for c in cands if c["grade_failed"]]
    assert failed and all(c["correct"] is False for c in failed)
    assert summary["grading"] == {"candidates": len(cands), "failed": len(failed)}
    assert len(failed) == pool.flagged  # every item the pool flagged, and only those


def test_a_clean_run_reports_no_grading_failures(bon_run):
    _, summary, records, _ = bon_run
    n = sum(len(r["candidates"]) for r in records)
    assert summary["grading"] == {"candidates": n, "failed": 0}
    assert all(c["grade_failed"] is False for r in records for c in r["candidates"])


@pytest.mark.parametrize("trained_on", ["other", "same"])
def test_solve_warns_about_a_calibrator_trained_on_another_prm(
    tmp_path, model_dirs, calibrator_dirs, capsys, trained_on
):
    """`ias`, `evaluate` and `predict` warned about a calibrator trained on another PRM's data;
    `solve` said nothing."""
    import shutil

    from dprm.cli import main

    calibrator = Path(shutil.copytree(calibrator_dirs["base"], tmp_path / "cal"))
    config = json.loads((calibrator / "config.json").read_text())
    prm = "another/PRM-7B" if trained_on == "other" else str(model_dirs["prm"])
    config.setdefault("info", {})["trained_on"] = {"prm": prm}
    (calibrator / "config.json").write_text(json.dumps(config))
    questions = tmp_path / "open.jsonl"
    questions.write_text(json.dumps({"question_id": "open/0", "question": "What is 3 + 4?"}))
    argv = ["solve", "--mode", "bon", "--questions", str(questions), "--generator",
            str(model_dirs["lm"]), "--prm", str(model_dirs["prm"]), "--calibrator",
            str(calibrator), "--out", str(tmp_path / "run"), "--n-max", "2", "--baseline-n", "0",
            "--max-new-tokens", "8", "--prm-device", "cpu", "--prm-dtype", "float32",
            "--device", "cpu", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    if trained_on == "same":
        assert warnings == []
    else:
        assert len(warnings) == 1 and "another/PRM-7B" in warnings[0], warnings
        assert str(model_dirs["prm"]) in warnings[0] and str(calibrator) in warnings[0]
