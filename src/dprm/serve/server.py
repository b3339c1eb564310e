"""Loading the models and running uvicorn: what ``dprm serve`` does after parsing its flags."""

from __future__ import annotations

import logging
import socket
import sys
from typing import Any

from dprm.serve.service import Policy, ScoringService
from dprm.serve.settings import ServeSettings

log = logging.getLogger("dprm.serve")


def describe(cprm: Any, prm_path: str, calibrator_path: str, policy: Policy, settings) -> dict:
    """``/v1/info``'s fixed part: the models and their content digests, the calibrator's
    training data (its saved ``info``), versions and settings."""
    import dataclasses

    from dprm.digests import digest, model_digest
    from dprm.version import __version__

    cal = cprm.calibrator
    trained = dict(getattr(cal, "info", None) or {})
    return {
        "dprm_version": __version__,
        "prm": {
            "path": str(prm_path),
            "digest": model_digest(prm_path),
            "kind": cprm.prm.kind,
            "hidden_dim": int(cprm.prm.hidden_dim),
            "max_tokens": int(cprm.prm.max_tokens),
            "dtype": str(cprm.prm.dtype).replace("torch.", ""),
            "device": str(cprm.prm.device),
        },
        "calibrator": {
            "path": str(calibrator_path),
            "digest": digest(calibrator_path),
            "method": cal.method,
            "kind": cprm.kind,
            "hidden_dim": int(cal.hidden_dim),
            "trained_with_dprm": trained.get("dprm_version"),
            "training_data": {
                "path": trained.get("data_path"),
                "trained_on": trained.get("trained_on", {}),
                "n_train": trained.get("n_train"),
                "n_train_questions": trained.get("n_train_questions"),
                "seed": trained.get("seed"),
            },
            "default_levels": cprm.default_levels.tolist(),
        },
        "allocation": {
            **dataclasses.asdict(policy),
            "train_bon_digest": digest(policy.train_bon) if policy.train_bon else None,
            "n_max": cprm.n_max,
            "beta": cprm.beta,
        },
        "limits": settings.to_dict(),
    }


def build(
    prm: str,
    calibrator: str,
    *,
    settings: ServeSettings,
    policy: Policy,
    prm_kind: str | None = None,
    device: str | None = None,
    dtype: Any = None,
    prm_options: dict[str, Any] | None = None,
    n_max: int = 64,
    beta: float = 0.1,
) -> tuple[ScoringService, dict[str, Any]]:
    """Load the PRM and the calibrator (as ``dprm solve``) and build the service."""
    from dprm.live.calibrated_prm import CalibratedPRM
    from dprm.llm.prm import load_prm
    from dprm.models import load

    model = load(calibrator)
    wrapper = load_prm(prm, kind=prm_kind, device=device, dtype=dtype, **(prm_options or {}))
    cprm = CalibratedPRM(wrapper, model, calibrator_path=str(calibrator), beta=beta, n_max=n_max)
    service = ScoringService(cprm, settings, policy)
    return service, describe(cprm, prm, calibrator, policy, settings)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def make_server(service: ScoringService, info: dict[str, Any], log_level: str = "info") -> Any:
    """A ``uvicorn.Server`` for the service (its own access log off: ours has request ids)."""
    import uvicorn

    from dprm.serve.app import create_app, wrap

    app = wrap(create_app(service, info), service.settings.max_body_bytes)
    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
        lifespan="off",
    )
    return uvicorn.Server(config)


def serve(
    service: ScoringService,
    info: dict[str, Any],
    sock: socket.socket,
    log_level: str = "info",
    announce: bool = True,
) -> int:
    """Serve until SIGTERM / SIGINT (uvicorn's handlers: stop accepting, finish the requests
    in flight), then finish the queued model work and return."""
    import signal

    host, port = sock.getsockname()[:2]
    server = make_server(service, info, log_level)
    # uvicorn handles SIGTERM / SIGINT while it runs and re-raises the signal to the handler
    # it found once it has shut down: that handler only notes it, so the process ends with 0
    # after the queued work, not killed by the default action
    stops: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stops.append(signum))
    if announce:  # the address, for a caller that asked for a free port (--port 0)
        print(f"dprm serve: listening on http://{host}:{port}", file=sys.stderr, flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        service.close()
        log.info("stopped")
    return 0


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


__all__ = ["bind", "build", "describe", "make_server", "serve", "setup_logging"]
