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

**Unscorable responses.** A trajectory the PRM cannot score at all (no step tag found where
the steps are, the question alone over ``max_tokens``, an empty BoN response; see
:data:`dprm.llm.prm_interface.UNSCORABLE_REASONS`) is left out with its reason: each part records
it in ``meta.json`` ``unscorable`` (question, response, reason), ``stats`` counts it
(``rows_unscorable`` / ``responses_unscorable`` and ``unscorable_<reason>``), the CLI prints
the counts, and every other row of the part is written. ``strict=True`` (``--strict``) stops
at the first one instead, naming the response.

**Park et al.'s adapters.** With an adapter attached to the PRM (``dprm embed --adapter``,
:mod:`dprm.llm.park_adapter`), calibration records get ``park_q10``, ``park_q50`` and
``park_q90`` (its quantiles at tau = 0.1 / 0.5 / 0.9) right after ``prm_score``; the raw score
and the hidden state stay the base PRM's, so every other calibrator sees the same inputs.

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
from dprm.llm.answers import canonical_answer
from dprm.llm.park_adapter import PARK_COLUMNS
from dprm.llm.prm_interface import PRM, Encoded, UnscorableError
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
    strict: bool = False  # fail on the first unscorable response instead of counting it


class _Unscorable:
    """Collects the trajectories a part could not score (or raises at once when strict)."""

    def __init__(self, strict: bool):
        self.strict = strict
        self.entries: list[dict] = []

    def prepare(self, prm: PRM, question: str, steps: list[str], **where: Any) -> Encoded | None:
        """``prm.prepare``, or None (recorded) when the trajectory cannot be scored."""
        try:
            return prm.prepare(question, steps)
        except UnscorableError as err:
            self.add(err.reason, str(err), **where)
            return None

    def add(self, reason: str, detail: str, **where: Any) -> None:
        entry = {**{k: _plain(v) for k, v in where.items()}, "reason": reason, "detail": detail}
        if self.strict:
            named = ", ".join(f"{k}={v!r}" for k, v in entry.items() if k not in ("detail",))
            raise DataError(None, f"cannot score {named}: {detail} (drop --strict to skip it)")
        self.entries.append(entry)

    def stats(self, unit: str, count: int) -> dict:
        counts: dict[str, int] = {f"{unit}_unscorable": int(count)}
        for entry in self.entries:
            key = f"unscorable_{entry['reason']}"
            counts[key] = counts.get(key, 0) + 1
        return counts


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


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
    labels: pd.DataFrame, prm: PRM, source: str = "labels", strict: bool = False
) -> tuple[pd.DataFrame, np.ndarray, dict, list[dict]]:
    """PRM scores and hidden states for labelled prefixes (a few questions' rows).

    Args:
        labels: rows with the contract's label columns.
        prm: the PRM wrapper.
        source: name used in error messages.
        strict: raise on the first trajectory that cannot be scored instead of recording it.

    Returns:
        (records, hidden [rows, D] float32, stats, unscorable); records are the input rows that
        got a state, in input order, with ``prm_score`` added; ``unscorable`` lists the
        trajectories left out (question_id, response_ids, reason).
    """
    labels = labels.reset_index(drop=True)
    steps = _row_steps(labels, source)
    questions = list(dict.fromkeys(labels["question_id"]))
    text_of = dict(zip(labels["question_id"], labels["question"], strict=False))
    encoded: list[Encoded] = []
    slot = np.full(len(labels), -1, dtype=np.int64)  # index into encoded (-1: unscorable)
    offset = np.zeros(len(labels), dtype=np.int64)  # step index within that output
    bad = _Unscorable(strict)
    response_ids = labels["response_id"].to_numpy()

    def add(question: str, chain: list[str], rows: list[int], qid: str) -> None:
        enc = bad.prepare(prm, question, chain, question_id=qid,
                          response_ids=sorted({int(response_ids[r]) for r in rows}))  # fmt: skip
        if enc is not None:
            slot[rows] = len(encoded)
            encoded.append(enc)

    for qid in questions:
        rows = np.flatnonzero((labels["question_id"] == qid).to_numpy())
        question = text_of[qid]
        shallow = [r for r in rows if not steps[r]]
        if shallow:  # the question-only state: one forward per question (empty prefix)
            add(question, [""], shallow, qid)
        deep = [r for r in rows if steps[r]]
        chains, owner = build_chains([steps[r] for r in deep])
        for c, chain in enumerate(chains):
            add(question, list(chain), [r for r, o in zip(deep, owner, strict=True) if o == c], qid)
        for r in deep:
            offset[r] = len(steps[r]) - 1
    outputs = prm.forward(encoded)
    scorable = slot >= 0
    keep = np.array(
        [scorable[r] and offset[r] < len(outputs[slot[r]].scores) for r in range(len(labels))],
        dtype=bool,
    )
    rows = np.flatnonzero(keep)
    hidden = np.zeros((len(rows), prm.hidden_dim), dtype=np.float32)
    scores = np.zeros(len(rows), dtype=np.float32)
    park = np.zeros((len(rows), len(PARK_COLUMNS)), dtype=np.float32)
    for j, r in enumerate(rows):
        out = outputs[slot[r]]
        hidden[j], scores[j] = out.hidden[offset[r]], out.scores[offset[r]]
        if out.quantiles is not None:
            park[j] = out.quantiles[offset[r]]
    records = labels.iloc[rows].reset_index(drop=True)
    at = records.columns.get_loc("step") + 1
    records.insert(at, "prm_score", np.clip(scores, 0.0, 1.0))
    if prm.adapter is not None:  # Park et al.'s calibrated quantiles next to the raw score
        for k, column in enumerate(PARK_COLUMNS):
            records.insert(at + 1 + k, column, park[:, k])
    stats = {
        "rows": int(len(rows)),
        "rows_truncated": int((~keep & scorable).sum()),
        "sequences": len(encoded),
        "sequences_truncated": int(sum(o.truncated for o in outputs)),
        "questions": len(questions),
        **bad.stats("rows", int((~scorable).sum())),
    }
    return records, hidden, stats, bad.entries


