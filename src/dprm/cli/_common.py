"""Flag helpers shared by the subcommand modules."""

from __future__ import annotations

import argparse


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """``--config FILE.toml`` and repeatable ``--set key=value`` overrides."""
    parser.add_argument(
        "--config", metavar="FILE.toml", help="TOML config file (unknown keys are rejected)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override one config key (repeatable), e.g. --set lr=1e-3",
    )


def parse_levels(text: str) -> list[float]:
    """``"0,0.25,0.5"`` -> [0.0, 0.25, 0.5]; each level must lie in [0, 1]."""
    try:
        levels = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--levels {text!r}: expected comma-separated numbers"
        ) from None
    if not levels or any(not 0.0 <= t <= 1.0 for t in levels):
        raise argparse.ArgumentTypeError(f"--levels {text!r}: expected levels in [0, 1]")
    return levels


def unit_interval(text: str) -> float:
    """argparse type: a number in [0, 1] (a level, a target C, a beta)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a value in [0, 1], got {value}")
    return value


def integer_at_least(minimum: int):
    """argparse type factory: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse
