"""Park et al.'s calibrated adapters: ``dprm embed --adapter`` and the ``park-qr`` calibrator.

A LoRA adapter is made with peft, the way Park's trainer makes it (head converted to 3 quantile
outputs, LoRA on ``score.0`` / ``score.2`` / ``q_proj`` / ``v_proj``, task type CAUSAL_LM), on a
tiny Qwen2.5-Math-PRM with the real Qwen2 vocabulary; saved; loaded back through ``dprm embed
--adapter``. Its quantiles must equal a direct peft forward of Park's ``score()`` input, the raw
score and hidden state must stay the base PRM's, and ``dprm evaluate`` must report ``park-qr``
beside ``qr``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from fixtures import real_prms  # noqa: E402

pytest.importorskip("peft", reason="the llm extra installs peft")

SYSTEM = "Please reason step by step, and put your final answer in \\boxed{}."


def _labels(n_questions: int = 12) -> pd.DataFrame:
    from dprm.llm.prompts import join_steps

    rng = np.random.default_rng(0)
    rows = []
    for q in range(n_questions):
        question = f"What is {q} + {q + 1}?"
        for r in range(2):
            steps = [f"## Step 1: Add {q} and {q + 1}.", f"It is {2 * q + 1 + r}.",
                     f"The answer is $\\boxed{{{2 * q + 1 + r}}}$."]  # fmt: skip
            for k in range(len(steps) + 1):
                n_correct = int(rng.integers(0, 5))
                rows.append({"question_id": f"q{q}", "response_id": r, "step": k,
                             "question": question, "reasoning_prefix": join_steps(steps[:k]),
                             "n_correct": n_correct, "n_rollouts": 4,
                             "success_prob": n_correct / 4})  # fmt: skip
    return pd.DataFrame(rows).astype(
        {"response_id": "int32", "step": "int32", "n_correct": "int32", "n_rollouts": "int32",
         "success_prob": "float32"}
    )  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from dprm.cli import main

    root = tmp_path_factory.mktemp("park")
    prm_dir = real_prms.build_qwen_prm(root / "qwen2.5-math-prm-tiny")
    adapter = real_prms.make_park_adapter(prm_dir, root / "adapter")
    labels = _labels()
    labels.to_parquet(root / "labels.parquet")
    common = ["embed", "--labels", str(root / "labels.parquet"), "--prm", str(prm_dir),
              "--device", "cpu", "--hidden-dtype", "float32", "--no-progress"]  # fmt: skip
    assert main([*common, "--out", str(root / "calib-park"), "--adapter", str(adapter)]) == 0
    assert main([*common, "--out", str(root / "calib-plain")]) == 0
    return root, prm_dir, adapter, labels


def test_quantile_head_reproduces_the_score_before_training():
    from torch import nn

    from dprm.llm.park_adapter import quantile_head

    torch.manual_seed(0)
    layer = nn.Linear(8, 2)
    x = torch.randn(5, 8)
    new = quantile_head(layer)
    assert new.out_features == 3
    expected = layer(x).softmax(-1)[:, 1:].expand(-1, 3)
    torch.testing.assert_close(new(x).sigmoid(), expected, atol=1e-6, rtol=0)


def test_embed_writes_the_adapter_quantiles_of_a_direct_peft_forward(world):
    from peft import PeftModel

    from dprm.data.contract import read_calibration_set
    from dprm.llm.park_adapter import quantile_head
    from dprm.llm.prm_models import peft_ready, qwen_prm_class

    root, prm_dir, adapter, labels = world
    park = read_calibration_set(root / "calib-park")
    plain = read_calibration_set(root / "calib-plain")
    cols = ["park_q10", "park_q50", "park_q90"]
    columns = list(park.records.columns)
    at = columns.index("prm_score")
    assert columns[at : at + 4] == ["prm_score", *cols]
    assert park.meta["prm_adapter"] == str(adapter) and "park_q10" not in plain.records
    # the raw score and the hidden state are the base PRM's
    np.testing.assert_allclose(park.records["prm_score"], plain.records["prm_score"], atol=1e-6)
    np.testing.assert_allclose(np.asarray(park.hidden), np.asarray(plain.hidden), atol=1e-6)

    base = qwen_prm_class().from_pretrained(prm_dir)
    base.score[2] = quantile_head(base.score[2])
    model = PeftModel.from_pretrained(peft_ready(base), str(adapter)).eval()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(prm_dir)
    sep = tok.convert_tokens_to_ids("<extra_0>")
    spread = []
    for row in park.records.itertuples():
        steps = row.reasoning_prefix.split("\n\n")  # Park's score(): "" is one empty step
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": row.question},
                    {"role": "assistant", "content": "<extra_0>".join(steps) + "<extra_0>"}]  # fmt: skip
        ids = tok.encode(tok.apply_chat_template(messages, tokenize=False), return_tensors="pt")
        with torch.no_grad():
            out = model.get_base_model()(input_ids=ids)[0]  # [L, 3] logits, LoRA active
        expected = out[ids[0] == sep][-1].sigmoid().numpy()
        got = np.array([getattr(row, c) for c in cols])
        np.testing.assert_allclose(got, expected, atol=1e-5)
        spread.append(expected[2] - expected[0])
    assert np.ptp(park.records["park_q50"]) > 1e-3 and np.abs(spread).max() > 1e-3


def test_park_qr_is_evaluated_beside_the_other_calibrators(world, tmp_path):
    from dprm.cli import main

    root = world[0]
    data = str(root / "calib-park")
    assert main(["train", "--method", "park-qr", "--data", data, "--out", str(tmp_path / "pq"),
                 "--quiet"]) == 0  # fmt: skip
    assert main(["train", "--method", "qr", "--data", data, "--out", str(tmp_path / "qr"),
                 "--set", "max_steps=4", "--set", "eval_every=2", "--set", "warmup_steps=0",
                 "--quiet"]) == 0  # fmt: skip
    out = tmp_path / "metrics.json"
    assert main(["evaluate", "--data", data, "--model", str(tmp_path / "pq"), "--model",
                 str(tmp_path / "qr"), "--out", str(out), "--quiet"]) == 0  # fmt: skip
    metrics = json.loads(out.read_text())
    assert set(metrics) == {"base", "park-qr", "qr"}
    records = pd.read_parquet(root / "calib-park" / "records.parquet")
    y = records["success_prob"].to_numpy(np.float64)
    p = records["park_q50"].to_numpy(np.float64)
    assert metrics["park-qr"]["brier"] == pytest.approx(float(np.mean((p - y) ** 2)), rel=1e-5)
    assert metrics["park-qr"]["wql"] is not None and metrics["park-qr"]["n"] == len(records)


def test_adapter_needs_a_qwen_prm_and_park_qr_needs_the_columns(world, tmp_path):
    from dprm.cli import main

    root, prm_dir, adapter, _ = world
    shepherd = real_prms.build_shepherd(tmp_path / "math-shepherd-tiny")
    code = main(["embed", "--labels", str(root / "labels.parquet"), "--prm", str(shepherd),
                 "--device", "cpu", "--adapter", str(adapter), "--out", str(tmp_path / "x"),
                 "--no-progress"])  # fmt: skip
    assert code == 2
    code = main(["train", "--method", "park-qr", "--data", str(root / "calib-plain"), "--out",
                 str(tmp_path / "pq"), "--quiet"])  # fmt: skip
    assert code == 2 and not (tmp_path / "pq").exists()


def test_adapter_is_refused_for_bon_sets(world, toy_trajectories, tmp_path, capsys):
    from dprm.cli import main

    _, prm_dir, adapter, _ = world
    pool = toy_trajectories.assign(correct=[True, False] * 3, response_id=lambda f: f.response_id)
    pool.to_parquet(tmp_path / "pool.parquet")
    code = main(["embed", "--bon", str(tmp_path / "pool.parquet"), "--prm", str(prm_dir),
                 "--device", "cpu", "--adapter", str(adapter), "--out", str(tmp_path / "bon"),
                 "--no-progress"])  # fmt: skip
    assert code == 2 and "BoN sets do not carry them" in capsys.readouterr().err
    assert not (tmp_path / "bon").exists()
