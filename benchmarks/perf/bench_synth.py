"""Benchmark ``dprm synth`` on the full 3584-dimensional paper grid: wall time and peak memory.

Each preset is synthesised in a fresh subprocess so its peak resident memory (ru_maxrss) is its
own. The target: peak memory stays near one float16 copy of the preset's hidden states (the
memory-mapped output file), not a float32 or double copy.

Usage: python benchmarks/perf/bench_synth.py [--presets all|GEN__PRM,...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
import numpy as np
from dprm.data.synth import write_world
base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
paths = write_world(sys.argv[1], sys.argv[2], size=sys.argv[3], progress=False)
elapsed = time.perf_counter() - t0
rows = {k: int(np.load(str(p) + "/hidden_states.npy", mmap_mode="r").shape[0]) for k, p in paths.items()}
print(json.dumps({"seconds": elapsed, "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "import_rss_kb": base_rss, "rows": rows}))
"""


def main() -> int:
    from dprm.data.synth import GENERATORS, PRMS, SIZES

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", default="all")
    parser.add_argument("--keep", default=None, help="keep the worlds under this directory")
    parser.add_argument("--size", default="paper", help="world size (default paper)")
    parser.add_argument("--smoke", action="store_true", help="the smallest run: one tiny world")
    args = parser.parse_args()
    if args.smoke:
        args.presets, args.size = "llama-3.2-1b__qwen-prm", "tiny"
    presets = (
        [f"{g}__{p}" for p in PRMS for g in GENERATORS]
        if args.presets == "all"
        else args.presets.split(",")
    )
    dim = SIZES[args.size].hidden_dim
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="dprm-bench-synth-"))
    print(f"dprm synth benchmark: {len(presets)} presets at hidden_dim={dim}, one subprocess each")
    print(
        f"{'preset':32s} {'rows':>7s} {'sec':>6s} {'rows/s':>7s} {'peak MB':>8s} {'fp16 MB':>8s} {'peak-import / fp16':>18s}"
    )
    total, worst, total_rows = 0.0, 0.0, 0
    for preset in presets:
        out = root / preset
        res = subprocess.run(
            [sys.executable, "-c", CHILD, str(out), preset, args.size],
            capture_output=True,
            text=True,
            check=True,
        )
        stats = json.loads(res.stdout.strip().splitlines()[-1])
        rows = sum(stats["rows"].values())
        fp16_mb = rows * dim * 2 / 2**20
        peak_mb, import_mb = stats["peak_rss_kb"] / 1024, stats["import_rss_kb"] / 1024
        ratio = (peak_mb - import_mb) / fp16_mb
        worst = max(worst, ratio)
        total += stats["seconds"]
        total_rows += rows
        rate = rows / stats["seconds"]
        print(
            f"{preset:32s} {rows:7d} {stats['seconds']:6.1f} {rate:7.0f} {peak_mb:8.0f} {fp16_mb:8.0f} {ratio:18.2f}"
        )
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"total synth time {total:.1f}s for {len(presets)} presets ({total / len(presets):.1f}s each, "
        f"{total_rows / total:.0f} records/s; R1 worlds have ~2x the records of the others)"
    )
    print(
        f"worst (peak RSS - import RSS) / one float16 copy of the hidden states = {worst:.2f} (target: near 1)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
