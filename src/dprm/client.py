"""A small client for ``dprm serve`` (standard library only: no torch, no HTTP package).

::

    from dprm.client import Client

    client = Client("http://127.0.0.1:8700")
    scored = client.score("What is 2 + 3?", [["2 + 3 = 5.", "The answer is \\\\boxed{5}."]])
    scored["solutions"][0]["steps"][-1]["quantiles"]  # Q(level | h) after the last step

    draws = []  # a best-of-N loop: draw until the service says stop
    while True:
        answer = client.allocate("What is 2 + 3?", draws, allocation="auto-seq")["questions"][0]
        if answer["decision"] == "stop":
            break
        draws += [{"steps": split(sample())} for _ in range(answer["draw_more"])]

Errors: a refusal (4xx) or a server failure (5xx) raises :class:`ServeError` with the status
and the service's one-line message; an unreachable server raises :class:`ServeError` with
status 0. 429 / 503 and connection failures are retried with backoff (``retries``).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = ["Client", "ServeError"]


class ServeError(RuntimeError):
    """A request ``dprm serve`` refused or could not answer.

    Attributes:
        status: the HTTP status (0: no answer: connection refused, timed out).
        message: the service's one-line reason.
        request_id: the request's id in the server's log (None without an answer).
    """

    def __init__(self, status: int, message: str, request_id: str | None = None):
        super().__init__(
            f"{status}: {message}" + (f" (request {request_id})" if request_id else "")
        )
        self.status, self.message, self.request_id = int(status), message, request_id


class Client:
    """Calls ``dprm serve`` at ``base_url``.

    Args:
        base_url: e.g. ``http://127.0.0.1:8700``.
        timeout: seconds per request.
        retries: extra attempts on 429 / 503 and connection errors (backoff 0.2 s, doubling).
    """

    def __init__(self, base_url: str, timeout: float = 60.0, retries: int = 2):
        self.base_url = base_url.rstrip("/")
        self.timeout, self.retries = float(timeout), int(retries)

    # -- transport ---------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: dict | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"} if data is not None else {}
        delay = 0.2
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(
                self.base_url + path, data=data, method=method, headers=headers
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read().decode("utf-8"))
            except urllib.error.HTTPError as err:
                try:
                    payload = json.loads(err.read().decode("utf-8"))
                except ValueError:
                    payload = {}
                error = ServeError(
                    err.code, str(payload.get("error") or err.reason), payload.get("request_id")
                )
                if err.code not in (429, 503) or attempt == self.retries:
                    raise error from None
            except (urllib.error.URLError, OSError) as err:
                reason = getattr(err, "reason", err)
                if attempt == self.retries:
                    raise ServeError(0, f"{self.base_url}{path}: {reason}") from None
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    # -- endpoints ---------------------------------------------------------------------------
    def health(self) -> bool:
        """Whether the service answers ``/healthz``."""
        try:
            return self._request("GET", "/healthz").get("status") == "ok"
        except ServeError:
            return False

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until ``/healthz`` answers (a server still loading its models), or raise."""
        deadline = time.monotonic() + timeout
        while not self.health():
            if time.monotonic() > deadline:
                raise ServeError(0, f"{self.base_url}: not ready after {timeout:.0f} s")
            time.sleep(0.1)

    def info(self) -> dict[str, Any]:
        """``/v1/info``: models, digests, versions, settings, batching counters."""
        return self._request("GET", "/v1/info")

    def score(
        self,
        question: str,
        solutions: list[list[str]],
        levels: list[float] | None = None,
        lower_level: float | None = None,
    ) -> dict[str, Any]:
        """``/v1/score``: per solution, per step the PRM score, quantiles, p_hat and lower
        bound."""
        body: dict[str, Any] = {"question": question, "solutions": solutions}
        if levels is not None:
            body["levels"] = list(levels)
        if lower_level is not None:
            body["lower_level"] = lower_level
        return self._request("POST", "/v1/score", body)

    def allocate(
        self,
        question: str | list[str],
        draws: list[dict] | list[list[dict]] | None = None,
        allocation: str = "ias",
        C: float | None = None,
    ) -> dict[str, Any]:
        """``/v1/allocate`` for one question (``draws``: its draws, each ``{"steps": [...]}``
        and optionally ``"answer"``) or a batch (``question`` a list, ``draws`` one list per
        question)."""
        if isinstance(question, str):
            items = [{"question": question, "draws": list(draws or [])}]
        else:
            per = draws if draws is not None else [[] for _ in question]
            items = [{"question": q, "draws": list(d)} for q, d in zip(question, per, strict=True)]
        body: dict[str, Any] = {"questions": items, "allocation": allocation}
        if C is not None:
            body["C"] = C
        return self._request("POST", "/v1/allocate", body)
