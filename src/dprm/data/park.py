"""Import Park et al.'s public calibration JSON as labelled text prefixes.

The dataset ``young-j-park/prm_calibration`` ships one file per (dataset, policy): a JSON list
(or JSON lines) of records ``{"question", "reasoning_prefix", "success_prob"}`` where
``success_prob`` is a Monte Carlo estimate over ``n_rollouts`` (8) continuations, so a multiple
of 1/8. There is no question id, response id or step index; this module recovers them and
writes the rows in the contract's ``LABEL_COLUMNS`` (docs/design.md §2) with
:func:`dprm.data.contract.write_labels`, ready for ``embed``.

Derived columns:

* ``question_id`` = ``"q" + sha1(question, UTF-8)[:12]``: deterministic, so the same question
  gets the same id in every file (and in every policy's file).
* ``reasoning_prefix``: the prefix with one trailing ``"\\n\\n"`` stripped (Park's training
  and the public data strip it; keeping it would add an empty step when scoring).
* ``step`` = number of ``"\\n\\n"``-separated segments of that prefix; the empty prefix
  (question only) is step 0.
* ``n_rollouts`` from the caller (default 8); ``n_correct = round(success_prob * n_rollouts)``.

Response recovery. In Park's pipeline each first-pass response contributes the prefixes made of
its first k segments, k = 0, 1, ..., so the prefixes of one response form a *chain*: every
longer prefix extends the shorter ones segment by segment, and the empty prefix appears once per
response. Responses that begin with the same steps share identical prefix texts, and a response
whose prefixes are all contained in a longer one leaves no trace of its own but duplicates. Per
question, the algorithm therefore peels chains off in rounds:

1. Take the records not yet assigned, in file order. Their distinct prefixes (as tuples of
   segments) whose tuple is not a proper prefix of another distinct prefix are the *leaves*;
   each leaf opens a new response, numbered in order of the leaf's first appearance.
2. Walk the unassigned records in file order and give each to the first response of this round
   whose leaf extends the record's prefix and that has no record at that step yet.
3. Records left over (duplicates beyond what this round's chains can hold) go to the next round,
   whose leaves open further responses (ids continue from the previous round).

Every round assigns at least the first occurrence of each leaf, so the loop ends; the result
depends only on the order of the records, and it reproduces the true partition up to the
interchange of records whose prefix texts are identical (which no algorithm can tell apart).
Response ids count from 0 within each question. Output rows are sorted by question (in order of
first appearance), response id and step.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from dprm.data.contract import LABEL_COLUMNS, write_labels
from dprm.io import DataError
from dprm.textfiles import TextError, decode_utf8, parse_json

#: Park et al. split responses into steps on blank lines.
STEP_SEPARATOR = "\n\n"
#: Fields every record must have.
PARK_FIELDS = ("question", "reasoning_prefix", "success_prob")
#: Tolerance on success_prob being a multiple of 1/n_rollouts.
MULTIPLE_TOL = 1e-6


def question_id(question: str) -> str:
    """Deterministic id of a question text: ``"q" + sha1(question)[:12]``."""
    return "q" + hashlib.sha1(question.encode("utf-8")).hexdigest()[:12]


def normalise_prefix(prefix: str) -> str:
    """Strip one trailing ``"\\n\\n"`` (the separator rollouts were started from)."""
    return prefix[: -len(STEP_SEPARATOR)] if prefix.endswith(STEP_SEPARATOR) else prefix


def split_steps(prefix: str) -> tuple[str, ...]:
    """The reasoning segments of a prefix; the empty prefix has none (step 0)."""
    prefix = normalise_prefix(prefix)
    return () if prefix == "" else tuple(prefix.split(STEP_SEPARATOR))


def read_park_json(path: str | os.PathLike) -> list[Any]:
    """Read a JSON list or a JSON-lines file of records (not yet validated).

    Raises:
        DataError: the file is missing, empty, or not valid JSON / JSON lines.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "file not found (expected Park et al.'s calibration JSON or JSONL)")
    try:
        text = decode_utf8(path.read_bytes())
    except TextError as err:
        raise DataError(path, str(err)) from None
    stripped = text.lstrip()
    if not stripped:
        raise DataError(path, "empty file (expected a JSON list or JSON lines of records)")
    if stripped.startswith("["):
        try:
            data = parse_json(text)
        except TextError as err:
            raise DataError(path, str(err)) from None
        return list(data)
    records = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(parse_json(line))
        except TextError as err:
            raise DataError(path, f"line {lineno} (record {len(records)}): {err}") from None
    return records


