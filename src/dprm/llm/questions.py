"""Question sets: load MATH-500, the MATH test set (and Park's every-10th subset), AIME 2024/2025.

Every loader returns one normalised table with columns ``question_id`` (string, unique),
``question`` (the problem text) and ``answer`` (the gold final answer as LaTeX text). When a
source has no answer field, the gold answer is the last ``\\boxed{...}`` (brace-matched) of its
``solution``. Local files (JSONL, JSON list, parquet) are recognised by their columns:

============  =====================================================  ==========================
source        columns                                                question_id
============  =====================================================  ==========================
MATH-500      problem, solution, answer, subject, level, unique_id    ``unique_id``
MATH test     problem, level, type, solution, idx                     ``math/{idx}``
AIME 2024     id, problem, solution, answer, url, question            ``aime24/{id}``
AIME 2025     problem, answer                                         ``aime25/{row}``
other         question|problem, answer|solution, [question_id|id]     given id or ``{stem}/{row}``
============  =====================================================  ==========================

Park et al.'s ``math500`` set is *not* MATH-500: it is every 10th row of the 5000-problem MATH
test split (``every=10``, rows 0, 10, 20, ...). Which rows that picks depends on the row order;
``math.jsonl`` is in the order of ``hendrycks/competition_math`` (``idx`` 0..4999).

Named sets (:data:`NAMED_SETS`) are read from the copies packaged with dprm
(``dprm/llm/question_sets/*.jsonl.gz``, provenance and licences in ``PROVENANCE.md`` there), so
they need no network; ``hub=True`` (``--hub``) loads them from the Hugging Face hub instead
(:data:`HUB_SOURCES`). ``math500train`` (Park et al.'s calibration set: every 15th row of the
7,500-row MATH train split, 500 questions) is not packaged and always comes from the hub, with
Park's fallback to the seven ``EleutherAI/hendrycks_math`` subjects in alphabetical order.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from importlib import resources
from pathlib import Path

import pandas as pd

from dprm.io import DataError, atomic_path
from dprm.textfiles import TextError, decode_utf8, parse_json

QUESTION_COLUMNS = ("question_id", "question", "answer")
#: the longest question text accepted, in characters: about 25,000 tokens, more than any
#: benchmark question (MATH's and AIME's are under 5,000 characters) and more than the context
#: the generators dprm drives leave for an answer; a longer one would be cut to nothing
MAX_QUESTION_CHARS = 100_000
PARK_MATH_STRIDE = 10
PARK_TRAIN_STRIDE = 15
PARK_TRAIN_ROWS = 7500

# name -> list of (hub id, config, split); several entries are concatenated in order.
HUB_SOURCES: dict[str, list[tuple[str, str | None, str]]] = {
    "math500": [("HuggingFaceH4/MATH-500", None, "test")],
    "math": [("hendrycks/competition_math", None, "test")],
    "math-train": [("hendrycks/competition_math", None, "train")],
    "aime24": [("HuggingFaceH4/aime_2024", None, "train")],
    "aime25": [
        ("opencompass/AIME2025", "AIME2025-I", "test"),
        ("opencompass/AIME2025", "AIME2025-II", "test"),
    ],
}
MATH_SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
# Park's fallback when hendrycks/competition_math is gone: the 7 subjects, alphabetical.
HUB_FALLBACKS: dict[str, list[tuple[str, str | None, str]]] = {
    name: [("EleutherAI/hendrycks_math", subject, split) for subject in MATH_SUBJECTS]
    for name, split in (("math", "test"), ("math-train", "train"))
}
# aliases -> (set name, stride); a set name with a packaged copy is read offline
NAMED_SETS = {
    "math500": ("math500", 1),
    "math": ("math", 1),
    "math-park": ("math", PARK_MATH_STRIDE),
    "math500train": ("math-train", PARK_TRAIN_STRIDE),
    "aime24": ("aime24", 1),
    "aime2024": ("aime24", 1),
    "aime25": ("aime25", 1),
    "aime2025": ("aime25", 1),
    "arith-train": ("arith-train", 1),
    "arith-id": ("arith-id", 1),
    "arith-ood": ("arith-ood", 1),
    "arith-id2": ("arith-id2", 1),
    "arith-ood2": ("arith-ood2", 1),
}
#: the arithmetic world's sets (dprm.llm.tasks.arith_sets) are generated, not downloaded
PACKAGED_SETS = (
    "math500", "math", "aime24", "aime25",
    "arith-train", "arith-id", "arith-ood", "arith-id2", "arith-ood2",
)  # fmt: skip
#: rows the hub copy must have (Park's assertion for the MATH train split)
EXPECTED_ROWS = {"math-train": PARK_TRAIN_ROWS}


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, brace-matched.

    Also accepts ``\\boxed 5`` (no braces: the next word). Returns None when there is none.
    """
    starts = sorted(
        (m.start(), m.end()) for m in re.finditer(r"\\(?:boxed|fbox)(?![a-zA-Z])", text)
    )
    for start, pos in reversed(starts):
        while pos < len(text) and text[pos] == " ":
            pos += 1
        if pos < len(text) and text[pos] == "{":
            content = _braced(text, pos)
        elif pos > start and pos < len(text):
            words = text[pos:].split("$")[0].split()
            content = words[0] if words else None
        else:
            content = None
        if content is not None:
            return content
    return None


