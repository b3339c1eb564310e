"""Rename the columns of stored IAS result CSVs that earlier versions wrote under older names.

``ias.csv`` / ``ias_full.csv`` rows: ``sweep`` -> ``allocation``
(:data:`dprm.ias.outputs.RENAMED_COLUMNS`); ``pays.csv`` rows and the tables built from them:
``kind`` -> ``allocation`` (:data:`dprm.ias.outputs.RENAMED_PAYS_COLUMNS`); ``peer_curves.csv``
(``dprm ias --peers``) and the curves built from it: ``level`` -> ``knob``
(:data:`dprm.ias.outputs.RENAMED_PEER_CURVE_COLUMNS`). Only the header
line changes: every other byte of the file is kept, so no number is rewritten. Files already
renamed are left alone; each file is replaced atomically.

    python tools/rename_result_columns.py --pays docs/results/adaptive-compute/pays_*.csv
    python tools/rename_result_columns.py --ias runs/demo/ias/*/*/*/*/ias_full.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dprm.ias.outputs import RENAMED_COLUMNS, RENAMED_PAYS_COLUMNS, RENAMED_PEER_CURVE_COLUMNS
from dprm.io import atomic_path


def rename_header(path: Path, renames: dict[str, str]) -> bool:
    """Rename the header fields of one CSV file in place; returns whether it changed.

    Raises:
        ValueError: the file would then hold a column twice.
    """
    data = path.read_bytes()
    end = data.find(b"\n")
    header, rest = (data, b"") if end < 0 else (data[:end], data[end:])
    crlf = header.endswith(b"\r")
    fields = header.rstrip(b"\r").decode("utf-8").split(",")
    renamed = [renames.get(f, f) for f in fields]
    if renamed == fields:
        return False
    if len(set(renamed)) != len(renamed):
        raise ValueError(f"{path}: renaming {fields} would repeat a column")
    new = ",".join(renamed).encode("utf-8") + (b"\r" if crlf else b"")
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(new + rest)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ias", nargs="*", default=[], type=Path, help="ias.csv-like files")
    parser.add_argument("--pays", nargs="*", default=[], type=Path, help="pays.csv-like files")
    parser.add_argument(
        "--peer-curves", nargs="*", default=[], type=Path, help="peer_curves.csv-like files"
    )
    args = parser.parse_args(argv)
    for paths, renames in (
        (args.ias, RENAMED_COLUMNS),
        (args.pays, RENAMED_PAYS_COLUMNS),
        (args.peer_curves, RENAMED_PEER_CURVE_COLUMNS),
    ):
        for path in paths:
            try:
                changed = rename_header(path, renames)
            except (OSError, ValueError) as err:
                print(f"rename_result_columns: error: {err}", file=sys.stderr)
                return 2
            print(f"{path}: {'renamed' if changed else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
