"""The settings of a ``dprm serve`` process: input limits and the micro-batch window."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dprm.config import ConfigError


@dataclass(frozen=True)
class ServeSettings:
    """Limits every request is checked against, and how requests are batched.

    Attributes:
        max_batch: scoring requests gathered into one PRM forward (1: one request at a time).
        batch_wait_ms: how long the first request of a batch waits for others to join.
        max_solutions: solutions (step lists) in one ``/v1/score`` request.
        max_steps: steps in one solution.
        max_chars: characters in one text (a question or a step).
        max_request_chars: characters of text in one request, all texts together.
        max_levels: quantile levels asked for in one request.
        max_questions: questions in one ``/v1/allocate`` request.
        max_draws: draws of one question in one ``/v1/allocate`` request.
        max_body_bytes: the largest request body (413 beyond).
        max_queue: requests waiting for the models before new ones get 503.
    """

    max_batch: int = 16
    batch_wait_ms: float = 5.0
    max_solutions: int = 64
    max_steps: int = 64
    max_chars: int = 8192
    max_request_chars: int = 262144
    max_levels: int = 101
    max_questions: int = 64
    max_draws: int = 256
    max_body_bytes: int = 4 * 1024 * 1024
    max_queue: int = 1024

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "batch_wait_ms":
                if not 0 <= value <= 10_000:
                    raise ConfigError(f"batch_wait_ms: expected 0..10000, found {value}")
            elif not isinstance(value, int) or value < 1:
                raise ConfigError(f"{field.name}: expected a positive integer, found {value!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
