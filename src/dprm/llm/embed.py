"""Labelled prefixes -> calibration set, best-of-N pools -> BoN set (``dprm embed``).

**Calibration set.** Rows of a question are grouped into *chains*: the longest step lists, each
shorter prefix attached to a chain it is a prefix of (our labels: one chain per response;
Park's JSON: chains rebuilt by prefix matching). Each chain is scored in **one** forward pass;
a row with ``step = t`` takes the score and hidden state at the chain's t-th step position.
Rows with ``step = 0`` take the question-only state (one forward per question, empty prefix).
Forwards are batched by length with right padding.

**Truncation.** A chain longer than the PRM's ``max_tokens`` is cut; rows whose step lies
beyond the cut have no state and are left out. Both counts (``rows_truncated``,
``sequences_truncated``) go to ``meta.json`` ``stats`` and are printed by the CLI; nothing is
dropped silently. For BoN responses the score is the last scored step's, and the response is
flagged ``truncated``.

**Resume.** Work is cut into parts of ``questions_per_part`` questions; each part is a small set
directory written atomically; a rerun skips finished parts, and the shard output is joined
from the parts at the end (duplicate keys are rejected).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dprm.data.contract import write_bon_set, write_calibration_set
from dprm.io import DataError, read_json
from dprm.llm.prm import PRM, Encoded
from dprm.llm.prompts import split_steps
from dprm.llm.shard import (
    PartStore,
    Shard,
    check_finished,
    chunked,
    merge_sets,
    output_path,
    sum_stats,
)


@dataclass(frozen=True)
class EmbedConfig:
    """Embedding settings that do not change the PRM's numbers."""

    questions_per_part: int = 32
    hidden_dtype: str = "float16"  # "float16" | "float32"


def build_chains(step_lists: list[tuple[str, ...]]) -> tuple[list[tuple[str, ...]], list[int]]:
    """Group step lists into maximal chains.

    Args:
        step_lists: the steps of each row (same question).

    Returns:
        (chains, owner): ``owner[i]`` is the chain whose first ``len(step_lists[i])`` steps
        equal ``step_lists[i]``.
    """
    order = sorted(range(len(step_lists)), key=lambda i: (-len(step_lists[i]), i))
    chains: list[tuple[str, ...]] = []
    owner = [0] * len(step_lists)
    index: dict[tuple[str, ...], int] = {}
    for i in order:
        key = step_lists[i]
        if key in index:
            owner[i] = index[key]
            continue
        chains.append(key)
        for t in range(1, len(key) + 1):
            index.setdefault(key[:t], len(chains) - 1)
        owner[i] = len(chains) - 1
    return chains, owner


def _row_steps(labels: pd.DataFrame, path: str) -> list[tuple[str, ...]]:
    out = []
    for row, (step, prefix) in enumerate(
        zip(labels["step"], labels["reasoning_prefix"], strict=True)
    ):
        if step == 0:
            out.append(())
            continue
        steps = tuple(split_steps(prefix))
        if len(steps) != step:
            raise DataError(
                path,
                f"row {row}: reasoning_prefix splits into {len(steps)} steps on a blank line "
                f"but column 'step' says {step}",
            )
        out.append(steps)
    return out


def embed_label_part(
    labels: pd.DataFrame, prm: PRM, source: str = "labels"
) -> tuple[pd.DataFrame, np.ndarray, dict]:
    """PRM scores and hidden states for labelled prefixes (a few questions' rows).

    Args:
        labels: rows with the contract's label columns.
        prm: the PRM wrapper.
        source: name used in error messages.

    Returns:
        (records, hidden [rows, D] float32, stats); records are the input rows that got a state,
        in input order, with ``prm_score`` added.
    """
    labels = labels.reset_index(drop=True)
    steps = _row_steps(labels, source)
    questions = list(dict.fromkeys(labels["question_id"]))
    text_of = dict(zip(labels["question_id"], labels["question"], strict=False))
    encoded: list[Encoded] = []
    slot = np.full(len(labels), -1, dtype=np.int64)  # index into encoded
    offset = np.zeros(len(labels), dtype=np.int64)  # step index within that output
    for qid in questions:
        rows = np.flatnonzero((labels["question_id"] == qid).to_numpy())
        question = text_of[qid]
        shallow = [r for r in rows if not steps[r]]
        if shallow:  # the question-only state: one forward per question (empty prefix)
            slot[shallow] = len(encoded)
            encoded.append(prm.prepare(question, [""]))
        deep = [r for r in rows if steps[r]]
        chains, owner = build_chains([steps[r] for r in deep])
        base = len(encoded)
        encoded.extend(prm.prepare(question, list(chain)) for chain in chains)
        for r, c in zip(deep, owner, strict=True):
            slot[r], offset[r] = base + c, len(steps[r]) - 1
    outputs = prm.forward(encoded)
    keep = np.array(
        [offset[r] < len(outputs[slot[r]].scores) for r in range(len(labels))], dtype=bool
    )
    rows = np.flatnonzero(keep)
    hidden = np.zeros((len(rows), prm.hidden_dim), dtype=np.float32)
    scores = np.zeros(len(rows), dtype=np.float32)
    for j, r in enumerate(rows):
        out = outputs[slot[r]]
        hidden[j], scores[j] = out.hidden[offset[r]], out.scores[offset[r]]
    records = labels.iloc[rows].reset_index(drop=True)
    records.insert(records.columns.get_loc("step") + 1, "prm_score", np.clip(scores, 0.0, 1.0))
    stats = {
        "rows": int(len(rows)),
        "rows_truncated": int((~keep).sum()),
        "sequences": len(encoded),
        "sequences_truncated": int(sum(o.truncated for o in outputs)),
        "questions": len(questions),
    }
    return records, hidden, stats


