"""Multi-step arithmetic word problems: a procedurally generated task with exact step checks.

A problem tracks one quantity through ``steps`` operations (``+``, ``-``, ``*``) starting from
a number of ``digits`` digits; each operation is one sentence of the question and one step of
the solution. Solutions follow the ``"\\n\\n"``-separated step format of
:mod:`dprm.llm.prompts`::

    ## Step 1: 47 + 38 = 85

    ## Step 2: 85 - 19 = 66

    Therefore, the final answer is: $\\boxed{66}$. I hope it is correct.

Knobs (:class:`ArithSpec`): the number of operations (``min_steps`` .. ``max_steps``), the
digits of every operand (``digits``, or per question one of ``digits`` .. ``max_digits``; a
``*`` operand is one digit, 2..9), and the allowed operations (``+`` or ``*`` among them). A ``-`` never takes the quantity below zero. Questions are drawn from a
:class:`random.Random` seeded by ``(seed, index)``, so a set is deterministic by its seed and
its i-th question does not depend on how many are drawn.

Each step's true value is known (:func:`step_values`), so a written solution can be checked
step by step (:func:`check_steps`): the first step whose stated result differs from the true
running value (or whose operation differs from the question's) is the first error.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

OPERATIONS = ("+", "-", "*")
NAMES = ("Ann", "Ben", "Cara", "Dan", "Eva", "Finn", "Gus", "Hana", "Ivo", "Jill")
ITEMS = ("apples", "coins", "stamps", "marbles", "books", "shells", "cards", "beads")
#: the sentence of each operation: (template, ...) with {name}, {x}, {items}
SENTENCES = {
    "+": ("{name} gets {x} more.", "{name} buys {x} more.", "{name} finds {x} more."),
    "-": ("{name} gives away {x}.", "{name} loses {x}.", "{name} sells {x}."),
    "*": ("{name} ends up with {x} times as many.", "The {items} are multiplied by {x}."),
}
FINAL_TEMPLATE = "Therefore, the final answer is: $\\boxed{{{answer}}}$. I hope it is correct."
_STEP_RE = re.compile(r"^## Step (\d+): (\d+) ([+\-*]) (\d+) = (-?\d+)$")


@dataclass(frozen=True)
class ArithSpec:
    """Difficulty knobs of one question set.

    Attributes:
        min_steps: fewest operations per question (>= 1).
        max_steps: most operations per question (>= min_steps).
        digits: digits of the start value and of every ``+`` / ``-`` operand (>= 1).
        operations: the allowed operations, a subset of :data:`OPERATIONS`.
        max_digits: when set (>= digits), each question draws its operands' digits uniformly
            from ``digits`` .. ``max_digits`` (one count for the whole question), so a set
            mixes easy and hard questions.
    """

    min_steps: int = 2
    max_steps: int = 3
    digits: int = 2
    operations: tuple[str, ...] = ("+", "-")
    max_digits: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError(f"steps {self.min_steps}..{self.max_steps}: expected 1 <= min <= max")
        if self.digits < 1:
            raise ValueError(f"digits = {self.digits}: expected >= 1")
        if self.max_digits is not None and self.max_digits < self.digits:
            raise ValueError(f"max_digits = {self.max_digits}: expected >= digits ({self.digits})")
        unknown = sorted(set(self.operations) - set(OPERATIONS))
        if unknown or not set(self.operations) - {"-"}:
            raise ValueError(
                f"operations {self.operations}: expected a subset of {OPERATIONS} with + or *"
            )


#: the packaged splits: calibration (train) and ID share a distribution that mixes easy and
#: hard questions (2-4 operations; one-digit operands, or two-digit ones with carries and
#: borrows); OOD is harder (longer chains of two-digit operands, so bigger running values).
#: ``id2`` / ``ood2`` are second draws of the ID / OOD distributions (fresh questions for
#: results that must not reuse the first draws' questions)
SPLIT_SPECS = {
    "train": ArithSpec(min_steps=2, max_steps=4, digits=1, max_digits=2),
    "id": ArithSpec(min_steps=2, max_steps=4, digits=1, max_digits=2),
    "ood": ArithSpec(min_steps=5, max_steps=6, digits=2),
}
SPLIT_SPECS |= {"id2": SPLIT_SPECS["id"], "ood2": SPLIT_SPECS["ood"]}
#: seed offsets of the packaged splits, so no two splits share a question stream
SPLIT_OFFSETS = {"train": 0, "id": 1_000_000, "ood": 2_000_000, "id2": 3_000_000,
                 "ood2": 4_000_000}  # fmt: skip


@dataclass(frozen=True)
class ArithProblem:
    """One problem: its start value and operations, with the text and solution they imply."""

    name: str
    items: str
    start: int
    ops: tuple[tuple[str, int], ...]
    sentences: tuple[str, ...]

    @property
    def question(self) -> str:
        """The word problem (one sentence per operation, then the question)."""
        head = f"{self.name} has {self.start} {self.items}."
        tail = f"How many {self.items} does {self.name} have now?"
        return " ".join((head, *self.sentences, tail))

    @property
    def answer(self) -> int:
        """The true final value."""
        return step_values(self.start, self.ops)[-1]

    def solution_steps(self) -> list[str]:
        """The reference solution's steps: one per operation, then the boxed answer."""
        values = [self.start, *step_values(self.start, self.ops)]
        steps = [
            f"## Step {i + 1}: {values[i]} {op} {x} = {values[i + 1]}"
            for i, (op, x) in enumerate(self.ops)
        ]
        return [*steps, FINAL_TEMPLATE.format(answer=self.answer)]

    def solution(self) -> str:
        """The reference solution, steps joined by ``"\\n\\n"``."""
        return "\n\n".join(self.solution_steps())


