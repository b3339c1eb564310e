"""What each executor needs from the machine it is started on: the SLURM commands, a Ray
cluster that answers. Its own module so that the executors (which check these too) and the
registry in :mod:`dprm.runner.executors` import it one way."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from typing import Any

#: seconds to wait for a Ray cluster's address to accept a connection
RAY_PROBE_TIMEOUT_S = 3.0
#: the file ``ray start`` writes with the address ``--address auto`` joins
RAY_CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")


def slurm_missing() -> list[str]:
    """The SLURM commands submitit calls that are not on PATH here."""
    return [c for c in ("sbatch", "srun") if shutil.which(c) is None]


def ray_address(recipe: Any, address: str | None = None) -> str:
    """The Ray address a run joins: the command line's, else the recipe's ("" : a local one)."""
    return address if address is not None else (recipe.executor.ray.address or "")


def ray_unreachable(address: str) -> str | None:
    """Why the Ray cluster at ``address`` cannot be joined from here (None: it answers, or a
    new local instance is asked for). One TCP connection with a short timeout; ``auto`` is
    found as Ray finds it (``$RAY_ADDRESS`` or the file ``ray start`` writes)."""
    if address in ("", "local"):
        return None
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
        if not address and RAY_CURRENT_CLUSTER.is_file():
            address = RAY_CURRENT_CLUSTER.read_text().strip()
        if not address:
            return "no running cluster found for 'auto' (no `ray start` on this machine)"
    client = address.startswith("ray://")
    host, _, port = address.removeprefix("ray://").partition(":")
    try:
        with socket.create_connection(
            (host, int(port or (10001 if client else 6379))), RAY_PROBE_TIMEOUT_S
        ):
            return None
    except (OSError, ValueError) as err:
        return f"{address} does not answer ({err})"
