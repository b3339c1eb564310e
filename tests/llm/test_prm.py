"""PRM wrappers: one-pass scores/hidden states vs per-prefix passes and the reference readouts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dprm.io import DataError
from dprm.llm.prm import QWEN_PRM_SYSTEM, REASONEVAL_PROMPT, infer_kind, load_prm

from . import tiny_models

QUESTION = "What is 3 + 4? Give the answer as $\\frac{a}{b}$ if needed."
STEPS = [
    "## Step 1: Add the numbers.\n3 + 4 = 7.",
    "## Step 2: Check the sum.",
    "## Step 3: Nothing else {to} do.",
    "Therefore, the final answer is: $\\boxed{7}$. I hope it is correct.",
]


@pytest.fixture(scope="module")
def other_prms(tmp_path_factory, tokenizer_dirs):
    root = tmp_path_factory.mktemp("prms")
    dirs = {
        "math-shepherd": tiny_models.build_shepherd(
            tokenizer_dirs["mistral"], root / "tiny-math-shepherd"
        ),
        "reasoneval": tiny_models.build_reasoneval(
            tokenizer_dirs["mistral"], root / "tiny-reasoneval"
        ),
        "token-classification": tiny_models.build_token_classifier(
            tokenizer_dirs["qwen"], root / "tiny-tokcls"
        ),
    }
    return {kind: load_prm(str(path), device="cpu", dtype="float32") for kind, path in dirs.items()}


def test_one_pass_equals_independent_per_prefix_forwards(qwen_prm):
    """Hidden state at separator t of the full pass == last separator of a pass over steps[:t]."""
    full = qwen_prm.score_steps(QUESTION, [STEPS])[0]
    assert (
        full.hidden.shape == (len(STEPS), qwen_prm.hidden_dim) and full.hidden.dtype == np.float32
    )
    tok, model = qwen_prm.tokenizer, qwen_prm.model
    sep = tok.convert_tokens_to_ids("<extra_0>")
    for t in range(1, len(STEPS) + 1):
        messages = [
            {"role": "system", "content": QWEN_PRM_SYSTEM},
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "<extra_0>".join(STEPS[:t]) + "<extra_0>"},
        ]
        ids = torch.tensor([tok.encode(tok.apply_chat_template(messages, tokenize=False))])
        with torch.no_grad():
            state = model.model(input_ids=ids).last_hidden_state[0]
            logits = model(ids)[0]
        last = int((ids[0] == sep).nonzero()[-1])
        np.testing.assert_allclose(full.hidden[t - 1], state[last].numpy(), atol=1e-4, rtol=0)
        np.testing.assert_allclose(
            full.scores[t - 1], logits[last].softmax(-1)[1].item(), atol=1e-5
        )
        # and through the public API, one prefix at a time
        alone = qwen_prm.score_steps(QUESTION, [STEPS[:t]])[0]
        np.testing.assert_allclose(alone.hidden[-1], full.hidden[t - 1], atol=1e-4, rtol=0)


def test_qwen_scores_match_the_reference_readout(qwen_prm):
    """The reference: whole-sequence logits, softmax, positive class at every <extra_0>."""
    tok, model = qwen_prm.tokenizer, qwen_prm.model
    messages = [
        {
            "role": "system",
            "content": "Please reason step by step, and put your final answer in \\boxed{}.",
        },
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "<extra_0>".join(STEPS) + "<extra_0>"},
    ]
    ids = tok.encode(
        tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False),
        return_tensors="pt",
    )
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=ids), dim=-1)
    mask = ids == tok.encode("<extra_0>")[0]
    expected = probs[0][mask[0]][:, 1].numpy()
    got = qwen_prm.score_steps(QUESTION, [STEPS])[0].scores
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_batching_with_padding_changes_nothing(qwen_prm):
    lists = [STEPS, STEPS[:1], STEPS[:3], ["a single different step"]]
    together = qwen_prm.score_steps(QUESTION, lists)
    for steps, out in zip(lists, together, strict=True):
        alone = qwen_prm.score_steps(QUESTION, [steps])[0]
        assert len(out.scores) == len(steps) and not out.truncated
        np.testing.assert_allclose(out.hidden, alone.hidden, atol=1e-5)
        np.testing.assert_allclose(out.scores, alone.scores, atol=1e-6)


def test_question_state_is_the_empty_prefix(qwen_prm):
    scores, hidden = qwen_prm.question_state([QUESTION, "Another question?"])
    assert scores.shape == (2,) and hidden.shape == (2, qwen_prm.hidden_dim)
    empty = qwen_prm.score_steps(QUESTION, [[]])[0]
    assert len(empty.scores) == 1
    np.testing.assert_allclose(hidden[0], empty.hidden[0], atol=1e-6)
    assert not np.allclose(hidden[0], hidden[1])


def test_truncation_is_visible(qwen_prm_dir, qwen_prm):
    full = qwen_prm.score_steps(QUESTION, [STEPS])[0]
    enc = qwen_prm.prepare(QUESTION, STEPS)
    cut = enc.positions[1] + 3  # room for two steps only
    short = load_prm(str(qwen_prm_dir), device="cpu", dtype="float32", max_tokens=cut)
    out = short.score_steps(QUESTION, [STEPS, STEPS[:1]])
    assert out[0].truncated and len(out[0].scores) == 2
    assert not out[1].truncated
    np.testing.assert_allclose(out[0].hidden, full.hidden[:2], atol=1e-5)


def test_shepherd_matches_reference(other_prms):
    prm = other_prms["math-shepherd"]
    tok, model = prm.tokenizer, prm.model
    answer = "\n\n".join(STEPS).replace("\n\n", " ки\n\n")
    answer = answer + " ки" if answer[-2:] != "\n\n" else answer
    ids = torch.tensor([tok.encode(f"{QUESTION} {answer}")])
    # the model card's encode("+ -")[1:] is [648, 387] ("▁+", "▁-") on the real vocabulary; the
    # wrapper reads "+"/"-" as they follow a word, which is that on every tokenizer version
    candidates = tok.encode("a + -", add_special_tokens=False)[-2:]
    tag = tok.encode("ки")[-1]
    with torch.no_grad():
        logits = model(ids).logits[:, :, candidates]
    expected = logits.softmax(-1)[:, :, 0][ids == tag].numpy()
    out = prm.score_steps(QUESTION, [STEPS])[0]
    assert len(expected) == len(STEPS)
    np.testing.assert_allclose(out.scores, expected, atol=1e-5)
    with torch.no_grad():
        states = model.model(input_ids=ids).last_hidden_state[0][ids[0] == tag]
    np.testing.assert_allclose(out.hidden, states.numpy(), atol=1e-4)


def test_reasoneval_matches_reference(other_prms):
    prm = other_prms["reasoneval"]
    tok, model = prm.tokenizer, prm.model
    sep = tok.pad_token
    assert sep == "<s>" == tok.bos_token
    raw = tok(REASONEVAL_PROMPT.format(input=QUESTION) + sep + sep.join(STEPS) + sep)["input_ids"]
    sep_id = tok(sep)["input_ids"][-1]
    labelled, kept, count = [], [], 0
    for idx, token in enumerate(raw):
        if token == sep_id:
            labelled.append(idx - 1 - count)
            count += 1
        else:
            kept.append(token)
    ids = torch.tensor([[1 if tok.bos_token_id is None else tok.bos_token_id, *kept]])
    labelled = labelled[2:]
    with torch.no_grad():
        scores = model(ids, torch.ones_like(ids))[0, labelled, :]
    expected = torch.softmax(scores, dim=-1)[:, 1:].sum(dim=-1).numpy()
    out = prm.score_steps(QUESTION, [STEPS])[0]
    np.testing.assert_allclose(out.scores, expected, atol=1e-5)
    assert out.hidden.shape == (len(STEPS), prm.hidden_dim)


def test_token_classification_head(other_prms):
    prm = other_prms["token-classification"]
    out = prm.score_steps(QUESTION, [STEPS])[0]
    enc = prm.prepare(QUESTION, STEPS)
    with torch.no_grad():
        logits = prm.model(input_ids=torch.tensor([enc.input_ids])).logits[0, enc.positions]
    np.testing.assert_allclose(out.scores, logits.softmax(-1)[:, 1].numpy(), atol=1e-5)


def test_registry_and_errors(qwen_prm_dir, other_prms, tmp_path):
    assert infer_kind(str(qwen_prm_dir)) == "qwen-prm"
    assert infer_kind("peiyi9979/math-shepherd-mistral-7b-prm") == "math-shepherd"
    assert infer_kind("GAIR/ReasonEval-7B") == "reasoneval"
    assert infer_kind("Qwen/Qwen2.5-Math-PRM-7B") == "qwen-prm"
    with pytest.raises(DataError, match="unknown PRM kind 'nope'"):
        load_prm(str(qwen_prm_dir), kind="nope")
    with pytest.raises(DataError, match="cannot tell which PRM"):
        infer_kind(str(tmp_path))
    with pytest.raises(DataError, match="step positions"):
        other_prms["math-shepherd"].score_steps("q", [["a step with ки inside"]])
