"""Config dataclasses loaded from TOML, with ``key=value`` overrides and unknown keys rejected.

One dataclass per concern (training, synthetic worlds, IAS, ...). ``load_config`` resolves
defaults < TOML file < ``--set`` overrides and returns a frozen, fully typed instance that run
directories store as JSON.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from dprm.textfiles import TextError, decode_utf8

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file or override names an unknown key or a value of the wrong type or range."""


#: bound name -> (test, wording) of the numeric ranges :func:`in_range` declares
_BOUNDS = {
    "ge": (lambda v, b: v >= b, ">="),
    "gt": (lambda v, b: v > b, ">"),
    "le": (lambda v, b: v <= b, "<="),
    "lt": (lambda v, b: v < b, "<"),
}


def in_range(default: Any, **bounds: float) -> Any:
    """A dataclass field with a declared numeric range, checked when a config is parsed.

    Example: ``max_steps: int = in_range(1000, ge=1)``; ``alpha: float = in_range(0.1, gt=0,
    lt=1)``. For a tuple field every element must lie in the range. The range lives in the
    field's metadata, so subclasses inherit it and :func:`from_dict` checks every config
    dataclass the same way.

    Args:
        default: the field's default (a tuple is fine: fields are frozen values here).
        bounds: any of ``ge``, ``gt``, ``le``, ``lt``.
    """
    unknown = sorted(set(bounds) - set(_BOUNDS))
    if unknown:
        raise TypeError(f"in_range: unknown bound(s) {unknown}; use {sorted(_BOUNDS)}")
    return dataclasses.field(default=default, metadata={"range": dict(bounds)})


def check_range(field: dataclasses.Field, value: Any, source: str) -> None:
    """Raise :class:`ConfigError` naming the key if ``value`` is outside ``field``'s range."""
    bounds = field.metadata.get("range")
    if not bounds or value is None:
        return
    for item in value if isinstance(value, list | tuple) else (value,):
        for name, bound in bounds.items():
            test, wording = _BOUNDS[name]
            if not (isinstance(item, int | float) and test(item, bound)):
                raise ConfigError(
                    f"{source}: {field.name} = {value!r} is out of range: expected {wording} {bound}"
                )


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        if isinstance(value, str) and value.lower() in ("none", "null") and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError("; ".join(errors))
    if origin in (tuple, list):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        inner = args[0] if args else Any
        items = [_coerce(v, inner, key) for v in value]
        return tuple(items) if origin is tuple else items
    if annotation is Any:
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if annotation is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return int(value)  # exact for large integers (seeds), unlike a float round trip
        try:
            as_float = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        if not math.isfinite(as_float) or as_float != int(as_float):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return int(as_float)
    if annotation is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
    if annotation is str:
        return str(value)
    return value


def from_dict(cls: type[T], values: dict[str, Any], *, source: str = "config") -> T:
    """Build ``cls`` from a flat dict, rejecting keys the dataclass does not have."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"{source}: unknown key(s) {unknown} for {cls.__name__}; known keys: {sorted(fields)}"
        )
    kwargs = {}
    for key, value in values.items():
        try:
            kwargs[key] = _coerce(value, hints[key], key)
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None
        check_range(fields[key], kwargs[key], source)
    return cls(**kwargs)


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """Turn ``["lr=1e-3", "hidden=64,64"]`` into a dict; values are typed later by the dataclass."""
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def read_toml(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """Parse a TOML file; a missing or malformed file is a :class:`ConfigError` naming it."""
    path = Path(path)
    try:
        return tomllib.loads(decode_utf8(path.read_bytes(), what))
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: {what} is a directory, expected a TOML file") from None
    except TextError as err:
        raise ConfigError(f"{path}: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None


def load_config(
    cls: type[T],
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    *,
    table: str | None = None,
    base: dict[str, Any] | None = None,
) -> T:
    """Resolve ``cls`` from defaults, an optional ``base`` dict, a TOML file and overrides.

    Args:
        cls: the config dataclass.
        path: optional TOML file; if ``table`` is given and the file has that table, only that
            table is read (so one file can hold several concerns).
        overrides: ``key=value`` overrides (strings are coerced to the field types).
        table: TOML table name for this concern.
        base: method-specific defaults applied before the file.
    """
    values: dict[str, Any] = dict(base or {})
    source = "defaults"
    if path is not None:
        path = Path(path)
        data = read_toml(path)
        if table is not None and isinstance(data.get(table), dict):
            data = data[table]
        values.update(data)
        source = str(path)
    if overrides:
        values.update(overrides)
        source = f"{source} + --set"
    return from_dict(cls, values, source=source)


def to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a config dataclass (tuples become lists)."""
    return json_ready(dataclasses.asdict(config))


def json_ready(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_ready(v) for v in obj]
    return obj
