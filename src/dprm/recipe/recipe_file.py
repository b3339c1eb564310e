"""Reading a recipe file: UTF-8 TOML, and its input paths resolved against the recipe's folder.

Errors are one :class:`dprm.config.ConfigError` line naming the file; the tables are checked by
:func:`dprm.recipe.spec.recipe_from_dict`.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from dprm.config import ConfigError
from dprm.recipe.sections import SPLITS
from dprm.textfiles import TextError, decode_utf8

#: the prefix of a path inside the installed dprm package (``dprm:llm/worlds/arith/prm``)
PACKAGE_PREFIX = "dprm:"
#: a value that names a file or folder whatever exists: ``./x``, ``../x``, ``/x``, ``~/x``, ``x.jsonl``
_PATH_LIKE = re.compile(r"^(\.{1,2}/|/|~)|\.(jsonl|json|parquet|csv)$")


def _resolve(value: str, base: Path) -> str:
    """A recipe value that is a path, made absolute against the recipe's folder; else itself.

    Question sets, Park's labels and models are names (``math500``, a hub id) or paths. A value
    is a path when it looks like one (:data:`_PATH_LIKE`) or names something next to the recipe;
    the working directory is never looked at (a folder of the same name there is a decoy). A
    package reference (``dprm:llm/worlds/arith/generator``) names a file shipped with dprm, so
    a recipe copied anywhere still finds it (:func:`package_path`).
    """
    if not isinstance(value, str) or not value:
        return value
    if value.startswith(PACKAGE_PREFIX):
        return str(package_path(value))
    expanded = Path(value).expanduser()
    if expanded.is_absolute():
        return str(expanded)
    if _PATH_LIKE.search(value) or (base / value).exists():
        return str((base / value).resolve())
    return value


def resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """The parsed recipe with every input path resolved against ``base`` (the recipe's folder):
    question files, ``[data] park`` and the models of ``[[generators]]`` / ``[[prms]]``."""
    data = dict(data)
    if isinstance(data.get("questions"), dict):
        questions = dict(data["questions"])
        for split in SPLITS:
            if isinstance(questions.get(split), list):
                questions[split] = [_resolve(v, base) for v in questions[split]]
        data["questions"] = questions
    if isinstance(data.get("data"), dict) and "park" in data["data"]:
        data["data"] = dict(data["data"]) | {"park": _resolve(data["data"]["park"], base)}
    for name in ("generators", "prms"):
        if isinstance(data.get(name), list):
            data[name] = [
                dict(t) | {"model": _resolve(t["model"], base)}
                if isinstance(t, dict) and "model" in t
                else t
                for t in data[name]
            ]
    return data


def package_path(value: str) -> Path:
    """The file or folder a package reference ``dprm:RELATIVE`` names inside the installed dprm.

    Raises:
        ConfigError: nothing shipped with dprm has that name.
    """
    from importlib import resources

    relative = value.removeprefix(PACKAGE_PREFIX).strip("/")
    path = Path(str(resources.files("dprm"))) / relative
    if not relative or ".." in Path(relative).parts or not path.exists():
        raise ConfigError(
            f"{value!r}: no such file or folder in the installed dprm package ({path}); a package "
            f"reference is {PACKAGE_PREFIX}PATH with PATH relative to the dprm package"
        )
    return path


def read_recipe_file(path: Path) -> dict[str, Any]:
    """Parse a recipe file (TOML is UTF-8 whatever the locale); errors are one line naming it."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: recipe file not found") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the recipe file ({err.strerror})") from None
    try:
        text = decode_utf8(raw, "recipe file")
    except TextError as err:
        raise ConfigError(f"{path}: {err}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None
