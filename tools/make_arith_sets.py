"""Write the packaged arithmetic question sets (deterministic by seed).

    python tools/make_arith_sets.py            # src/dprm/llm/question_sets/arith-{train,id,ood}.jsonl.gz

Each split draws from :data:`dprm.llm.tasks.arith.SPLIT_SPECS` with the seed
``SEED + SPLIT_OFFSETS[split]``; the files are gzip'd with a zero mtime, so a rerun writes the
same bytes (the test suite checks that the packaged files equal a fresh draw).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dprm.llm.tasks.arith_sets import SET_SIZES, write_sets  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "src/dprm/llm/question_sets")
    args = parser.parse_args(argv)
    for path in write_sets(args.out):
        print(path, f"({SET_SIZES[path.name.split('.')[0].removeprefix('arith-')]} questions)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
