"""The ASGI application of ``dprm serve`` (FastAPI): routes, errors, request ids, limits.

Every answer carries an ``X-Request-ID`` (the client's, when it sends a plain one, else a new
one) that the log lines repeat. Every refusal is a 4xx with one line in ``error``; an internal
failure is a 500 with one line, its traceback in the log: no request can stop the process.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dprm.io import DataError
from dprm.serve.batcher import Busy
from dprm.serve.schemas import (
    AllocateRequest,
    AllocateResponse,
    ErrorResponse,
    ScoreRequest,
    ScoreResponse,
)
from dprm.serve.service import Draw, RequestError, ScoringService

log = logging.getLogger("dprm.serve")
_PLAIN_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (409, 413, 422, 503)
}


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:500]


def _location(loc: tuple) -> str:
    parts = [p for p in loc if p != "body"]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


class _Guard:
    """Pure ASGI middleware: request id, body size limit, one log line per request."""

    def __init__(self, app: Any, max_body_bytes: int):
        self.app, self.max_body_bytes = app, int(max_body_bytes)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        asked = headers.get(b"x-request-id", b"").decode("latin-1")
        rid = asked if _PLAIN_ID.match(asked) else uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = rid
        started, status = time.perf_counter(), [0]

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode())]
            await send(message)

        # read the body here, at most max_body_bytes of it, then hand it on
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body_bytes:
                response = JSONResponse(
                    {
                        "error": f"request body over {self.max_body_bytes} bytes",
                        "request_id": rid,
                    },
                    status_code=413,
                )
                await response(scope, receive, send_with_id)
                log.info("%s %s %s 413", rid, scope["method"], scope["path"])
                return
        sent = [False]

        async def replay():
            if not sent[0]:
                sent[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send_with_id)
        log.info(
            "%s %s %s %d %.1f ms",
            rid,
            scope["method"],
            scope["path"],
            status[0],
            1e3 * (time.perf_counter() - started),
        )


def create_app(service: ScoringService, info: dict[str, Any]) -> FastAPI:
    """The application serving ``service``; ``info`` is ``/v1/info``'s fixed part (models,
    digests, versions, settings)."""
    app = FastAPI(
        title="dprm serve",
        version=str(info.get("dprm_version", "")),
        description="A calibrated distributional process reward model: per-step scores and "
        "calibrated quantiles, and how many samples a question needs.",
    )

    def rid(request: Request) -> str:
        return request.scope.get("state", {}).get("request_id", "-")

    def refuse(request: Request, status: int, message: str) -> JSONResponse:
        message = _one_line(message)
        log.info("%s refused %d: %s", rid(request), status, message)
        return JSONResponse({"error": message, "request_id": rid(request)}, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        if first.get("type") == "json_invalid":
            return refuse(request, 422, f"body is not valid JSON: {first.get('msg')}")
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return refuse(request, 422, f"{_location(tuple(first['loc']))}: {first['msg']}{more}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return refuse(request, exc.status_code, str(exc.detail))

    @app.exception_handler(RequestError)
    async def _refused(request: Request, exc: RequestError):
        return refuse(request, exc.status, str(exc))

    @app.exception_handler(DataError)
    async def _data(request: Request, exc: DataError):
        return refuse(request, 422, str(exc))

    @app.exception_handler(Busy)
    async def _busy(request: Request, exc: Busy):
        return refuse(request, 503, str(exc))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.exception("%s internal error", rid(request))
        message = _one_line(f"internal error ({type(exc).__name__}: {exc})")
        return JSONResponse({"error": message, "request_id": rid(request)}, status_code=500)

    @app.get("/healthz", summary="liveness: the models are loaded and the worker runs")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/info", summary="models, digests, versions, settings and batching counters")
    async def v1_info() -> dict[str, Any]:
        return {**info, "batching": service.batcher.stats.to_dict()}

    @app.post(
        "/v1/score",
        response_model=ScoreResponse,
        responses=_ERRORS,
        summary="per step: the PRM score, calibrated quantiles, p_hat and the lower bound",
    )
    async def v1_score(body: ScoreRequest, request: Request) -> dict[str, Any]:
        job = service.score_job(body.question, body.solutions, body.levels, body.lower_level)
        result = await asyncio.wrap_future(service.batcher.submit(job))
        return {"request_id": rid(request), **result}

    @app.post(
        "/v1/allocate",
        response_model=AllocateResponse,
        response_model_exclude_none=False,
        responses=_ERRORS,
        summary="the budget of an allocation rule, and (with draws) whether to draw again",
    )
    async def v1_allocate(body: AllocateRequest, request: Request) -> dict[str, Any]:
        questions = [q.question for q in body.questions]
        draws = [[Draw(list(d.steps), d.answer) for d in q.draws] for q in body.questions]
        service.check_allocate(questions, draws, body.allocation, body.C)
        future = service.batcher.call(
            lambda: service.allocate(questions, draws, body.allocation, body.C)
        )
        result = await asyncio.wrap_future(future)
        return {"request_id": rid(request), **result}

    return app


def wrap(app: FastAPI, max_body_bytes: int) -> Any:
    """``app`` behind the request-id / body-limit guard (what uvicorn serves)."""
    return _Guard(app, max_body_bytes)
