"""The ``dprm`` command-line program.

Thin by design: each module in this package adds its subcommands through
``register(subparsers)`` and turns flags into library calls. Modules are discovered
automatically; ``ORDER`` (an int) sorts them in ``--help``.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from dprm import __version__
from dprm.config import ConfigError
from dprm.io import DataError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dprm",
        description=(
            "Distributional process reward models: calibrate a PRM's success estimates as a "
            "full conditional quantile function Q(tau | h) and spend inference-time compute "
            "per question (instance-adaptive best-of-N)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dprm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "register"):
            modules.append(module)
    for module in sorted(modules, key=lambda m: (getattr(m, "ORDER", 100), m.__name__)):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except (DataError, ConfigError, FileNotFoundError) as err:
        print(f"dprm {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"dprm {args.command}: interrupted; finished work is kept, rerun to resume",
            file=sys.stderr,
        )
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
