"""Worker pools that end with their driver: an interrupt (Ctrl-C, SIGTERM, SIGHUP) or an error
in the process that started them terminates them now, instead of waiting for their work.

No dprm import here: the runner's executors and ``dprm tune --jobs`` both use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def terminate_pool(pool: Any) -> None:
    """Stop a process pool now: pending work cancelled, running workers terminated, then killed.

    ``shutdown()`` alone waits for the running work to finish (minutes for a training); the
    pool's worker processes are only reachable through its ``_processes`` attribute.
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()


@contextlib.contextmanager
def ended_on_exit(pool: Any) -> Iterator[Any]:
    """While active, any exception (``KeyboardInterrupt`` included) terminates ``pool``'s
    workers before it propagates (:func:`terminate_pool`)."""
    try:
        yield pool
    except BaseException:
        terminate_pool(pool)
        raise