def embed_bon_part(
    pool: pd.DataFrame, prm: PRM, strict: bool = False
) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame, dict, list[dict]]:
    """Question-only states and complete-response scores for a few questions of a BoN pool.

    Args:
        pool: rows question_id, response_id, question, response, correct.
        prm: the PRM wrapper.
        strict: raise on the first response that cannot be scored instead of recording it.

    Returns:
        (questions [Q] with prm_score, hidden [Q, D], responses with prm_score/correct/truncated/
        answer/step_scores, response hidden [R, D] (the complete trajectory's state at its last
        scored step; contract v2), stats, unscorable). A response's score is its last scored step's (the reference's
        readout). Unscorable responses (and every response of a question whose question-only
        input cannot be scored) are left out and listed in ``unscorable``.
    """
    pool = pool.reset_index(drop=True)
    bad = _Unscorable(strict)
    firsts = pool.drop_duplicates("question_id")
    q_encoded = {
        qid: bad.prepare(prm, q, [""], question_id=qid, response_id=None)
        for qid, q in zip(firsts["question_id"], firsts["question"], strict=True)
    }
    good_q = [qid for qid, e in q_encoded.items() if e is not None]
    q_outs = prm.forward([q_encoded[qid] for qid in good_q])
    q_outputs = {}
    for qid, out in zip(good_q, q_outs, strict=True):
        if len(out.scores) == 0:
            bad.add("over_long", f"question alone exceeds max_tokens={prm.max_tokens}",
                    question_id=qid, response_id=None)  # fmt: skip
        else:
            q_outputs[qid] = out
    encoded: list[Encoded] = []
    kept_rows: list[int] = []
    for row, (qid, rid, q, r) in enumerate(
        zip(
            pool["question_id"],
            pool["response_id"],
            pool["question"],
            pool["response"],
            strict=True,
        )
    ):
        if qid not in q_outputs:
            continue
        if not str(r).strip():
            bad.add("empty", "the response is empty", question_id=qid, response_id=rid)
            continue
        enc = bad.prepare(prm, q, split_steps(r), question_id=qid, response_id=rid)
        if enc is not None:
            encoded.append(enc)
            kept_rows.append(row)
    outputs = prm.forward(encoded)
    scored = []
    for row, out in zip(kept_rows, outputs, strict=True):
        if len(out.scores) == 0:
            bad.add("over_long", f"no step readout within max_tokens={prm.max_tokens}",
                    question_id=pool["question_id"][row], response_id=pool["response_id"][row])  # fmt: skip
        else:
            scored.append(row)
    by_row = dict(zip(kept_rows, zip(encoded, outputs, strict=True), strict=True))
    qids = [qid for qid in firsts["question_id"] if qid in q_outputs]
    questions = pd.DataFrame(
        {
            "question_id": np.array(qids, dtype=object),
            "prm_score": np.array([q_outputs[q].scores[0] for q in qids], dtype=np.float32),
        }
    )
    dim = prm.hidden_dim
    q_hidden = np.stack([q_outputs[q].hidden[0] for q in qids]) if qids else np.zeros((0, dim))
    kept = pool.iloc[scored]
    # BoN contract v2: the canonical final answer each candidate states (its own text: a
    # pool's ``answer`` column is the question's gold answer, the same for every candidate) and
    # the states / step scores of the complete trajectory (its last scored step)
    answers = [canonical_answer(str(t)) for t in kept["response"]]
    r_hidden = (
        np.stack([by_row[r][1].hidden[-1] for r in scored]).astype(np.float32)
        if scored
        else np.zeros((0, dim), np.float32)
    )
    responses = pd.DataFrame(
        {
            "question_id": kept["question_id"].astype(str).to_numpy(),
            "response_id": kept["response_id"].astype(np.int32).to_numpy(),
            "prm_score": np.array([by_row[r][1].scores[-1] for r in scored], dtype=np.float32).clip(
                0, 1
            ),
            "correct": kept["correct"].astype(bool).to_numpy(),
            "truncated": np.array([by_row[r][1].truncated for r in scored], dtype=bool),
            "n_steps": np.array([by_row[r][0].n_steps for r in scored], dtype=np.int32),
            "answer": np.array(answers, dtype=object),
            "step_scores": [
                np.clip(np.asarray(by_row[r][1].scores, np.float32), 0, 1) for r in scored
            ],
        }
    )
    stats = {
        "questions": len(questions),
        "responses": len(responses),
        "responses_truncated": int(responses["truncated"].sum()),
        **bad.stats("responses", len(pool) - len(responses)),
    }
    return questions, q_hidden.astype(np.float32), responses, r_hidden, stats, bad.entries


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
    placement = ("prm_device_map",)  # where the layers sit does not change the numbers
    fingerprint = {
        **(fingerprint or {}),
        "stage": f"embed-{kind}",
        **{k: v for k, v in prm.provenance().items() if k not in placement},
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
            records, hidden, stats, unscorable = embed_label_part(rows, prm, strict=config.strict)
            part_meta = {"stats": stats, "unscorable": unscorable}
            write_calibration_set(path, records, hidden, part_meta, dtype=config.hidden_dtype)
        else:
            qframe, hidden, responses, r_hidden, stats, unscorable = embed_bon_part(
                rows, prm, strict=config.strict
            )
            part_meta = {"stats": stats, "unscorable": unscorable}
            write_bon_set(
                path,
                qframe,
                hidden,
                responses,
                part_meta,
                dtype=config.hidden_dtype,
                response_hidden=r_hidden,
            )
        if on_part_done is not None:
            on_part_done(index)
    part_dirs = [store.path(i, "") for i in range(len(parts))]
    part_metas = [read_json(p / "meta.json") for p in part_dirs]
    stats = sum_stats(m.get("stats", {}) for m in part_metas)
    meta: dict[str, Any] = {
        **(provenance or {}),
        **prm.provenance(),
        "stats": stats,
        "unscorable": [entry for m in part_metas for entry in m.get("unscorable", [])],
        "fingerprint": fingerprint,
        "shard": str(shard),
    }
    merge_sets(part_dirs, final, meta)
    store.cleanup()
    return final, False
