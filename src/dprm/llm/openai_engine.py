"""Sampling from a served generator behind an OpenAI-compatible ``/v1/completions`` endpoint.

``--backend openai --base-url http://HOST:PORT/v1 --model NAME`` sends every prompt to
``BASE_URL/completions`` (``vllm serve``, SGLang, llama.cpp's server, TGI). The prompt text is
rendered on this side with the chat format of :mod:`dprm.llm.prompts`, exactly as for the
in-process backends, so the three backends sample from the same strings. One request per prompt
carries all its samples (``n``) and the prompt's seed (servers that take ``seed`` then return
the same samples for the same request), ``max_tokens``, ``temperature``, ``top_p``, the stop
strings, and ``logprobs`` (0 unless more are asked: the completions API reports a choice's
token count only through its logprobs; ``usage`` sums the n choices). Settings the OpenAI API
lacks are sent only where they matter: ``top_k`` when on, ``repetition_penalty`` when not 1,
and ``stop_token_ids`` (the model's end-of-turn tokens, as the in-process backends stop at)
when the tokenizer is readable here (sampling extensions vLLM takes).

Where the tokenizer is readable (``tokenizer``, default: the model name when it is a local
folder or a cached hub id) and the context limit is known (``max_model_len``, default: what the
server's ``/v1/models`` reports, as vLLM does), ``max_tokens`` is cut so that prompt and
completion fit, and a prompt that fills the context gets ``n`` empty completions without a
request, as in the in-process backends.

Failures: 408, 429, 5xx and connection errors are retried with exponential backoff and full
jitter (``Retry-After`` honoured), at most ``max_attempts`` tries; each failed try prints one
line naming the URL and the status; any other status (a wrong model name, a bad key, a request
the server refuses) stops at once. What ends the run is a :class:`ServerError` (one line at the
CLI, exit 2). At most ``max_in_flight`` requests are open at a time. The API key is read from
the environment variable named by ``api_key_env`` and sent as a bearer token; it is never
printed.

A resumed stage never pays twice for a request: finished parts are not redone, and inside a
part every answered request is appended to a journal (``use_journal``; the stages keep it in
their work directory), so a rerun reads the answer instead of asking again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from dprm.config import ConfigError
from dprm.llm.generator_base import Completion, SamplingBackend, SamplingOptions, cut_at_stop

DEFAULT_MAX_IN_FLIGHT = 16
DEFAULT_MAX_ATTEMPTS = 6
#: statuses worth another try: the server is busy or briefly broken, not the request wrong
RETRY_STATUSES = frozenset({408, 429})


class ServerError(ConnectionError):
    """A request the server did not answer: the message names the URL and the status."""

    def __init__(self, url: str, what: str):
        self.message = f"{url}: {what}"
        super().__init__(self.message)
        self.filename = url  # names where it failed, so the CLI does not prefix --out

    def __str__(self) -> str:  # OSError's would show the filename field instead
        return self.message


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: try ``k`` waits uniform(0, min(cap, base * 2^k))."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    base_s: float = 0.5
    cap_s: float = 30.0

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None) -> float:
        """Seconds to wait after failed try ``attempt`` (1-based); the server's word first."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.cap_s)
        return rng.uniform(0.0, min(self.cap_s, self.base_s * 2 ** (attempt - 1)))


