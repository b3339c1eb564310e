"""The packaged arithmetic question sets: which split draws what, and how they are written.

``arith-train`` (calibration) and ``arith-id`` share a distribution (2-3 operations, ``+`` /
``-``, one-digit operands); ``arith-ood`` is harder (3-4 operations on two-digit operands, so
carries and borrows), the way AIME stands to MATH-500. ``tools/make_arith_sets.py`` writes them; the seed is :data:`SEED`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from dprm.io import atomic_path
from dprm.llm.tasks.arith import SPLIT_OFFSETS, SPLIT_SPECS, make_set

SEED = 20261127
SET_SIZES = {"train": 300, "id": 200, "ood": 200}


def set_rows(split: str) -> list[dict]:
    """The rows of packaged split ``split`` (``train``, ``id``, ``ood``)."""
    return make_set(
        SPLIT_SPECS[split], SET_SIZES[split], SEED + SPLIT_OFFSETS[split], f"arith-{split}"
    )


def set_bytes(split: str) -> bytes:
    """The gzip'd JSONL of a packaged split, byte for byte (mtime 0)."""
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in set_rows(split))
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def write_sets(folder: Path) -> list[Path]:
    """Write ``arith-{train,id,ood}.jsonl.gz`` into ``folder`` atomically; return the paths."""
    paths = []
    for split in SET_SIZES:
        path = Path(folder) / f"arith-{split}.jsonl.gz"
        with atomic_path(path) as tmp:
            Path(tmp).write_bytes(set_bytes(split))
        paths.append(path)
    return paths
