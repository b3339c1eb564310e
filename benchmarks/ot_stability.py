"""Does ``ot`` converge? Today's settings and the new defaults side by side, with ``qr``.

For each development world and training seed, trains ``ot`` under several settings and ``qr``
(its own defaults) on the world's ``train`` calibration split (80/20 question split inside
``fit``), logs every validation evaluation, and scores the returned checkpoint on the held-out
``id`` and ``ood`` splits (docs/report.md: no calibrator trains or early-stops on them).

Per fit it records:

* ``jump2``: the largest |change| of the validation WQL between consecutive evaluations in the
  second half of the run (evaluations at step >= last step / 2): how much the model still moves
  when it should have settled;
* held-out Brier, WQL, ``wql_interior`` (levels 0.1..0.9) and calibration area, ID and OOD;
* the selected step, the steps run, whether patience stopped it, seconds.

The development worlds are **not** the evaluation grid: twin presets at ``demo`` size with a
non-default world seed (``--worlds PRESET:SEED``; the grid uses each generator's default seed),
and with ``--hard`` also a harder variant of each, built here (the hidden states pass through a
random non-linear map and a quarter of their columns are replaced by noise, so h is only partly
and non-linearly informative; linear R^2 of the true logit printed).

The settings compared (``SETTINGS``): ``today`` pins every default of ``ot`` as it was before
issue 19 (lr 4e-3 for g and f, f every 2nd batch, StepLR 500 x 0.5, 1000 steps, patience 175
evaluations, warm-up 400, no averaging), ``new`` the first round of issue 19's defaults (one
map), ``new_prm_score`` that with the PRM-score source, ``new_lr4e-3`` that at the old learning
rate, ``new_ensK`` that with an ensemble of K maps (``ensemble_size``; ``_shared``: all members
on the same batches), ``default`` whatever ``ot``'s defaults are now (``new_ens4``). The
Done-when check of issue 19 is printed at the end for every setting but ``today`` and ``qr``:
its worst jump2 <= 20 % of ``today``'s, and the seed-to-seed std of its held-out Brier <=
max(2 x ``qr``'s, 0.002), per split.

Resumable: one CSV row per fit is appended to ``--out`` (and one per evaluation to
``--history``); finished (world, setting, seed) rows are skipped on rerun.

Usage::

    python benchmarks/ot_stability.py --out /tmp/ot_stability.csv --seeds 0,1,2,3,4 [--hard]
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from dprm.data import read_calibration_set
from dprm.data.contract import CalibrationSet
from dprm.data.synth import write_world
from dprm.evaluation import evaluate_calibrator
from dprm.models.fit import CollapseError, fit

#: ``ot``'s defaults before issue 19, pinned so the comparison survives later default changes
TODAY = {
    "lr": 4e-3,
    "lr_f": 4e-3,
    "f_every": 2,
    "batch_size": 256,
    "lr_schedule": "step",
    "lr_step_size": 500,
    "lr_gamma": 0.5,
    "max_steps": 1000,
    "eval_every": 25,
    "patience": 175,
    "warmup_steps": 400,
    "ema_decay": 0.0,
    "source": "uniform",
}
#: setting name -> (method, overrides)
SETTINGS: dict[str, tuple[str, dict]] = {
    "today": ("ot", TODAY),
    # the first round of issue 19's defaults: one map (ensemble_size 1)
    "new": ("ot", {"ensemble_size": 1}),
    "new_prm_score": ("ot", {"ensemble_size": 1, "source": "prm_score"}),
    # the runner-up: the new settings at the old learning rate (docs/calibrators.md)
    "new_lr4e-3": ("ot", {"ensemble_size": 1, "lr": 4e-3, "lr_f": 4e-3}),
    # ot's current defaults, whatever they are (today: ensemble_size 4 = new_ens4)
    "default": ("ot", {}),
    # ensembles of K min-max games (OTConfig.ensemble_size), Q = the members' mean; each member
    # on its own batches and levels, or ("_shared") all on the same batches
    "new_ens2": ("ot", {"ensemble_size": 2}),
    "new_ens3": ("ot", {"ensemble_size": 3}),
    "new_ens4": ("ot", {"ensemble_size": 4}),
    "new_ens6": ("ot", {"ensemble_size": 6}),
    "new_ens2_shared": ("ot", {"ensemble_size": 2, "ensemble_batches": "shared"}),
    "new_ens4_shared": ("ot", {"ensemble_size": 4, "ensemble_batches": "shared"}),
    "qr": ("qr", {}),
}
FIELDS = [
    "world", "setting", "method", "seed", "jump2", "val_wql_min_2nd", "val_wql_max_2nd",
    "best_step", "steps", "stopped_early", "seconds", "collapsed",
    *[f"{s}_{k}" for s in ("id", "ood")
      for k in ("brier", "wql", "wql_interior", "calibration_area")],
]  # fmt: skip
HISTORY_FIELDS = ["world", "setting", "seed", "step", "wql", "calibration_area", "loss_g", "loss_f"]


def second_half_jump(history: list[dict]) -> tuple[float, float, float]:
    """(max |delta val WQL| between consecutive evaluations, min, max) over the second half."""
    last = history[-1]["step"]
    wql = np.array([e["wql"] for e in history if e["step"] >= last / 2])
    jump = float(np.abs(np.diff(wql)).max()) if len(wql) > 1 else 0.0
    return jump, float(wql.min()), float(wql.max())


def harden(sets: dict[str, CalibrationSet], seed: int) -> tuple[dict[str, CalibrationSet], float]:
    """A harder variant: h -> [tanh(2 z R)[:, :3D/4], noise[:, D/4]] with z standardised on train.

    Returns the new sets and the held-out linear R^2 (ridge, ID) of the true logit from h'.
    """
    rng = np.random.default_rng(seed)
    train = np.asarray(sets["train"].hidden, dtype=np.float64)
    mean, std = train.mean(0), train.std(0) + 1e-8
    dim = train.shape[1]
    rotation = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
    kept = dim - dim // 4
    out = {}
    for name, data in sets.items():
        z = (np.asarray(data.hidden, dtype=np.float64) - mean) / std
        mixed = np.tanh(2.0 * z @ rotation)[:, :kept]
        noise = np.random.default_rng([seed, len(name)]).normal(size=(len(z), dim - kept))
        hidden = np.hstack([mixed, noise]).astype(np.float32)
        out[name] = CalibrationSet(data.records, hidden, data.meta, None)

    def design(data: CalibrationSet) -> np.ndarray:
        return np.hstack([np.asarray(data.hidden, np.float64), np.ones((len(data), 1))])

    x, y = design(out["train"]), out["train"].records["true_mu"].to_numpy(np.float64)
    coef = np.linalg.solve(x.T @ x + 1.0 * np.eye(x.shape[1]), x.T @ y)
    x_id, y_id = design(out["id"]), out["id"].records["true_mu"].to_numpy(np.float64)
    r2 = 1.0 - np.mean((x_id @ coef - y_id) ** 2) / np.var(y_id)
    return out, float(r2)


def read_done(path: Path) -> set[tuple[str, str, str]]:
    if not path.exists():
        return set()
    with path.open() as fh:
        return {(r["world"], r["setting"], r["seed"]) for r in csv.DictReader(fh)}


def append(path: Path, fields: list[str], rows: list[dict]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fields)
        if new:
            writer.writeheader()
        writer.writerows(rows)
        fh.flush()


def run_fit(world: str, setting: str, seed: int, sets: dict, args) -> None:
    method, overrides = SETTINGS[setting]
    started = time.perf_counter()
    row: dict = {"world": world, "setting": setting, "method": method, "seed": seed}
    try:
        model = fit(method, sets["train"], overrides=dict(overrides), seed=seed, progress=False)
    except CollapseError as err:
        row.update(collapsed=True, seconds=round(time.perf_counter() - started, 2))
        print(f"  {world} {setting} seed {seed}: COLLAPSED {err}", flush=True)
        append(args.out, FIELDS, [row])
        return
    history = model.history
    jump, low, high = second_half_jump(history)
    summary = model.info["training"]
    row.update(
        jump2=jump,
        val_wql_min_2nd=low,
        val_wql_max_2nd=high,
        best_step=summary["best_step"],
        steps=summary["steps"],
        stopped_early=summary["stopped_early"],
        seconds=round(time.perf_counter() - started, 2),
        collapsed=False,
    )
    for split in ("id", "ood"):
        scores = evaluate_calibrator(model, sets[split])
        for key in ("brier", "wql", "wql_interior", "calibration_area"):
            row[f"{split}_{key}"] = scores[key]
    append(
        args.history,
        HISTORY_FIELDS,
        [
            {"world": world, "setting": setting, "seed": seed}
            | {k: e.get(k, "") for k in HISTORY_FIELDS[3:]}
            for e in history
        ],
    )
    append(args.out, FIELDS, [row])
    print(
        f"  {world} {setting:14s} seed {seed}: jump2 {jump:.4f} best {summary['best_step']}/"
        f"{summary['steps']} ID Brier {row['id_brier']:.4f} OOD {row['ood_brier']:.4f} "
        f"({row['seconds']:.1f} s)",
        flush=True,
    )


def summarise(path: Path, settings: list[str]) -> None:
    with path.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["collapsed"] == "False"]
    worlds = sorted({r["world"] for r in rows})
    print("\nworld | setting | n | jump2 max | jump2 mean | ID Brier mean ± std"
          " | OOD Brier mean ± std | ID WQL | ID wql_interior | ID cal. area | best step"
          " | steps")  # fmt: skip
    stats: dict = {}
    for world in worlds:
        for setting in settings:
            sel = [r for r in rows if r["world"] == world and r["setting"] == setting]
            if not sel:
                continue

            def col(key: str, sel=sel) -> np.ndarray:
                return np.array([float(r[key]) for r in sel])

            std = {s: col(f"{s}_brier").std(ddof=1) if len(sel) > 1 else 0.0 for s in ("id", "ood")}
            stats[world, setting] = (col("jump2").max(), std)
            print(
                f"{world} | {setting} | {len(sel)} | {col('jump2').max():.4f} | "
                f"{col('jump2').mean():.4f} | {col('id_brier').mean():.4f} ± {std['id']:.4f} | "
                f"{col('ood_brier').mean():.4f} ± {std['ood']:.4f} | {col('id_wql').mean():.4f} | "
                f"{col('id_wql_interior').mean():.4f} | {col('id_calibration_area').mean():.4f} | "
                f"{col('best_step').mean():.0f} | {col('steps').mean():.0f}"
            )
    print(
        "\nDone-when (issue 19): jump2 <= 0.2 x today's; Brier std <= max(2 x qr's, 0.002);"
        " per candidate setting (every setting but today and qr)"
    )
    for world in worlds:
        if not {(world, "today"), (world, "qr")} <= set(stats):
            continue
        today, qr = stats[world, "today"], stats[world, "qr"]
        for setting in settings:
            if setting in ("today", "qr") or (world, setting) not in stats:
                continue
            new = stats[world, setting]
            ratio = new[0] / today[0] if today[0] else float("nan")
            verdict = "ok" if ratio <= 0.2 else "MISSED"
            line = (
                f"{world} {setting}: jump2 {new[0]:.4f} / {today[0]:.4f} = {ratio:.2f} ({verdict})"
            )
            for split in ("id", "ood"):
                limit = max(2 * qr[1][split], 0.002)
                verdict = "ok" if new[1][split] <= limit else "MISSED"
                line += f"; {split} std {new[1][split]:.4f} vs limit {limit:.4f} ({verdict})"
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("ot_stability.csv"))
    parser.add_argument("--history", type=Path, default=None, help="default: OUT with _history")
    parser.add_argument(
        "--worlds",
        default="llama-3.1-8b__qwen-prm:101,qwen-2.5-1.5b__qwen-prm:202",
        help="comma-separated PRESET:WORLD_SEED (non-default seeds: not the grid's worlds)",
    )
    parser.add_argument("--size", default="demo")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--hard", action="store_true", help="also run each world's hard variant")
    parser.add_argument("--hard-only", action="store_true", help="run only the hard variants")
    parser.add_argument("--summary-only", action="store_true")
    args = parser.parse_args()
    args.history = args.history or args.out.with_name(args.out.stem + "_history.csv")
    settings = args.settings.split(",")
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        parser.error(f"unknown settings {unknown}; known: {sorted(SETTINGS)}")
    torch.set_num_threads(1)
    if not args.summary_only:
        done = read_done(args.out)
        seeds = [int(s) for s in args.seeds.split(",")]
        for spec in args.worlds.split(","):
            preset, world_seed = spec.split(":")
            with tempfile.TemporaryDirectory() as tmp:
                paths = write_world(
                    tmp, preset, size=args.size, seed=int(world_seed), progress=False
                )
                sets = {
                    s: read_calibration_set(paths[f"{s}/calib"], check_hidden=False)
                    for s in ("train", "id", "ood")
                }
                variants = [] if args.hard_only else [(f"{preset}:{world_seed}", sets)]
                if args.hard or args.hard_only:
                    hard, r2 = harden(sets, int(world_seed))
                    print(f"{preset}:{world_seed} hard variant: held-out linear R^2 {r2:.3f}")
                    variants.append((f"{preset}:{world_seed}:hard", hard))
                for world, data in variants:
                    for seed in seeds:  # seed-major: every setting gets each seed before the next
                        for setting in settings:
                            if (world, setting, str(seed)) not in done:
                                run_fit(world, setting, seed, data, args)
    summarise(args.out, settings)


if __name__ == "__main__":
    main()
