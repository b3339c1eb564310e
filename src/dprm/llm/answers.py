"""Canonical final answers of responses, for answer-level selection rules (BoN contract v2).

Weighted best-of-N and majority vote group candidates by their final answer, so two responses
that state the same answer must carry the same string. The grader (math-verify) decides
*correctness* against the gold answer; this module only names the answer a response commits
to: the content of its last ``\\boxed{...}`` (math-verify's own priority), else its last
``$...$`` span, else its last number, reduced to a canonical spelling (no whitespace, ``\\left``
/ ``\\right`` / ``\\!`` / ``\\,`` dropped, ``\\dfrac`` / ``\\tfrac`` -> ``\\frac``, a trailing
period dropped, a number written as plain decimal, ``x=`` prefixes dropped). Responses with no
recognisable answer get ``""`` (each such response counts as its own, distinct non-answer).
"""

from __future__ import annotations

import re

_NUMBER_RE = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")
_DOLLAR_RE = re.compile(r"\$([^$]+)\$")


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (brace-balanced), or None."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def normalise_answer(answer: str) -> str:
    """Canonical spelling of an answer string (see the module docstring)."""
    s = answer.strip()
    for token in ("\\left", "\\right", "\\!", "\\,", "\\;", "\\ ", "$"):
        s = s.replace(token, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\\text\{\s*([^{}]*)\}", r"\1", s)
    s = re.sub(r"\s+", "", s).rstrip(".")
    s = re.sub(r"^[a-zA-Z]=", "", s)
    if _NUMBER_RE.fullmatch(s):
        value = float(s.replace(",", ""))
        s = str(int(value)) if value.is_integer() else repr(value)
    return s


def canonical_answer(response: str) -> str:
    """The canonical final answer a response commits to ("" when it states none)."""
    text = str(response)
    found = _last_boxed(text)
    if found is None:
        spans = _DOLLAR_RE.findall(text)
        found = spans[-1] if spans else None
    if found is None:
        numbers = _NUMBER_RE.findall(text)
        found = numbers[-1] if numbers else ""
    return normalise_answer(found)