def step_values(start: int, ops: tuple[tuple[str, int], ...]) -> list[int]:
    """The running value after each operation: [len(ops)]."""
    values = []
    value = start
    for op, x in ops:
        value = _apply(value, op, x)
        values.append(value)
    return values


def _apply(value: int, op: str, x: int) -> int:
    if op == "+":
        return value + x
    if op == "-":
        return value - x
    return value * x


def _operand(rng: random.Random, digits: int) -> int:
    low = 10 ** (digits - 1) if digits > 1 else 1
    return rng.randint(low, 10**digits - 1)


def make_problem(spec: ArithSpec, seed: int, index: int) -> ArithProblem:
    """The ``index``-th problem of the stream seeded by ``seed`` (independent of other indices)."""
    rng = random.Random(f"arith/{seed}/{index}")
    name = rng.choice(NAMES)
    items = rng.choice(ITEMS)
    digits = spec.digits
    if spec.max_digits is not None:  # drawn only then, so fixed-digit streams are unchanged
        digits = rng.randint(spec.digits, spec.max_digits)
    start = _operand(rng, digits)
    n_ops = rng.randint(spec.min_steps, spec.max_steps)
    ops: list[tuple[str, int]] = []
    sentences: list[str] = []
    value = start
    for _ in range(n_ops):
        choices = [op for op in spec.operations if not (op == "-" and value < 2)]
        op = rng.choice(choices)
        if op == "*":
            x = rng.randint(2, 9)
        elif op == "-":
            x = min(_operand(rng, digits), value)
        else:
            x = _operand(rng, digits)
        value = _apply(value, op, x)
        ops.append((op, x))
        sentences.append(rng.choice(SENTENCES[op]).format(name=name, x=x, items=items))
    return ArithProblem(name, items, start, tuple(ops), tuple(sentences))


def make_set(
    spec: ArithSpec, n: int, seed: int, prefix: str, exclude: frozenset[str] = frozenset()
) -> list[dict]:
    """``n`` question records (``question_id``, ``question``, ``answer``, ``solution``, knobs).

    The stream's problems are taken in order, skipping any whose question text is in
    ``exclude`` or already taken, so a set has no repeated question and none of ``exclude``
    (another split's questions); the k-th kept question does not depend on ``n``.
    """
    rows: list[dict] = []
    seen = set(exclude)
    index = -1
    while len(rows) < n:
        index += 1
        problem = make_problem(spec, seed, index)
        if problem.question in seen:
            continue
        seen.add(problem.question)
        rows.append(
            {
                "question_id": f"{prefix}/{len(rows)}",
                "question": problem.question,
                "answer": str(problem.answer),
                "solution": problem.solution(),
                "level": str(len(problem.ops)),
                "start": problem.start,
                "ops": [[op, x] for op, x in problem.ops],
            }
        )
    return rows


def parse_step(step: str) -> tuple[int, str, int, int] | None:
    """``(a, op, x, result)`` of a ``## Step k: a op x = result`` line; None if it is not one."""
    match = _STEP_RE.match(step.strip())
    if match is None:
        return None
    return int(match[2]), match[3], int(match[4]), int(match[5])


def check_steps(start: int, ops: tuple[tuple[str, int], ...], steps: list[str]) -> list[bool]:
    """Whether each step of a written solution is still on track: [len(steps)].

    Step i (an operation step) is correct when it applies the question's i-th operation to the
    true running value and states the true result; the final step is correct when its boxed
    answer is the true answer and every operation was applied. Once a step is wrong, every
    later step is wrong too (the prefix has left the solution path).
    """
    values = [start, *step_values(start, ops)]
    flags: list[bool] = []
    on_track = True
    for i, step in enumerate(steps):
        if i < len(ops):
            parsed = parse_step(step)
            ok = parsed == (values[i], ops[i][0], ops[i][1], values[i + 1])
        else:
            ok = i == len(ops) and f"\\boxed{{{values[-1]}}}" in step
        on_track = on_track and ok
        flags.append(on_track)
    return flags
