"""Answer grading with math-verify in worker processes, with a hard per-item timeout.

math-verify's own timeouts use ``signal.alarm``, which works only in the main thread, so the
grader turns them off (``parsing_timeout=None``, ``timeout_seconds=None``) and enforces its own:
each item goes to a worker process; a worker that has not answered within ``timeout`` seconds is
killed (SIGKILL, the worker only) and replaced, and its item is graded False and counted as a
timeout. A worker that crashes is replaced the same way (counted as an error). The calling
process never blocks longer than the timeout on one item and never receives a signal, so the
pool works from any thread.

The gold answer is parsed first and passed first to ``verify`` (it is asymmetric). A gold
answer without LaTeX delimiters is wrapped as ``$...$``; a prediction is parsed as written
(boxed answers have priority), as math-verify expects.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from multiprocessing.connection import wait

import numpy as np

GRADER_NAME = "math-verify"
DEFAULT_GRADER = "dprm.llm.grading:verify_answer"
#: seconds one graded item may take when no timeout is given (``--grader-timeout``, ``[grading]``)
DEFAULT_TIMEOUT_S = 5.0


def timeout_fingerprint(timeout: float) -> dict:
    """The grader timeout's part of a grading stage's fingerprint.

    An item that times out is graded wrong, so a longer timeout can turn answers right: the
    timeout changes the output and a rerun with another one is not finished. The default is
    left out, so outputs made before the timeout was recorded keep their fingerprints.
    """
    return {} if float(timeout) == DEFAULT_TIMEOUT_S else {"grader_timeout_s": float(timeout)}


def require_grader(grader: str = DEFAULT_GRADER) -> None:
    """Fail fast (one line) when the default grader's package is missing.

    The worker turns any grader exception into a wrong answer, so without math-verify every
    answer would grade False and a run would finish with accuracy 0 and mislabelled data.

    Raises:
        ConfigError: ``grader`` is the default and ``math_verify`` cannot be imported.
    """
    import importlib.util

    from dprm.config import ConfigError

    if grader == DEFAULT_GRADER and importlib.util.find_spec("math_verify") is None:
        raise ConfigError(
            "grading needs math-verify, which is not installed in this environment (pip "
            "install 'math-verify>=0.8', or dprm's [llm] extra); without it every answer "
            "would grade as wrong"
        )


def grader_info() -> dict:
    """Name and version of the grader, for provenance."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return {"grader": GRADER_NAME, "grader_version": version("math-verify")}
    except PackageNotFoundError:
        return {"grader": GRADER_NAME, "grader_version": None}


_DELIMITED_RE = re.compile(r"(?<!\\)\$|\\boxed|\\\[|\\\(")


def _wrap_gold(gold: str) -> str:
    gold = gold.strip()
    if _DELIMITED_RE.search(gold):
        return gold
    return f"${gold}$"


@lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple:
    from math_verify import parse

    return tuple(parse(_wrap_gold(gold), parsing_timeout=None))


def verify_answer(gold: str, prediction: str) -> bool:
    """math-verify in the current process, no timeout: True if ``prediction`` matches ``gold``.

    Use :class:`GradingPool` (or :func:`grade_many`) for untrusted inputs: this call can hang.
    """
    from math_verify import parse, verify

    gold_parsed = list(_parse_gold(gold))
    if not gold_parsed:
        return False
    pred_parsed = parse(prediction, parsing_timeout=None)
    if not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def _resolve(spec: str) -> Callable[[str, str], bool]:
    module_name, _, attr = spec.partition(":")
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def _worker_main(spec: str) -> None:
    """Worker loop: one JSON request per stdin line, one JSON answer per protocol line."""
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything the grader prints goes to stderr, never into the protocol
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    grade_fn = _resolve(spec)
    if spec == DEFAULT_GRADER:
        with contextlib.suppress(Exception):
            grade_fn("1", "$1$")  # import sympy/antlr before the clock starts
    protocol.write('["ready"]\n')
    protocol.flush()
    for line in sys.stdin:
        index, gold, prediction = json.loads(line)
        try:
            ok, error = bool(grade_fn(gold, prediction)), False
        except Exception:  # noqa: BLE001 - any grader failure grades the item False
            ok, error = False, True
        protocol.write(json.dumps([index, ok, error]) + "\n")
        protocol.flush()


@dataclass
class GradeResult:
    """Outcome of grading a batch: ``correct``, ``timed_out`` and ``error`` are bool arrays [N]."""

    correct: np.ndarray
    timed_out: np.ndarray
    error: np.ndarray
    seconds: float = 0.0

    @property
    def n_timeouts(self) -> int:
        return int(self.timed_out.sum())


@dataclass
class _Worker:
    process: subprocess.Popen
    ready: bool = False
    started: float = field(default_factory=time.monotonic)
    item: int | None = None
    deadline: float = 0.0

    def fileno(self) -> int:
        return self.process.stdout.fileno()  # type: ignore[union-attr]


