"""The frame every ``dprm solve`` run shares, whatever its mode (bon or beam).

:func:`open_run` loads the shard's questions and records (or checks, on resume) the run in
``OUT/run.json``; :func:`solving` holds the progress bar over the shard's questions and the
grading pool while the pending ones are solved.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from dprm.live.calibrated_prm import CalibratedPRM
from dprm.live.run import SolveConfig, load_run_questions, start_run


def open_run(
    out: Path, config: SolveConfig, cprm: CalibratedPRM, generator: Any
) -> tuple[pd.DataFrame, str, dict[str, Any]]:
    """Load this shard's questions and record (or check) the run in ``out``.

    Returns:
        (questions, the shard's file-name suffix, the run's provenance).
    """
    from dprm.llm.grading import grader_info

    questions, suffix = load_run_questions(config)
    provenance = {
        **cprm.provenance(),
        "generator_backend": getattr(generator, "backend", "?"),
        **grader_info(),
    }
    start_run(out, config, provenance)
    return questions, suffix, provenance


@contextmanager
def solving(
    total: int, pending: int, desc: str, config: SolveConfig, *, progress: bool, pool: Any = None
) -> Iterator[tuple[Any, Any]]:
    """A progress bar over the shard's questions and the grading pool of a run.

    Args:
        total: questions in the shard.
        pending: questions still to solve (the bar starts at ``total - pending``).
        desc: bar label.
        config: the run's settings (grading workers and timeout).
        progress: show the bar.
        pool: a grading pool to use; None: open one here and close it at the end.

    Yields:
        (bar, pool).
    """
    from tqdm.auto import tqdm

    from dprm.llm.grading import GradingPool

    bar = tqdm(total=total, initial=total - pending, desc=desc, disable=not progress)
    own = (
        GradingPool(workers=config.grade_workers, timeout=config.grade_timeout)
        if pool is None
        else None
    )
    try:
        yield bar, (pool if pool is not None else own)
    finally:
        if own is not None:
            own.close()
    bar.close()


def grade_texts(pool: Any, golds: list[str], texts: list[str]) -> list[tuple[bool, bool]]:
    """(correct, grading failed) per text: a grader timeout or error grades False, and the
    flag keeps that apart from a wrong answer (the summaries count them, ``grading_totals``)."""
    import numpy as np

    if not texts:
        return []
    result = pool.grade(golds, texts)
    failed = np.asarray(result.timed_out, dtype=bool) | np.asarray(result.error, dtype=bool)
    return [(bool(c), bool(f)) for c, f in zip(result.correct, failed, strict=True)]