class RequestJournal:
    """Answered requests, one JSON line each (request digest, response), appended as they come.

    Read at the first lookup (after the stage has settled its work directory: a directory left
    by other settings or inputs is discarded first). A line cut short by a kill is ignored; two
    requests with the same body are the same request (the body holds the model name, the
    prompt, the seed and every sampling setting).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._answers: dict[str, dict] | None = None

    @staticmethod
    def key(body: dict) -> str:
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    def _read(self) -> dict[str, dict]:
        if self._answers is None:
            self._answers = {}
            if self.path.exists():
                for line in self.path.read_text(encoding="utf-8").splitlines():
                    try:
                        record = json.loads(line)
                        self._answers[record["key"]] = record["response"]
                    except (ValueError, KeyError, TypeError):
                        continue  # the torn last line of a killed run
        return self._answers

    def get(self, key: str) -> dict | None:
        with self._lock:
            return self._read().get(key)

    def add(self, key: str, response: dict) -> None:
        line = json.dumps({"key": key, "response": response}) + "\n"
        with self._lock:
            self._read()[key] = response
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write(line)


def check_base_url(base_url: str) -> str:
    """``base_url`` without a trailing slash; ConfigError unless it is an http(s) URL."""
    parsed = urlparse(str(base_url))
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(
            f"--base-url {base_url!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1"
        )
    return str(base_url).rstrip("/")


def read_api_key(api_key_env: str | None) -> str | None:
    """The key in the environment variable ``api_key_env`` (None: no key); never printed."""
    if not api_key_env:
        return None
    key = os.environ.get(api_key_env)
    if not key:
        raise ConfigError(f"--api-key-env {api_key_env}: that environment variable is not set")
    return key


class OpenAIGenerator(SamplingBackend):
    """Sampling from an OpenAI-compatible completions server (see the module docstring).

    Args:
        model: the model name the server serves (``vllm serve DIR`` serves it as ``DIR``); it
            also picks the chat format, as for the other backends.
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        api_key_env: name of the environment variable holding the API key (None: no key).
        max_in_flight: requests open at a time.
        max_attempts: tries per request (408, 429, 5xx, connection errors are retried).
        timeout_s: seconds one request may take.
        max_model_len: prompt + completion limit (None: the server's, where it reports one).
        tokenizer: where to read the tokenizer (None: ``model`` when readable here).
        logprobs: also return the sampled tokens' log-probabilities (``Completion.logprobs``);
            an int ``k`` asks the server for its top ``k`` too.
        backoff_s: first backoff step (doubled per try, capped at 30 s, jittered).
    """

    backend = "openai"

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key_env: str | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout_s: float = 600.0,
        max_model_len: int | None = None,
        tokenizer: str | None = None,
        logprobs: int | None = None,
        backoff_s: float = 0.5,
    ):
        try:
            import httpx
        except ImportError as err:  # pragma: no cover - httpx comes with the llm extra
            raise ImportError("--backend openai needs httpx: pip install 'dprm[llm]'") from err
        if int(max_in_flight) < 1 or int(max_attempts) < 1:
            raise ConfigError(
                f"max_in_flight={max_in_flight}, max_attempts={max_attempts}: expected >= 1"
            )
        self.model_name = str(model)
        self.base_url = check_base_url(base_url)
        self.url = f"{self.base_url}/completions"
        self.max_in_flight = int(max_in_flight)
        self.retry = RetryPolicy(int(max_attempts), float(backoff_s))
        self.logprobs = None if logprobs is None else int(logprobs)
        self.journal: RequestJournal | None = None
        self.requests_sent = 0  # POSTs that reached the wire (retries included)
        self._rng = random.Random()
        self._count_lock = threading.Lock()
        headers = {}
        key = read_api_key(api_key_env)
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        self.client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(float(timeout_s), connect=min(float(timeout_s), 30.0)),
            limits=httpx.Limits(
                max_connections=self.max_in_flight, max_keepalive_connections=self.max_in_flight
            ),
        )
        self.tokenizer = _load_tokenizer(tokenizer or self.model_name, explicit=bool(tokenizer))
        self.stop_ids = _stop_ids(self.tokenizer)
        served_limit = self._served_model_limit()
        self.max_model_len = int(max_model_len) if max_model_len else served_limit

    # ----------------------------------------------------------------------------- requests
    def use_journal(self, path: str | os.PathLike | None) -> None:
        """Record answered requests at ``path`` and answer repeated ones from it (None: off)."""
        self.journal = None if path is None else RequestJournal(path)

    def _served_model_limit(self) -> int | None:
        """Check that the server serves ``model``; its context limit if it says (vLLM does)."""
        url = f"{self.base_url}/models"
        try:
            payload = self._send("GET", url, None)
        except ServerError as err:
            if " HTTP 404" in str(err) or " HTTP 405" in str(err):
                return None  # a server without the listing: nothing to check
            raise
        entries = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(entries, list) or not entries:
            return None
        served = {str(e.get("id")): e for e in entries if isinstance(e, dict)}
        if self.model_name not in served:
            raise ServerError(
                url, f"does not serve model {self.model_name!r}; it serves {sorted(served)}"
            )
        limit = served[self.model_name].get("max_model_len")
        return int(limit) if isinstance(limit, int) and limit > 0 else None

    def _send(self, method: str, url: str, body: dict | None) -> Any:
        """One request with retries; the decoded JSON answer, or a ServerError."""
        import httpx

        for attempt in range(1, self.retry.max_attempts + 1):
            retry_after = None
            try:
                with self._count_lock:
                    self.requests_sent += 1
                response = self.client.request(method, url, json=body)
            except httpx.TransportError as err:  # refused, reset, dropped, timed out
                problem = f"connection error ({type(err).__name__}: {_one_line(str(err))})"
            else:
                status = response.status_code
                if status == 200:
                    try:
                        return response.json()
                    except ValueError:
                        raise ServerError(url, "HTTP 200 with a body that is not JSON") from None
                problem = f"HTTP {status}: {_server_message(response)}"
                if status not in RETRY_STATUSES and status < 500:
                    raise ServerError(url, f"{method} {problem}")
                retry_after = _retry_after(response)
            if attempt == self.retry.max_attempts:
                raise ServerError(url, f"{method} {problem}; gave up after {attempt} attempts")
            delay = self.retry.delay(attempt, self._rng, retry_after)
            print(
                f"openai: {method} {url}: {problem}; attempt {attempt}/"
                f"{self.retry.max_attempts}, retrying in {delay:.1f} s",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _answer(self, body: dict) -> dict:
        """The server's answer to ``body``: from the journal, else asked (and journalled)."""
        key = RequestJournal.key(body) if self.journal is not None else ""
        if self.journal is not None and (known := self.journal.get(key)) is not None:
            return known
        payload = self._send("POST", self.url, body)
        if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
            raise ServerError(self.url, "HTTP 200 without a 'choices' list")
        kept = {"choices": payload["choices"], "usage": payload.get("usage")}
        if self.journal is not None:
            self.journal.add(key, kept)
        return kept

    # ----------------------------------------------------------------------------- sampling
    def request_body(self, prompt: str, n: int, seed: int, options: SamplingOptions) -> dict:
        """The JSON body sent for one prompt (``max_tokens`` already fitted to the context)."""
        body: dict[str, Any] = {
            "model": self.model_name,
            "prompt": prompt,
            "n": int(n),
            "max_tokens": int(options.max_new_tokens),
            "temperature": float(options.temperature),
            "top_p": float(options.top_p),
            "seed": int(seed),
            "logprobs": self.logprobs or 0,
        }
        if options.stop:
            body["stop"] = list(options.stop)
        if options.top_k > 0:
            body["top_k"] = int(options.top_k)
        if options.repetition_penalty != 1.0:
            body["repetition_penalty"] = float(options.repetition_penalty)
        if self.stop_ids:
            body["stop_token_ids"] = list(self.stop_ids)
        return body

    def _budget(self, prompt: str, max_new_tokens: int) -> int:
        if self.tokenizer is None or self.max_model_len is None:
            return int(max_new_tokens)
        return min(int(max_new_tokens), self.max_model_len - len(self.tokenizer(prompt).input_ids))

    def _sample(
        self, prompts: list[str], n: int, seeds: list[int], options: SamplingOptions
    ) -> list[list[Completion]]:
        results: list[list[Completion]] = [
            [Completion("", 0, "length") for _ in range(n)] for _ in prompts
        ]
        bodies = {}
        for i, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
            budget = self._budget(prompt, options.max_new_tokens)
            if budget > 0:  # else n empty completions, as the in-process backends give
                fitted = dataclasses.replace(options, max_new_tokens=budget)
                bodies[i] = self.request_body(prompt, n, seed, fitted)
        if not bodies:
            return results
        with ThreadPoolExecutor(max_workers=min(self.max_in_flight, len(bodies))) as pool:
            futures = {i: pool.submit(self._answer, body) for i, body in bodies.items()}
            try:
                for i, future in futures.items():
                    results[i] = self._completions(future.result(), n, options.stop)
            except BaseException:
                for future in futures.values():
                    future.cancel()  # what is in flight finishes (and is journalled)
                raise
        return results

    def _completions(self, answer: dict, n: int, stop: list[str] | None) -> list[Completion]:
        choices = sorted(answer["choices"], key=lambda c: int(c.get("index", 0)))
        if len(choices) != n:
            raise ServerError(self.url, f"answered {len(choices)} choices to a request for n={n}")
        usage = answer.get("usage") or {}
        return [self._completion(c, n, usage, stop) for c in choices]

    def _completion(self, choice: dict, n: int, usage: dict, stop: list[str] | None) -> Completion:
        text = choice.get("text")
        if not isinstance(text, str):
            raise ServerError(self.url, f"a choice without text: {_one_line(str(choice))[:200]}")
        finish = str(choice.get("finish_reason") or "stop")
        stop_reason = choice.get("stop_reason")  # vLLM's; other servers leave it out
        text, string = cut_at_stop(text, stop)  # a server that returns the stop string too
        if string is not None:
            finish, stop_reason = "stop", string
        logprobs = choice.get("logprobs") or {}
        if isinstance(logprobs.get("tokens"), list):
            n_tokens = len(logprobs["tokens"])
        elif isinstance(choice.get("token_ids"), list):
            n_tokens = len(choice["token_ids"])
        elif n == 1 and isinstance(usage.get("completion_tokens"), int):
            n_tokens = int(usage["completion_tokens"])
        elif self.tokenizer is not None:  # re-encoded: the end token is not in the text
            n_tokens = len(self.tokenizer(text, add_special_tokens=False).input_ids)
            n_tokens += int(finish == "stop" and not isinstance(stop_reason, str))
        else:
            n_tokens = 0
        values = None
        if self.logprobs is not None and isinstance(logprobs.get("token_logprobs"), list):
            values = tuple(math.nan if v is None else float(v) for v in logprobs["token_logprobs"])
        return Completion(text, n_tokens, finish, stop_reason, values)

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()


def _load_tokenizer(source: str, explicit: bool) -> Any:
    """The tokenizer at ``source`` (local folder or cached hub id), or None where unreadable."""
    try:
        from transformers import AutoTokenizer
    except ImportError:  # pragma: no cover - transformers comes with the llm extra
        return None
    local = Path(source).expanduser().exists()
    try:
        return AutoTokenizer.from_pretrained(source, local_files_only=not (explicit or local))
    except Exception as err:  # noqa: BLE001 - any failure means: no tokenizer here
        if explicit:
            raise ConfigError(
                f"--tokenizer {source}: cannot be read ({_one_line(str(err))})"
            ) from err
        return None


def _stop_ids(tokenizer: Any) -> list[int]:
    from dprm.llm.generator_base import stop_token_ids

    return [] if tokenizer is None else stop_token_ids(tokenizer)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _server_message(response: Any) -> str:
    """The server's error message (OpenAI's ``{"error": {"message": ...}}`` or the body)."""
    try:
        payload = response.json()
        error = payload.get("error", payload) if isinstance(payload, dict) else payload
        message = error.get("message", error) if isinstance(error, dict) else error
        text = str(message)
    except ValueError:
        text = response.text
    return _one_line(text)[:300] or response.reason_phrase


def _retry_after(response: Any) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: use our own backoff
