"""``dprm solve`` (best-of-N) with a PRM on the real Qwen2.5-Math-PRM vocabulary, loaded from a
directory exactly as a hub id would be (tiny random weights, the tiny bigram generator)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures import real_prms  # noqa: E402

N_MAX, BASE_N = 4, 2


def test_bon_with_the_real_qwen_prm_layout(
    tmp_path, questions_file, model_dirs, calibrator_dirs, generator, grading_pool
):
    from dprm.live import CalibratedPRM, SolveConfig, run_bon
    from dprm.llm.prm import load_prm
    from dprm.llm.prompts import split_steps
    from dprm.llm.questions import load_questions
    from dprm.models import load

    # hidden size of the session's calibrators (fitted on the tiny PRM's states)
    hidden = json.loads((model_dirs["prm"] / "config.json").read_text())["hidden_size"]
    prm_dir = real_prms.build_qwen_prm(tmp_path / "qwen2.5-math-prm-tiny", hidden=hidden)
    prm = load_prm(str(prm_dir), device="cpu", dtype="float32")
    assert prm.kind == "qwen-prm" and prm.separator_id == real_prms.QWEN_SEPARATOR_ID
    config = SolveConfig(
        mode="bon", questions=str(questions_file), generator=str(model_dirs["lm"]),
        prm=str(prm_dir), calibrator=str(calibrator_dirs["base"]), C=0.7, n_max=N_MAX,
        baseline_n=BASE_N, max_new_tokens=48, batch_questions=4,
    )  # fmt: skip
    cprm = CalibratedPRM(prm, load(calibrator_dirs["base"]), n_max=N_MAX)
    out = tmp_path / "bon"
    run_bon(config, cprm, generator, out, progress=False, pool=grading_pool)
    records = [json.loads(x) for x in (out / "bon.jsonl").read_text(encoding="utf-8").splitlines()]
    questions = load_questions(questions_file).set_index("question_id")
    assert [r["question_id"] for r in records] == questions.index.tolist()
    first = records[0]
    texts = [c["text"] for c in first["candidates"]]
    outs = prm.score_steps(questions.loc[first["question_id"], "question"],
                           [split_steps(t) for t in texts])  # fmt: skip
    scores = [c["prm_score"] for c in first["candidates"]]
    np.testing.assert_allclose(scores, [o.scores[-1] for o in outs], atol=1e-6)
    assert all(1 <= r["budget"] <= N_MAX for r in records)
