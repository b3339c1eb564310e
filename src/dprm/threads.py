"""One thread policy for the command line and the Python API.

torch's default (one intra-op thread per core) makes a job several times slower when other
processes share the cores: 150 OT steps on a tiny world took 204 s at 2 threads against 16 s at
1 on a shared 2-core machine. dprm therefore runs its compute with :func:`default_threads`
threads: half the usable cores, at most 4 (1 on a 2-core machine), or ``$OMP_NUM_THREADS``
when set. The CLI applies it for the whole command (``--threads`` overrides it); the API's
compute functions (:func:`dprm.fit`, ``Calibrator.quantiles`` / ``point_estimate``,
:func:`dprm.ias.run_ias`) take ``threads=`` and set it only for the duration of the call.

Importing dprm changes nothing global. Nested calls (``fit`` evaluating quantiles, the CLI
calling ``fit``) keep the setting of the outermost one unless given ``threads=`` themselves.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextvars import ContextVar

#: the thread count dprm has set (a command's ``--threads`` or an enclosing API call), else None
_ACTIVE: ContextVar[int | None] = ContextVar("dprm_threads", default=None)


def default_threads() -> int:
    """Intra-op threads when none are asked for: half the usable cores, at most 4.

    A shared 2-core machine gets 1 thread per process, so two jobs side by side do not
    oversubscribe it. ``OMP_NUM_THREADS``, when set to a positive integer, wins.
    """
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores // 2))


def set_process_threads(threads: int | None = None) -> int:
    """Set torch's threads for the rest of the process (the CLI, once per command).

    Returns:
        The thread count set (``threads``, else :func:`default_threads`).
    """
    import torch

    count = threads or default_threads()
    torch.set_num_threads(count)
    _ACTIVE.set(count)
    return count


@contextlib.contextmanager
def torch_threads(threads: int | None = None) -> Iterator[int]:
    """Run a block with ``threads`` torch intra-op threads and restore the previous count.

    Args:
        threads: the count; None keeps a count dprm already set (an enclosing call, the CLI's
            ``--threads``), else uses :func:`default_threads`.

    Yields:
        The thread count in force inside the block.
    """
    if threads is not None and threads < 1:
        raise ValueError(f"threads={threads}: expected an integer >= 1 or None")
    active = _ACTIVE.get()
    if threads is None and active is not None:
        yield active  # inside a dprm call or command that already chose
        return
    import torch

    count = threads or default_threads()
    previous = torch.get_num_threads()
    token = _ACTIVE.set(count)
    if count != previous:
        torch.set_num_threads(count)
    try:
        yield count
    finally:
        _ACTIVE.reset(token)
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)
