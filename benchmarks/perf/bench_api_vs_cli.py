"""The README's Python API snippet against ``dprm train`` for the same fit, in one run.

Both run as fresh processes on the same tiny world (written first, outside the timing), with
the same method, seed and step cap; each process is timed whole (start-up, reading the set,
the fit, saving). The API uses dprm's thread policy by default (``threads=None``: the CLI's
``--threads`` default), so the two should take about the same time; the target is
API <= 1.5x CLI. The API's stderr is checked for its progress bar. Usage::

    python benchmarks/perf/bench_api_vs_cli.py [--method ot] [--max-steps 150] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the README's snippet, as a user runs it (the world is written beforehand; max_steps capped)
SNIPPET = """
import dprm
from dprm.data import read_calibration_set

data = read_calibration_set({calib!r})
model = dprm.fit({method!r}, data, seed=0, overrides={overrides!r})
model.save({out!r})
model = dprm.load({out!r})
q = model.quantiles(data.hidden, [0.1, 0.5, 0.9])
"""
TARGET = 1.5


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process: user + system, stderr) of one process."""
    before = os.times()
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = os.times()
    user = after.children_user - before.children_user
    system = after.children_system - before.children_system
    return wall, user + system, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="ot")
    parser.add_argument("--max-steps", type=int, default=150, help="0: the method's own cap")
    parser.add_argument("--preset", default="r1-qwen-7b__qwen-prm")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    from dprm.data.synth import write_world
    from dprm.threads import default_threads

    root = Path(tempfile.mkdtemp(prefix="api-vs-cli-"))
    calib = str(write_world(root / "w", args.preset, size=args.size, progress=False)["train/calib"])
    overrides = {"max_steps": args.max_steps} if args.max_steps else None
    sets = [] if overrides is None else ["--set", f"max_steps={args.max_steps}"]
    api_times, cli_times, api_cpu, cli_cpu, progress = [], [], [], [], []
    for i in range(args.repeats):  # interleaved: load changes hit both alike
        code = SNIPPET.format(calib=calib, method=args.method, overrides=overrides,
                              out=str(root / f"api{i}"))  # fmt: skip
        seconds, cpu, err = timed([sys.executable, "-c", code])
        api_times.append(seconds)
        api_cpu.append(cpu)
        progress.append("step" in err)
        cli = [sys.executable, "-m", "dprm.cli", "train", "--method", args.method, "--data",
               calib, "--seed", "0", "--out", str(root / f"cli{i}"), "--no-progress", *sets]  # fmt: skip
        seconds, cpu, _ = timed(cli)
        cli_times.append(seconds)
        cli_cpu.append(cpu)
    api, cli = min(api_times), min(cli_times)
    env = os.environ.get("OMP_NUM_THREADS", "unset")
    print(f"{args.method} on a {args.size} world ({args.preset}), max_steps {args.max_steps or 'default'}, "
          f"threads {default_threads()} (OMP_NUM_THREADS={env}), best of {args.repeats}")  # fmt: skip
    shown = "yes" if all(progress) else "no"
    print(f"  {'':<20}{'wall s':>9}{'CPU s':>9}")
    print(f"  {'README API snippet':<20}{api:9.1f}{min(api_cpu):9.1f}   progress bar: {shown}")
    print(f"  {'dprm train':<20}{cli:9.1f}{min(cli_cpu):9.1f}")
    verdict = "ok" if api <= TARGET * cli else f"> {TARGET}x"
    ratio_cpu = min(api_cpu) / min(cli_cpu)
    print(f"  ratio API / CLI     {api / cli:.2f}x wall, {ratio_cpu:.2f}x CPU "
          f"(target <= {TARGET}x wall: {verdict})")  # fmt: skip


if __name__ == "__main__":
    main()
