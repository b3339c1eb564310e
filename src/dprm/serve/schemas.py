"""Request and response bodies of ``dprm serve`` (pydantic; they make the OpenAPI schema).

Requests are strict: unknown fields and wrong types are refused (422), numbers are finite and
levels lie in [0, 1]. The limits that depend on the server's flags (texts, steps, solutions)
are checked by :class:`dprm.serve.service.ScoringService`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Level = Annotated[float, Field(ge=0.0, le=1.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class ScoreRequest(_Strict):
    """A question and one or more solutions, each a list of reasoning steps (plain text)."""

    question: str = Field(description="the problem text")
    solutions: list[list[str]] = Field(
        description="solutions, each its list of steps (at least one step each)"
    )
    levels: list[Level] | None = Field(
        None,
        description="quantile levels (default: the calibrator's trained levels, else "
        "0, 0.1, ..., 1)",
    )
    lower_level: Level | None = Field(
        None, description="level of the lower bound Q(lower_level) (default: the server's)"
    )


class StepScore(BaseModel):
    step: int = Field(description="1-based step number")
    prm_score: float = Field(description="the uncalibrated PRM score after this step")
    quantiles: list[float] = Field(description="Q(level | h) at each requested level")
    mean: float = Field(description="the calibrated success probability p_hat")
    lower: float = Field(description="Q(lower_level | h), the lower bound the beam rules read")


class SolutionScore(BaseModel):
    n_steps: int = Field(description="steps sent")
    truncated: bool = Field(description="cut at the PRM's token limit: later steps have no row")
    steps: list[StepScore]


class ScoreResponse(BaseModel):
    request_id: str
    levels: list[float]
    lower_level: float
    solutions: list[SolutionScore]


class DrawIn(_Strict):
    """A drawn candidate: its steps, and its final answer if the client has it."""

    steps: list[str] = Field(description="the response split into steps")
    answer: str | None = Field(
        None,
        description="canonical final answer (default: read from the last \\boxed{} of the "
        "steps, as dprm solve does)",
    )


class QuestionIn(_Strict):
    question: str
    draws: list[DrawIn] = Field(
        default_factory=list, description="the question's draws so far, in the order drawn"
    )


class AllocateRequest(_Strict):
    """Questions (one, or a batch that shares one total budget) and their draws so far."""

    questions: list[QuestionIn]
    allocation: Literal["ias", "auto", "auto-seq"] = Field(
        "ias",
        description="ias: the C rule of dprm ias per question; auto: dprm ias's auto rule "
        "(budgets fixed before sampling); auto-seq: the sequential policy of dprm solve "
        "--auto-seq, replayed on the draws sent",
    )
    C: Annotated[float, Field(gt=0.0, lt=1.0)] | None = Field(
        None, description="ias: target P(at least one correct) (default: the server's --C)"
    )


class Pick(BaseModel):
    index: int = Field(description="which draw the rule answers with (0-based)")
    prm_score: float
    answer: str


class QuantileReading(BaseModel):
    levels: list[float]
    values: list[float]


class QuestionAllocation(BaseModel):
    question_prm_score: float = Field(description="PRM score of the question alone")
    question_mean: float = Field(description="calibrated p_hat of the question alone")
    question_quantiles: QuantileReading
    budget: int | None = Field(
        description="draws this question gets (auto-seq: None until the policy stops)"
    )
    drawn: int = Field(description="draws sent")
    decision: Literal["draw", "stop", "wait"] = Field(
        description="draw: draw `draw_more` more and ask again; stop: answer with `pick`; "
        "wait (auto-seq, batches): other questions draw first"
    )
    draw_more: int
    pick: Pick | None = Field(description="the rule's pick among the draws so far")


class AllocateResponse(BaseModel):
    request_id: str
    allocation: str
    rule: str
    n_max: int
    done: bool = Field(description="every question is at decision 'stop'")
    C: float | None = None
    auto_cost: float | None = None
    floor: list[int] | None = None
    floor_share: float | None = None
    falls_back_to: str | None = None
    questions: list[QuestionAllocation]


class ErrorResponse(BaseModel):
    error: str = Field(description="one line: what was refused and why")
    request_id: str
