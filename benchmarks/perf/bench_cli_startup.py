"""Start-up time of the ``dprm`` command line: ``dprm --help`` and every ``dprm X --help``.

Target: each in <= 0.5 s on a quiet 2-core machine (printing help imports neither torch nor
pandas). Each command runs ``--repeats`` times, interleaved with a bare
``python -c "import argparse"`` (the reference), and the medians of the wall time and of the
child's CPU time (user + system) are printed: when other processes share the cores the wall
time grows with them, the CPU time much less, so both are shown. Usage::

    python benchmarks/perf/bench_cli_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from dprm.cli import COMMANDS as SUBCOMMANDS

REFERENCE = "python -c 'import argparse'"
COMMANDS = {
    REFERENCE: [sys.executable, "-c", "import argparse"],
    "dprm --help": [sys.executable, "-m", "dprm.cli", "--help"],
    **{
        f"dprm {name} --help": [sys.executable, "-m", "dprm.cli", name, "--help"]
        for name in SUBCOMMANDS
    },
}
TARGET_S = 0.5


def run_once(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run of ``cmd``."""
    before = os.times()
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per command (default 5)")
    args = parser.parse_args()
    walls: dict[str, list[float]] = {name: [] for name in COMMANDS}
    cpus: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.repeats):
        for name, cmd in COMMANDS.items():  # interleaved: load changes hit every command alike
            wall, cpu = run_once(cmd)
            walls[name].append(wall)
            cpus[name].append(cpu)
    reference = statistics.median(walls[REFERENCE])
    print(f"{'command':<28} {'wall s':>7} {'cpu s':>6} {'x argparse':>11}  target {TARGET_S} s")
    slow = 0
    for name in COMMANDS:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        verdict = "" if name == REFERENCE else ("ok" if wall <= TARGET_S else "SLOW")
        slow += verdict == "SLOW"
        print(f"{name:<28} {wall:7.3f} {cpu:6.3f} {wall / reference:11.2f}  {verdict}")
    print(f"{len(COMMANDS) - 1 - slow} of {len(COMMANDS) - 1} within {TARGET_S} s (wall median)")


if __name__ == "__main__":
    main()
