"""The packaged arithmetic question sets: which split draws what, and how they are written.

``arith-train`` (calibration) and ``arith-id`` share a distribution (2-4 operations, ``+`` /
``-``, per question one-digit or two-digit operands, so easy and hard questions mix);
``arith-ood`` is harder (5-6 operations on two-digit operands: longer chains, bigger running
values), the way AIME stands to MATH-500. ``arith-id2`` and ``arith-ood2`` are second draws of
the ID and OOD distributions: fresh questions for results that must not reuse the first draws'
(the adaptive-peers page's pre-registered report draws). The splits share no question: each
split skips the questions of the splits drawn before it (train, ID, OOD, ID2, then OOD2).
``tools/make_arith_sets.py`` writes them; the seed is :data:`SEED`.
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
from pathlib import Path

from dprm.io import atomic_path
from dprm.llm.tasks.arith import SPLIT_OFFSETS, SPLIT_SPECS, make_set

SEED = 20261127
SET_SIZES = {"train": 400, "id": 400, "ood": 200, "id2": 300, "ood2": 300}


@functools.cache
def _split_rows(split: str) -> tuple[dict, ...]:
    earlier = list(SET_SIZES)[: list(SET_SIZES).index(split)]
    exclude = frozenset(row["question"] for name in earlier for row in _split_rows(name))
    rows = make_set(
        SPLIT_SPECS[split], SET_SIZES[split], SEED + SPLIT_OFFSETS[split], f"arith-{split}",
        exclude=exclude,
    )  # fmt: skip
    return tuple(rows)


def set_rows(split: str) -> list[dict]:
    """The rows of packaged split ``split`` (a key of :data:`SET_SIZES`), fresh copies."""
    return copy.deepcopy(list(_split_rows(split)))


def packaged_questions() -> frozenset[str]:
    """Every packaged question's text (all splits): what training streams must skip."""
    return frozenset(row["question"] for split in SET_SIZES for row in _split_rows(split))


def set_bytes(split: str) -> bytes:
    """The gzip'd JSONL of a packaged split, byte for byte (mtime 0)."""
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in set_rows(split))
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def write_sets(folder: Path) -> list[Path]:
    """Write ``arith-{split}.jsonl.gz`` of every split into ``folder`` atomically; return the
    paths."""
    paths = []
    for split in SET_SIZES:
        path = Path(folder) / f"arith-{split}.jsonl.gz"
        with atomic_path(path) as tmp:
            Path(tmp).write_bytes(set_bytes(split))
        paths.append(path)
    return paths