def _validate(
    record: Any, index: int, n_rollouts: int, path: Path | None
) -> tuple[str, str, float]:
    """Check one record; return (question, reasoning_prefix, success_prob)."""
    where = f"record {index}"
    if not isinstance(record, dict):
        raise DataError(
            path,
            f"{where}: expected a JSON object with fields {list(PARK_FIELDS)}, "
            f"found {type(record).__name__}",
        )
    missing = [f for f in PARK_FIELDS if f not in record]
    if missing:
        raise DataError(
            path, f"{where}: missing field(s) {missing}; expected fields {list(PARK_FIELDS)}"
        )
    for name in ("question", "reasoning_prefix"):
        if not isinstance(record[name], str):
            raise DataError(
                path, f"{where}: field '{name}': expected a string, found {record[name]!r}"
            )
    prob = record["success_prob"]
    if isinstance(prob, bool) or not isinstance(prob, int | float) or not math.isfinite(prob):
        raise DataError(
            path, f"{where}: field 'success_prob': expected a finite number, found {prob!r}"
        )
    if not 0.0 <= prob <= 1.0:
        raise DataError(
            path, f"{where}: field 'success_prob': expected a value in [0, 1], found {prob!r}"
        )
    k = prob * n_rollouts
    if abs(k - round(k)) > MULTIPLE_TOL * n_rollouts:
        raise DataError(
            path,
            f"{where}: field 'success_prob': expected a multiple of 1/{n_rollouts} "
            f"(n_correct/n_rollouts with n_rollouts={n_rollouts}), found {prob!r}",
        )
    return record["question"], record["reasoning_prefix"], float(prob)


def assign_responses(prefixes: list[tuple[str, ...]]) -> list[int]:
    """Response id of each record of one question, from its prefix (a tuple of segments).

    ``prefixes`` are in file order. See the module docstring for the algorithm.
    """
    response = [-1] * len(prefixes)
    remaining = list(range(len(prefixes)))
    next_id = 0
    while remaining:
        distinct = list(dict.fromkeys(prefixes[i] for i in remaining))
        proper = {p[:k] for p in distinct for k in range(len(p))}
        leaves = [p for p in distinct if p not in proper]
        taken: list[set[int]] = [set() for _ in leaves]
        left_over = []
        for i in remaining:
            prefix, step = prefixes[i], len(prefixes[i])
            for chain, leaf in enumerate(leaves):
                if step not in taken[chain] and leaf[:step] == prefix:
                    taken[chain].add(step)
                    response[i] = next_id + chain
                    break
            else:
                left_over.append(i)
        next_id += len(leaves)
        remaining = left_over
    return response


def park_to_labels(
    records: list[Any], n_rollouts: int = 8, *, source: str | os.PathLike | None = None
) -> pd.DataFrame:
    """Validate Park records and recover ``question_id``, ``response_id`` and ``step``.

    Args:
        records: the parsed JSON records, in file order.
        n_rollouts: Monte Carlo rollouts behind each ``success_prob`` (8 in Park et al.).
        source: the file the records came from, named in error messages.

    Returns:
        A DataFrame with the columns of ``LABEL_COLUMNS`` in that order.

    Raises:
        DataError: naming the record index and the field for any bad record.
    """
    path = None if source is None else Path(source)
    if isinstance(n_rollouts, bool) or not isinstance(n_rollouts, int) or n_rollouts < 1:
        raise ValueError(f"n_rollouts must be a positive integer, got {n_rollouts!r}")
    if not records:
        raise DataError(path, "no records (expected a non-empty list of records)")
    by_question: dict[str, list[int]] = {}
    texts: dict[str, str] = {}
    rows = []
    for index, record in enumerate(records):
        question, prefix, prob = _validate(record, index, n_rollouts, path)
        qid = question_id(question)
        if texts.setdefault(qid, question) != question:  # a 48-bit hash collision
            raise DataError(
                path, f"record {index}: question id {qid} collides with another question"
            )
        by_question.setdefault(qid, []).append(index)
        rows.append((qid, question, normalise_prefix(prefix), split_steps(prefix), prob))
    response = [0] * len(rows)
    for indices in by_question.values():
        for index, rid in zip(
            indices, assign_responses([rows[i][3] for i in indices]), strict=True
        ):
            response[index] = rid
    order = {qid: n for n, qid in enumerate(by_question)}
    df = pd.DataFrame(
        {
            "question_id": [r[0] for r in rows],
            "response_id": response,
            "step": [len(r[3]) for r in rows],
            "question": [r[1] for r in rows],
            "reasoning_prefix": [r[2] for r in rows],
            "n_correct": [round(r[4] * n_rollouts) for r in rows],
            "n_rollouts": [n_rollouts] * len(rows),
            "success_prob": [r[4] for r in rows],
        },
        columns=list(LABEL_COLUMNS),
    )
    df["_q"] = df["question_id"].map(order)
    df = df.sort_values(["_q", "response_id", "step"], kind="stable").drop(columns="_q")
    return df.reset_index(drop=True)


def import_park(
    json_path: str | os.PathLike, out: str | os.PathLike, n_rollouts: int = 8
) -> pd.DataFrame:
    """Read Park et al.'s JSON/JSONL, recover ids and steps, and write ``labels.parquet``.

    Args:
        json_path: the JSON list or JSON-lines file.
        out: the parquet file to write (atomically); an existing directory gets
            ``labels.parquet`` inside it.
        n_rollouts: rollouts per label (8 in Park et al.).

    Returns:
        The labels as written.
    """
    out = Path(out)
    if out.is_dir():
        out = out / "labels.parquet"
    labels = park_to_labels(read_park_json(json_path), n_rollouts, source=json_path)
    write_labels(out, labels)
    return labels
