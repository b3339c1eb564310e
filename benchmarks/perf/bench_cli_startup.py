"""Start-up time of the ``dprm`` command line, as a ratio to a bare ``python -c "import argparse"``.

Target: ``dprm --help`` and ``dprm questions --help`` in <= 0.5 s on a quiet 2-core
machine. Each command runs ``--repeats`` times, interleaved with the reference, and the medians
are printed. Usage::

    python benchmarks/perf/bench_cli_startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c 'import argparse'": [sys.executable, "-c", "import argparse"],
    "dprm --help": [sys.executable, "-m", "dprm.cli", "--help"],
    "dprm questions --help": [sys.executable, "-m", "dprm.cli", "questions", "--help"],
    "dprm train --help": [sys.executable, "-m", "dprm.cli", "train", "--help"],
}
TARGET_S = 0.5


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="runs per command (default 7)")
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.repeats):
        for name, cmd in COMMANDS.items():  # interleaved: load changes hit every command alike
            times[name].append(wall(cmd))
    reference = statistics.median(times["python -c 'import argparse'"])
    print(f"{'command':<28} {'median s':>9} {'x argparse':>11}  target")
    for name, values in times.items():
        median = statistics.median(values)
        target = (
            ""
            if name.startswith("python") or "train" in name
            else ("ok" if median <= TARGET_S else f"> {TARGET_S} s")
        )
        print(f"{name:<28} {median:9.3f} {median / reference:11.2f}  {target}")


if __name__ == "__main__":
    main()