def embed_bon_part(
    pool: pd.DataFrame, prm: PRM
) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame, dict]:
    """Question-only states and complete-response scores for a few questions of a BoN pool.

    Returns:
        (questions [Q] with prm_score, hidden [Q, D], responses with prm_score/correct/truncated,
        stats). A response's score is its last scored step's (the reference's readout).
    """
    pool = pool.reset_index(drop=True)
    firsts = pool.drop_duplicates("question_id")
    q_scores, q_hidden = prm.question_state(firsts["question"].tolist())
    encoded = [
        prm.prepare(q, split_steps(r))
        for q, r in zip(pool["question"], pool["response"], strict=True)
    ]
    outputs = prm.forward(encoded)
    empty = [i for i, o in enumerate(outputs) if len(o.scores) == 0]
    if empty:
        raise DataError(
            None, f"response row {empty[0]}: the question alone exceeds max_tokens={prm.max_tokens}"
        )
    questions = pd.DataFrame(
        {"question_id": firsts["question_id"].to_numpy(), "prm_score": q_scores.astype(np.float32)}
    )
    responses = pd.DataFrame(
        {
            "question_id": pool["question_id"].astype(str),
            "response_id": pool["response_id"].astype(np.int32),
            "prm_score": np.array([o.scores[-1] for o in outputs], dtype=np.float32).clip(0, 1),
            "correct": pool["correct"].astype(bool),
            "truncated": np.array([o.truncated for o in outputs], dtype=bool),
            "n_steps": np.array([e.n_steps for e in encoded], dtype=np.int32),
        }
    )
    stats = {
        "questions": len(questions),
        "responses": len(responses),
        "responses_truncated": int(responses["truncated"].sum()),
    }
    return questions, q_hidden.astype(np.float32), responses, stats


def run_embed(
    frame: pd.DataFrame,
    prm: PRM,
    out: str | Path,
    *,
    kind: str,
    shard: Shard = Shard(),
    config: EmbedConfig = EmbedConfig(),
    fingerprint: dict | None = None,
    provenance: dict | None = None,
    overwrite: bool = False,
    on_part_done: Callable[[int], None] | None = None,
    progress: bool = True,
) -> tuple[Path, bool]:
    """Embed labels (``kind="calibration"``) or a BoN pool (``kind="bon"``) for one shard.

    Args:
        frame: labels (contract label columns) or a pool (question_id, response_id, question,
            response, correct).
        prm: the PRM wrapper.
        out: ``--out`` directory; a shard writes to ``OUT.shards/shard-i-of-n``.
        kind: ``"calibration"`` or ``"bon"``.
        shard: which block of questions.
        config: parts and hidden dtype.
        fingerprint: input identity (file, size); the PRM and settings are added here.
        provenance: extra ``meta.json`` entries (the input's own provenance, versions).
        overwrite: replace an output made with other settings.
        on_part_done: called after each stored part (tests simulate kills with it).
        progress: tqdm bar.

    Returns:
        (output directory, True if it was already finished and skipped).
    """
    from tqdm.auto import tqdm

    if kind not in ("calibration", "bon"):
        raise ValueError(f"kind={kind!r}: expected 'calibration' or 'bon'")
    fingerprint = {
        **(fingerprint or {}),
        "stage": f"embed-{kind}",
        **prm.provenance(),
        "hidden_dtype": config.hidden_dtype,
        "questions_per_part": config.questions_per_part,
        "shard": str(shard),
    }
    final = output_path(out, shard)
    if check_finished(final, fingerprint, overwrite):
        return final, True
    questions = list(dict.fromkeys(frame["question_id"].astype(str)))
    selected = [questions[i] for i in shard.select(len(questions))]
    if not selected:
        raise DataError(
            final, f"shard {shard} holds none of the {len(questions)} questions; use fewer shards"
        )
    parts = chunked(selected, config.questions_per_part)
    store = PartStore(final, fingerprint, overwrite)
    qids = frame["question_id"].astype(str)
    for index, part in enumerate(tqdm(parts, desc=f"embed {kind}", disable=not progress)):
        path = store.path(index, "")
        if path.exists():
            continue
        rows = frame[qids.isin(set(part))]
        if kind == "calibration":
            records, hidden, stats = embed_label_part(rows, prm)
            write_calibration_set(
                path, records, hidden, {"stats": stats}, dtype=config.hidden_dtype
            )
        else:
            qframe, hidden, responses, stats = embed_bon_part(rows, prm)
            write_bon_set(
                path, qframe, hidden, responses, {"stats": stats}, dtype=config.hidden_dtype
            )
        if on_part_done is not None:
            on_part_done(index)
    part_dirs = [store.path(i, "") for i in range(len(parts))]
    stats = sum_stats(read_json(p / "meta.json").get("stats", {}) for p in part_dirs)
    meta: dict[str, Any] = {
        **(provenance or {}),
        **prm.provenance(),
        "stats": stats,
        "fingerprint": fingerprint,
        "shard": str(shard),
    }
    merge_sets(part_dirs, final, meta)
    store.cleanup()
    return final, False