class GradingPool:
    """A pool of grading worker processes with a hard per-item timeout.

    Workers are fresh interpreters (``python -c ...``) talking JSON lines over pipes, so the
    pool works from any thread, in notebooks and in unguarded scripts (no re-import of
    ``__main__``), and killing a worker never touches the caller.

    Args:
        workers: number of worker processes.
        timeout: seconds one item may take before its worker is killed (item graded False).
        grader: ``"module:function"`` taking ``(gold, prediction)`` and returning a bool;
            math-verify (:func:`verify_answer`) by default.
        start_timeout: seconds a new worker may take to start (imports) before the pool fails.

    Use as a context manager, or call :meth:`close`. Reuse one pool for many batches.
    """

    def __init__(
        self,
        workers: int = 2,
        timeout: float = DEFAULT_TIMEOUT_S,
        grader: str = DEFAULT_GRADER,
        start_timeout: float = 120.0,
    ):
        if workers < 1 or timeout <= 0:
            raise ValueError(f"workers={workers}, timeout={timeout}: expected >= 1 and > 0")
        self.n_workers, self.timeout, self.grader = int(workers), float(timeout), grader
        self.start_timeout = float(start_timeout)
        self._workers: list[_Worker] = []
        self.total_timeouts = 0
        self.total_errors = 0
        self.total_items = 0

    def __enter__(self) -> GradingPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _spawn(self) -> _Worker:
        code = f"from dprm.llm.grading import _worker_main; _worker_main({self.grader!r})"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        process = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        worker = _Worker(process)
        self._workers.append(worker)
        return worker

    def _retire(self, worker: _Worker) -> None:
        if worker.process.poll() is None:
            worker.process.kill()
        worker.process.wait(timeout=10)
        for stream in (worker.process.stdin, worker.process.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        self._workers.remove(worker)

    def _send(self, worker: _Worker, index: int, gold: str, prediction: str) -> None:
        worker.process.stdin.write(json.dumps([index, gold, prediction]) + "\n")  # type: ignore[union-attr]
        worker.process.stdin.flush()  # type: ignore[union-attr]
        worker.item, worker.deadline = index, time.monotonic() + self.timeout

    def grade(self, golds: Sequence[str], predictions: Sequence[str]) -> GradeResult:
        """Grade ``predictions[i]`` against ``golds[i]``; at most ``timeout`` seconds per item."""
        if len(golds) != len(predictions):
            raise ValueError(f"{len(golds)} gold answers but {len(predictions)} predictions")
        n = len(golds)
        if n:
            require_grader(self.grader)  # else every item would grade False, silently
        correct, timed_out, error = (np.zeros(n, dtype=bool) for _ in range(3))
        t0 = time.monotonic()
        pending = deque(range(n))
        remaining = n
        while len(self._workers) < min(self.n_workers, n):
            self._spawn()
        while remaining:
            for worker in list(self._workers):
                if worker.ready and worker.item is None and pending:
                    index = pending.popleft()
                    try:
                        self._send(worker, index, str(golds[index]), str(predictions[index]))
                    except (BrokenPipeError, OSError):
                        pending.appendleft(index)
                        self._retire(worker)
                        self._spawn()
            now = time.monotonic()
            deadlines = [w.deadline for w in self._workers if w.item is not None]
            deadlines += [w.started + self.start_timeout for w in self._workers if not w.ready]
            wait_for = max(0.0, min(deadlines) - now) if deadlines else 0.1
            for worker in wait(list(self._workers), timeout=wait_for):
                line = worker.process.stdout.readline()  # type: ignore[union-attr]
                if not line:  # the worker died
                    if not worker.ready:
                        self._retire(worker)
                        raise RuntimeError(
                            f"a grading worker ({self.grader}) exited while starting"
                        )
                    if worker.item is not None:
                        error[worker.item] = True
                        remaining -= 1
                    self._retire(worker)
                    self._spawn()
                    continue
                message = json.loads(line)
                if message == ["ready"]:
                    worker.ready = True
                    continue
                index, ok, failed = message
                if index == worker.item:
                    correct[index], error[index] = ok, failed
                    worker.item = None
                    remaining -= 1
            now = time.monotonic()
            for worker in list(self._workers):
                if worker.item is not None and now >= worker.deadline:
                    timed_out[worker.item] = True
                    remaining -= 1
                    self._retire(worker)
                    self._spawn()
                elif not worker.ready and now >= worker.started + self.start_timeout:
                    self._retire(worker)
                    raise RuntimeError(
                        f"a grading worker did not start within {self.start_timeout:.0f} s"
                    )
        self.total_items += n
        self.total_timeouts += int(timed_out.sum())
        self.total_errors += int(error.sum())
        return GradeResult(correct, timed_out, error, time.monotonic() - t0)

    def close(self) -> None:
        """Stop all workers (end of input, then by force)."""
        for worker in list(self._workers):
            try:
                worker.process.stdin.close()  # type: ignore[union-attr]
                worker.process.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self._retire(worker)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # best effort at interpreter exit
            self.close()


def grade_many(
    golds: Sequence[str],
    preds: Sequence[str],
    timeout: float = 5.0,
    workers: int = 2,
    pool: GradingPool | None = None,
) -> list[bool]:
    """Grade each prediction against its gold answer with math-verify (gold first).

    Args:
        golds: gold answers (LaTeX, with or without ``$...$``).
        preds: model outputs (full text; the boxed answer has priority).
        timeout: hard per-item limit in seconds; a timed-out item is graded False.
        workers: worker processes when no ``pool`` is given.
        pool: an open :class:`GradingPool` to reuse (its own timeout applies).

    Returns:
        One bool per item.
    """
    if pool is not None:
        return pool.grade(golds, preds).correct.tolist()
    with GradingPool(workers=workers, timeout=timeout) as own:
        return own.grade(golds, preds).correct.tolist()
