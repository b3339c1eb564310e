"""One worker thread owns the models; concurrent scoring requests share one PRM forward.

Torch modules and tokenizers are not meant to be driven from many threads at once, and a
small forward costs about as much as a large one on the same device: so every model call of
the service runs on one worker thread, and scoring requests that arrive while it is busy (or
within ``batch_wait_ms`` of the first one) are handed to it together, up to ``max_batch`` at
a time. Other work (an allocation, which runs several model calls of its own) is run alone,
between batches, in arrival order.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("dprm.serve")


class Busy(RuntimeError):
    """More requests wait for the models than the service queues (answered 503)."""


@dataclass
class _Job:
    future: Future
    payload: Any = None
    call: Callable[[], Any] | None = None  # exclusive work instead of a batched payload


@dataclass
class BatchStats:
    """What the worker ran: batches of scoring requests by size, and exclusive calls."""

    batches: int = 0
    batched_requests: int = 0
    largest_batch: int = 0
    sizes: Counter = field(default_factory=Counter)
    calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "batched_requests": self.batched_requests,
            "largest_batch": self.largest_batch,
            "batch_sizes": {str(k): v for k, v in sorted(self.sizes.items())},
            "calls": self.calls,
        }


_STOP = object()


class MicroBatcher:
    """A queue in front of one worker thread that runs ``run_batch`` on gathered payloads.

    Args:
        run_batch: payloads [B] -> results [B]; a result that is an ``Exception`` fails that
            payload's request alone.
        max_batch: the most payloads per ``run_batch`` call.
        wait_s: how long the first payload of a batch waits for others to join.
        max_queue: the most jobs waiting; :meth:`submit` raises :class:`Busy` beyond.
    """

    def __init__(
        self,
        run_batch: Callable[[list[Any]], list[Any]],
        max_batch: int,
        wait_s: float,
        max_queue: int,
    ):
        self.run_batch, self.max_batch, self.wait_s = run_batch, int(max_batch), float(wait_s)
        self.max_queue = int(max_queue)
        self.stats = BatchStats()
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._waiting = 0
        self._thread = threading.Thread(target=self._work, name="dprm-serve-models", daemon=True)
        self._thread.start()

    # -- submitting --------------------------------------------------------------------------
    def _put(self, job: _Job) -> Future:
        with self._lock:
            if self._waiting >= self.max_queue:
                raise Busy(f"{self._waiting} requests are waiting for the models; retry later")
            self._waiting += 1
        self._queue.put(job)
        return job.future

    def submit(self, payload: Any) -> Future:
        """Queue a payload for the next batch; its future holds its result."""
        return self._put(_Job(Future(), payload=payload))

    def call(self, fn: Callable[[], Any]) -> Future:
        """Queue ``fn`` to run alone on the worker (between batches)."""
        return self._put(_Job(Future(), call=fn))

    def close(self, timeout: float = 30.0) -> None:
        """Finish the queued work, then stop the worker."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    # -- the worker --------------------------------------------------------------------------
    def _done(self, count: int) -> None:
        with self._lock:
            self._waiting -= count

    def _run_call(self, job: _Job) -> None:
        self._done(1)
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            job.future.set_result(job.call())
        except BaseException as err:  # noqa: BLE001 - handed to the request that asked
            job.future.set_exception(err)
        self.stats.calls += 1

    def _run_batch(self, batch: list[_Job]) -> None:
        self._done(len(batch))
        live = [job for job in batch if job.future.set_running_or_notify_cancel()]
        if not live:
            return
        started = time.perf_counter()
        try:
            results = self.run_batch([job.payload for job in live])
        except BaseException as err:  # noqa: BLE001 - every request of the batch hears it
            for job in live:
                job.future.set_exception(err)
            return
        # counted before the answers go out: a client that reads /v1/info after its answer
        # sees its batch
        self.stats.batches += 1
        self.stats.batched_requests += len(live)
        self.stats.largest_batch = max(self.stats.largest_batch, len(live))
        self.stats.sizes[len(live)] += 1
        for job, result in zip(live, results, strict=True):
            if isinstance(result, BaseException):
                job.future.set_exception(result)
            else:
                job.future.set_result(result)
        log.debug("batch of %d in %.1f ms", len(live), 1e3 * (time.perf_counter() - started))

    def _work(self) -> None:
        stopping = False
        while not stopping:
            job = self._queue.get()
            if job is _STOP:
                break
            if job.call is not None:
                self._run_call(job)
                continue
            batch, deferred = [job], []
            deadline = time.monotonic() + self.wait_s
            while len(batch) < self.max_batch:
                try:  # what is queued already joins at once; then wait out the window
                    left = deadline - time.monotonic()
                    nxt = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stopping = True
                    break
                if nxt.call is not None:
                    deferred.append(nxt)
                else:
                    batch.append(nxt)
            self._run_batch(batch)
            for call in deferred:
                self._run_call(call)
        # finish whatever is still queued, one at a time
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is _STOP:
                continue
            if job.call is not None:
                self._run_call(job)
            else:
                self._run_batch([job])
