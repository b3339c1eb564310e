"""A fake OpenAI-compatible completions server on 127.0.0.1 for the ``--backend openai`` tests.

It answers ``POST /v1/completions`` deterministically: choice ``j`` of a request is a function of
(prompt, seed, j) only, so two runs that send the same requests get the same answers. Every
request body is recorded; faults are injected from a queue (``"429"``, ``"500"``, ``"503"``,
``"400"``: that status; ``"drop"``: the connection closed without an answer; ``"ok"``: a normal
answer), one per request,
before the normal answers resume. ``GET /v1/models`` lists the one served model with its
``max_model_len``, as vLLM does. The peak number of requests open at once is kept.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: the answer a fake sample gives (``{answer}`` from the hash of prompt, seed and index)
TEXT = "## Step 1: Add.\n\nsample {index}\n\nTherefore, the final answer is: $\\boxed{{{answer}}}$."


class FakeOpenAIServer:
    """``with FakeOpenAIServer(model) as server``: ``server.base_url`` is ``http://.../v1``.

    Args:
        model: the served model's name.
        max_model_len: the context limit ``/v1/models`` reports (None: left out).
        delay_s: seconds each completion takes (to see requests overlap).
        answers: the boxed answers a sample draws from.
    """

    def __init__(
        self,
        model: str,
        max_model_len: int | None = 512,
        delay_s: float = 0.0,
        answers: tuple[str, ...] = ("7", "6", "8"),
    ):
        self.model, self.max_model_len, self.delay_s, self.answers = (
            model,
            max_model_len,
            delay_s,
            answers,
        )
        self.bodies: list[dict] = []  # every completions body received (faulted ones included)
        self.answered: list[dict] = []  # the bodies answered with 200
        self.headers: list[dict] = []
        self.faults: deque[str] = deque()
        self.open_now = 0
        self.peak_open = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def completion(self, body: dict) -> dict:
        """The deterministic answer to a completions body."""
        choices = []
        for j in range(int(body.get("n", 1))):
            digest = hashlib.sha256(f"{body['prompt']}|{body.get('seed')}|{j}".encode()).digest()
            answer = self.answers[digest[0] % len(self.answers)]
            text = TEXT.format(index=j, answer=answer)
            n_tokens = 5 + digest[1] % 20
            limit = int(body.get("max_tokens") or 16)
            finish = "length" if n_tokens >= limit else "stop"
            n_tokens = min(n_tokens, limit)
            logprobs = None
            if body.get("logprobs") is not None:
                logprobs = {
                    "tokens": [f"t{k}" for k in range(n_tokens)],
                    "token_logprobs": [-0.5] * n_tokens,
                    "top_logprobs": None,
                    "text_offset": list(range(n_tokens)),
                }
            choices.append(
                {"index": j, "text": text, "finish_reason": finish, "logprobs": logprobs}
            )
        total = sum(len(c["logprobs"]["tokens"]) if c["logprobs"] else 0 for c in choices)
        return {
            "id": "cmpl-fake",
            "object": "text_completion",
            "model": body.get("model"),
            "choices": list(reversed(choices)),  # the client must order them by index
            "usage": {"prompt_tokens": 1, "completion_tokens": total, "total_tokens": total + 1},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _reply(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path != "/v1/models":
                    self._reply(404, {"error": {"message": f"no route {self.path}"}})
                    return
                entry: dict = {"id": fake.model, "object": "model"}
                if fake.max_model_len is not None:
                    entry["max_model_len"] = fake.max_model_len
                self._reply(200, {"object": "list", "data": [entry]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake._lock:
                    fake.bodies.append(body)
                    fake.headers.append(dict(self.headers))
                    fault = fake.faults.popleft() if fake.faults else None
                    fake.open_now += 1
                    fake.peak_open = max(fake.peak_open, fake.open_now)
                try:
                    if fault == "drop":
                        self.close_connection = True
                        self.connection.shutdown(2)  # no answer at all
                        return
                    if fault is not None and fault != "ok":
                        self._reply(int(fault), {"error": {"message": f"injected {fault}"}})
                        return
                    if self.path != "/v1/completions":
                        self._reply(404, {"error": {"message": f"no route {self.path}"}})
                        return
                    if body.get("model") != fake.model:
                        self._reply(404, {"error": {"message": f"model {body.get('model')}"}})
                        return
                    time.sleep(fake.delay_s)
                    with fake._lock:
                        fake.answered.append(body)
                    self._reply(200, fake.completion(body))
                finally:
                    with fake._lock:
                        fake.open_now -= 1

        return Handler
