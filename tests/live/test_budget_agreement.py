"""The budgets of a live ``dprm solve`` run and of ``dprm ias`` on the same scores agree exactly."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

C, N_MAX = 0.7, 64  # C on dprm ias's C grid; N_MAX 64: `dprm ias --n-max 8` fails in uniform_curve


def _records(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_live_budgets_equal_dprm_ias_budgets(
    tmp_path, questions_file, model_dirs, calibrator_dirs, load_cprm, generator, grading_pool, prm
):
    from dprm.cli import main
    from dprm.data import read_bon_set
    from dprm.live import SolveConfig, run_bon

    live = tmp_path / "live"
    rc = main(["solve", "--mode", "bon", "--questions", str(questions_file), "--generator", str(model_dirs["lm"]),
               "--prm", str(model_dirs["prm"]), "--calibrator", str(calibrator_dirs["mono"]), "--out", str(live),
               "--C", str(C), "--n-max", str(N_MAX), "--baseline-n", "2", "--max-new-tokens", "48",
               "--prm-device", "cpu", "--prm-dtype", "float32", "--device", "cpu", "--grade-workers", "1",
               "--quiet"])  # fmt: skip
    assert rc == 0
    records = {r["question_id"]: r for r in _records(live / "bon.jsonl")}
    # the same questions with a fixed-level calibrator (API; same PRM, so the same states)
    qr_out = tmp_path / "live-qr"
    config = SolveConfig(mode="bon", questions=str(questions_file), generator=str(model_dirs["lm"]),
                         prm=str(model_dirs["prm"]), calibrator=str(calibrator_dirs["qr"]), C=C, n_max=N_MAX,
                         baseline_n=0, max_new_tokens=8)  # fmt: skip
    run_bon(
        config,
        load_cprm(calibrator_dirs["qr"], n_max=N_MAX),
        generator,
        qr_out,
        progress=False,
        pool=grading_pool,
    )
    qr_records = {r["question_id"]: r for r in _records(qr_out / "bon.jsonl")}

    bon = read_bon_set(live / "bon_set")
    assert bon.hidden.dtype == np.float32 and list(bon.questions["question_id"]) == list(records)
    assert len(bon.responses) == sum(len(r["candidates"]) for r in records.values())
    assert bon.version == 2  # canonical answers: vote rules run on a live export
    scores, hidden = prm.question_state(
        [json.loads(line)["problem"] for line in questions_file.read_text().splitlines()]
    )
    np.testing.assert_allclose(np.asarray(bon.hidden), hidden, atol=1e-6)
    np.testing.assert_allclose(bon.questions["prm_score"], scores, atol=1e-6)

    ias = tmp_path / "ias"
    rc = main(["ias", "--bon", str(live / "bon_set"), "--model", str(calibrator_dirs["mono"]),
               "--model", str(calibrator_dirs["qr"]), "--out", str(ias), "--n-max", str(N_MAX),
               "--mc-trials", "0", "--quiet"])  # fmt: skip
    assert rc == 0
    budgets = pd.read_parquet(ias / "budgets.parquet")
    rows = budgets[(budgets["allocation"] == "C") & np.isclose(budgets["C"], C)]
    for method, live_records in (("mono", records), ("qr", qr_records)):
        offline = rows[rows["method"] == method].set_index("question_id")["n"]
        assert sorted(offline.index) == sorted(live_records)
        live_n = {q: r["budget"] for q, r in live_records.items()}
        assert {q: int(n) for q, n in offline.items()} == live_n, method
    assert len({r["budget"] for r in records.values()}) > 1, (
        "identical budgets would make this test weak"
    )

    # resuming reads the cached question states: nothing changes
    before = (live / "bon.jsonl").read_bytes()
    assert main(["solve", "--mode", "bon", "--questions", str(questions_file), "--generator", str(model_dirs["lm"]),
                 "--prm", str(model_dirs["prm"]), "--calibrator", str(calibrator_dirs["mono"]), "--out", str(live),
                 "--C", str(C), "--n-max", str(N_MAX), "--baseline-n", "2", "--max-new-tokens", "48",
                 "--prm-device", "cpu", "--device", "cpu", "--grade-workers", "1", "--quiet"]) == 0  # fmt: skip
    assert (live / "bon.jsonl").read_bytes() == before
