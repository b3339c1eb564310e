"""Text inputs read safely: UTF-8 decoding and JSON parsing with stated limits.

Every reader of a user's text file (JSON and JSON lines, TOML configs and recipes) decodes and
parses through here, so a file in another encoding, a byte-order mark, nesting too deep for the
parser, a number too long to convert or a string that is not Unicode is one sentence (a
:class:`TextError`), never a traceback. The callers add the file's name (``DataError`` /
``ConfigError``), which this bottom-layer module cannot import.

Limits, stated once:

* **Encoding**: UTF-8, whatever the locale (``LANG=C`` included); a leading UTF-8 byte-order
  mark (written by some Windows editors) is accepted and dropped.
* **Depth**: at most :data:`JSON_MAX_DEPTH` nested arrays / objects (dprm's records are two or
  three deep; Python's parser itself overflows its stack near 1,000).
* **Numbers**: integers of at most :data:`JSON_MAX_DIGITS` digits (Python's own conversion
  limit, named here rather than in its traceback).
* **Strings**: valid Unicode; a lone surrogate escape (``"\\ud800"``) cannot be written to
  parquet or printed, so it is refused where it is read.
"""

from __future__ import annotations

import json
from typing import Any

#: the deepest nesting of JSON arrays and objects a file may have
JSON_MAX_DEPTH = 100
#: the most digits an integer in a JSON file may have (Python's int conversion limit)
JSON_MAX_DIGITS = 4300
_BOM = b"\xef\xbb\xbf"


class TextError(ValueError):
    """A text file that cannot be read as what it should be (the message names no file)."""


def decode_utf8(raw: bytes, what: str = "file") -> str:
    """The text of a file's bytes, read as UTF-8 (a leading byte-order mark dropped).

    Raises:
        TextError: bytes that are not UTF-8, naming the first bad byte and its offset.
    """
    start = len(_BOM) if raw.startswith(_BOM) else 0
    try:
        return raw[start:].decode("utf-8")
    except UnicodeDecodeError as err:
        offset = start + err.start
        raise TextError(
            f"{what} is not UTF-8 text (byte 0x{raw[offset]:02x} at offset {offset}; another "
            "encoding such as Latin-1?): save it as UTF-8"
        ) from None


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > JSON_MAX_DIGITS:
        raise TextError(f"an integer with {digits} digits (at most {JSON_MAX_DIGITS})")
    return int(text)


def parse_json(text: str | bytes) -> Any:
    """Parse JSON text (bytes are decoded by :func:`decode_utf8`) within the module's limits.

    Raises:
        TextError: not valid JSON (with line and column), nested deeper than
            :data:`JSON_MAX_DEPTH`, an integer longer than :data:`JSON_MAX_DIGITS` digits, a
            string holding a lone surrogate.
    """
    if isinstance(text, bytes):
        text = decode_utf8(text)
    text = text.removeprefix("\ufeff")
    try:
        data = json.loads(text, parse_int=_int)
    except json.JSONDecodeError as err:
        raise TextError(f"not valid JSON ({err})") from None
    except RecursionError:
        raise TextError(f"not readable JSON: nested deeper than {JSON_MAX_DEPTH} levels") from None
    except TextError as err:
        raise TextError(f"not readable JSON: {err}") from None
    _check_tree(data, surrogates="\\u" in text or "\\U" in text)
    return data


def _check_tree(data: Any, surrogates: bool) -> None:
    """Depth and (when the text had ``\\u`` escapes, the only way to write one) lone surrogates,
    without recursion."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > JSON_MAX_DEPTH:
                raise TextError(f"not readable JSON: nested deeper than {JSON_MAX_DEPTH} levels")
            items = list(node.items()) if isinstance(node, dict) else node
            for item in items:
                if isinstance(item, tuple):  # a key and its value
                    if surrogates:
                        stack.append((item[0], depth))
                    item = item[1]
                if isinstance(item, dict | list) or (surrogates and isinstance(item, str)):
                    stack.append((item, depth + 1))
        elif isinstance(node, str) and surrogates and not node.isascii():
            try:
                node.encode("utf-8")
            except UnicodeEncodeError as err:
                code = ord(node[err.start])
                raise TextError(
                    f"not readable JSON: a string holds a lone surrogate (\\u{code:04x}), "
                    f"which is not Unicode text: {node[: err.start][-40:]!r}..."
                ) from None