def _braced(text: str, open_at: int) -> str | None:
    depth = 0
    for pos in range(open_at, len(text)):
        char = text[pos]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : pos]
    return None


def read_records(path: str | os.PathLike) -> list[dict]:
    """Rows of a JSONL file, a JSON list, or a parquet file."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "file not found (expected questions as .jsonl, .json or .parquet)")
    if path.suffix == ".parquet":
        return pd.read_parquet(path).to_dict("records")
    try:
        raw = path.read_bytes()
        text = decode_utf8(gzip.decompress(raw) if path.suffix == ".gz" else raw)
        if path.suffix == ".json" or text.lstrip().startswith("["):
            data = parse_json(text)
            if not isinstance(data, list):
                raise DataError(path, "expected a JSON list of question objects")
            return data
    except TextError as err:
        raise DataError(path, str(err)) from None
    except (gzip.BadGzipFile, EOFError) as err:  # not gzip, or truncated
        raise DataError(path, f"not a readable gzip file ({err})") from None
    rows = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(parse_json(line))
        except TextError as err:
            raise DataError(path, f"line {line_no}: {err}") from None
    return rows


def normalise(
    rows: list[dict], source: str | os.PathLike, id_prefix: str | None = None
) -> pd.DataFrame:
    """Turn raw rows of any supported layout into ``question_id, question, answer``.

    Args:
        rows: raw records.
        source: file or dataset name (for error messages and the default id prefix).
        id_prefix: prefix of generated ids; default: the file stem (``aime25/{row}``).

    Raises:
        DataError: a row lacks a question, or has neither an answer nor a boxed solution.
    """
    prefix = id_prefix or Path(str(source)).stem
    out = []
    for row_no, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(
                source, f"row {row_no}: expected a JSON object, found {type(row).__name__}"
            )
        question = row.get("problem", row.get("question"))
        if not isinstance(question, str) or not question.strip():
            raise DataError(
                source, f"row {row_no}: expected a non-empty 'problem' or 'question' string"
            )
        answer = row.get("answer", row.get("gold_answer"))
        if answer is None or (isinstance(answer, float) and pd.isna(answer)):
            solution = row.get("solution")
            answer = extract_boxed(solution) if isinstance(solution, str) else None
            if answer is None:
                raise DataError(
                    source,
                    f"row {row_no}: no 'answer' field and no \\boxed{{}} answer in 'solution'",
                )
        out.append(
            {
                "question_id": _question_id(row, row_no, prefix),
                "question": question,
                "answer": str(answer).strip(),
                **{k: str(row[k]) for k in ("subject", "type", "level") if row.get(k) is not None},
            }
        )
    frame = pd.DataFrame(out)
    if frame.empty:
        raise DataError(source, "holds no questions")
    check_question_lengths(frame, source)
    dup = frame["question_id"].duplicated()
    if dup.any():
        row_no = int(dup.to_numpy().nonzero()[0][0])
        raise DataError(
            source, f"row {row_no}: duplicate question_id {frame['question_id'][row_no]!r}"
        )
    return frame


def check_question_lengths(frame: pd.DataFrame, source: str | os.PathLike) -> None:
    """Refuse a question longer than :data:`MAX_QUESTION_CHARS` (one line naming the row):
    it would silently yield empty answers once the prompt is cut to the model's context."""
    lengths = frame["question"].str.len()
    too_long = (lengths > MAX_QUESTION_CHARS).to_numpy().nonzero()[0]
    if len(too_long):
        row_no = int(too_long[0])
        raise DataError(
            source,
            f"row {row_no} (question_id {frame['question_id'].iloc[row_no]!r}): the question has "
            f"{int(lengths.iloc[row_no]):,} characters, more than the {MAX_QUESTION_CHARS:,} "
            "dprm accepts (no model's context would leave room for an answer)",
        )


