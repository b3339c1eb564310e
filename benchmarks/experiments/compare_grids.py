"""Two ``dprm reproduce`` runs of the same grid, world by world: OT and QR held out.

For every world evaluated in both runs (seed 0), the ``id`` and ``ood`` Brier and WQL of OT and
QR in run A and run B (e.g. defaults vs ``--tune-trials 20``), which one is ahead of the other in
each run, and per method the count of worlds where B is lower and the mean change.

Usage: python benchmarks/compare_grids.py OUT_A OUT_B
"""

import json
import sys
from pathlib import Path

import numpy as np

if len(sys.argv) != 3 or not all((Path(a) / "eval").is_dir() for a in sys.argv[1:]):
    sys.exit(f"usage: {sys.argv[0]} OUT_A OUT_B (two dprm reproduce output folders with eval/)")
A, B = Path(sys.argv[1]), Path(sys.argv[2])
rows = []
for world in sorted(p.name for p in (B / "eval").iterdir()):
    r = {"world": world}
    ok = True
    for tag, root in (("u", A), ("t", B)):
        for m in ("ot", "qr"):
            f = root / "eval" / world / m / "seed0.json"
            if not f.exists():
                ok = False
                continue
            s = json.loads(f.read_text())["splits"]
            for split in ("id", "ood"):
                for k in ("brier", "wql", "ece"):
                    r[f"{tag}_{m}_{split}_{k}"] = s[split]["metrics"][k]
    if ok:
        rows.append(r)
print(f"{len(rows)} worlds")
for split in ("id", "ood"):
    for k in ("brier", "wql"):
        print(f"\n{split} {k}: world | OT A / B | QR A / B | ahead A / B")
        for r in rows:
            value = {(t, m): r[f"{t}_{m}_{split}_{k}"] for t in "ut" for m in ("ot", "qr")}
            au = "OT" if value["u", "ot"] < value["u", "qr"] else "QR"
            at = "OT" if value["t", "ot"] < value["t", "qr"] else "QR"
            print(
                f"{r['world']:28s} {value['u', 'ot']:.4f} / {value['t', 'ot']:.4f} | "
                f"{value['u', 'qr']:.4f} / {value['t', 'qr']:.4f} | {au} / {at}"
            )
        for m in ("ot", "qr"):
            d = np.array([r[f"t_{m}_{split}_{k}"] - r[f"u_{m}_{split}_{k}"] for r in rows])
            print(
                f"  {m}: B lower in {(d < 0).sum()}/{len(d)}; mean change {d.mean():+.4f}, range {d.min():+.4f} to {d.max():+.4f}"
            )
        ot_ahead = sum(r[f"t_ot_{split}_{k}"] < r[f"t_qr_{split}_{k}"] for r in rows)
        print(f"  B: OT lower than QR in {ot_ahead}/{len(rows)} worlds")