def _question_id(row: dict, row_no: int, prefix: str) -> str:
    for key in ("question_id", "unique_id"):
        if row.get(key) is not None:
            return str(row[key])
    for key in ("idx", "id"):
        if row.get(key) is not None:
            return f"{prefix}/{row[key]}"
    return f"{prefix}/{row_no}"


def _default_prefix(path: Path) -> str:
    stem = path.name.lower().split(".")[0]
    return {"math": "math", "aime24": "aime24", "aime25": "aime25"}.get(stem, stem)


def packaged_path(name: str) -> Path:
    """The packaged copy of a named set (``math500``, ``math``, ``aime24``, ``aime25``)."""
    if name not in PACKAGED_SETS:
        raise DataError(name, f"no packaged copy; packaged sets are {list(PACKAGED_SETS)}")
    return Path(str(resources.files("dprm.llm") / "question_sets" / f"{name}.jsonl.gz"))


def load_questions(
    source: str | os.PathLike,
    *,
    every: int = 1,
    offset: int = 0,
    limit: int | None = None,
    id_prefix: str | None = None,
    hub: bool = False,
) -> pd.DataFrame:
    """Load and normalise a question set from a local file or a known name.

    Args:
        source: a path (``.jsonl``/``.jsonl.gz``/``.json``/``.parquet``) or one of
            :data:`NAMED_SETS` (``math500``, ``math``, ``math-park``, ``aime24``, ``aime25``:
            packaged, offline; ``math500train``: hub only).
        every: keep every ``every``-th row starting at ``offset`` (Park's MATH subset: 10).
            ``math-park`` implies ``every=10``.
        offset: first row kept.
        limit: keep at most this many questions (after striding).
        id_prefix: prefix for generated question ids.
        hub: read a named set from the hub even when a packaged copy exists.

    Returns:
        DataFrame with ``question_id, question, answer`` (+ ``subject``/``type``/``level`` when
        the source has them), in source order.
    """
    path = Path(source)
    if path.exists():
        frame = normalise(read_records(path), path, id_prefix or _default_prefix(path))
    elif str(source) in NAMED_SETS:
        name, stride = NAMED_SETS[str(source)]
        every = every if every != 1 else stride
        if name in PACKAGED_SETS and not hub:
            rows = read_records(packaged_path(name))
        else:
            rows = load_hub_rows(name, label=str(source))
        frame = normalise(rows, str(source), id_prefix or name)
    else:
        raise DataError(
            path,
            f"not found; expected a question file or one of {sorted(NAMED_SETS)}",
        )
    if every < 1 or offset < 0:
        raise ValueError(f"every={every}, offset={offset}: expected every >= 1 and offset >= 0")
    frame = frame.iloc[offset::every]
    if limit is not None:
        frame = frame.iloc[:limit]
    return frame.reset_index(drop=True)


_OFFLINE_HELP = (
    "without a hub: on a machine that has one, run `dprm questions {name} --out q.jsonl` (or "
    "export the dataset to JSONL yourself) and pass that file here instead of the name"
)


def load_hub_rows(name: str, label: str | None = None) -> list[dict]:
    """Raw rows of a named set from the Hugging Face hub (needs ``datasets`` and network).

    Park's rules: the MATH splits fall back to the seven ``EleutherAI/hendrycks_math`` subjects
    concatenated in alphabetical order when ``hendrycks/competition_math`` fails to load; the
    train split must have 7,500 rows. Rows get ``idx`` = their position (the id Park's stride
    selects by). ``label``: the name the user gave (``math500train`` for ``math-train``), used
    in error messages.
    """
    label = label or name
    try:
        import datasets
    except ImportError as err:
        raise DataError(
            label,
            f"loading from the hub needs the 'datasets' package (pip install 'dprm[llm]') and "
            f"network; {_OFFLINE_HELP.format(name=label)}",
        ) from err
    specs = HUB_SOURCES[name]
    try:
        parts = [
            datasets.load_dataset(hub_id, config, split=split) for hub_id, config, split in specs
        ]
    except Exception as err:  # noqa: BLE001 - hub errors come in many types
        if name not in HUB_FALLBACKS:
            raise DataError(
                label,
                f"could not load {specs} from the hub ({err}); {_OFFLINE_HELP.format(name=label)}",
            ) from err
        try:
            parts = [datasets.load_dataset(h, c, split=s) for h, c, s in HUB_FALLBACKS[name]]
        except Exception as fallback_err:  # noqa: BLE001
            raise DataError(
                label,
                f"could not load {specs} ({err}) nor the fallback EleutherAI/hendrycks_math "
                f"({fallback_err}); {_OFFLINE_HELP.format(name=label)}",
            ) from fallback_err
    rows: list[dict] = []
    for part in parts:
        rows.extend(dict(r) for r in part)
    expected = EXPECTED_ROWS.get(name)
    if expected is not None and len(rows) != expected:
        raise DataError(label, f"the hub returned {len(rows)} rows; expected {expected}")
    if name in HUB_FALLBACKS:
        for i, row in enumerate(rows):
            row.setdefault("idx", i)
    return rows


def write_questions(path: str | os.PathLike, frame: pd.DataFrame) -> Path:
    """Write normalised questions atomically as JSONL (``.jsonl``) or parquet (``.parquet``)."""
    path = Path(path)
    missing = [c for c in QUESTION_COLUMNS if c not in frame.columns]
    if missing:
        raise DataError(path, f"missing column(s) {missing}; expected {list(QUESTION_COLUMNS)}")
    with atomic_path(path) as tmp:
        if path.suffix == ".parquet":
            frame.to_parquet(tmp, index=False)
        else:
            with open(tmp, "w", encoding="utf-8") as handle:
                for row in frame.to_dict("records"):
                    handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def read_questions(path: str | os.PathLike) -> pd.DataFrame:
    """Read a normalised (or raw) question file; raw layouts are normalised on the fly."""
    path = Path(path)
    rows = read_records(path)
    if rows and all(k in rows[0] for k in QUESTION_COLUMNS):
        frame = pd.DataFrame(rows)
        for col in QUESTION_COLUMNS:
            bad = frame[col].map(lambda v: not isinstance(v, str))
            if bad.any():
                row_no = int(bad.to_numpy().nonzero()[0][0])
                raise DataError(path, f"column '{col}' row {row_no}: expected a string")
        check_question_lengths(frame, path)
        return frame
    return normalise(rows, path, _default_prefix(path))
