"""Does adaptive compute pay? ``auto`` vs uniform vs the oracle on demo-size twin worlds.

For each preset: write the demo-size twin world (200 ID + 60 OOD test questions, 200 training
questions with calibration records and BoN pools), fit ``binomial``, ``ot`` and ``qr`` at seeds
0, 1, 2 on ``train/calib``, and run :func:`dprm.ias.run_ias` on ``id/bon`` and ``ood/bon`` with
``train_bon = train/bon`` (so ``auto`` learns on training pools only), the rules
highest-last / majority / weighted-last / weighted-calibrated, the truth as an extra estimate, and
the greedy sweep. Each (world, split, seed) directory gets the usual IAS files incl. pays.csv.

``--summarise`` reads them all back and prints the headroom checks (auto with the
recommended calibrator vs uniform, same rule, at costs 0.05 / 0.1 / 0.25; headroom captured;
the beta sweeps' cost ranges at C = 0.9), against both oracles: ``oracle`` (knows the realised
pools) and ``oracle-pop`` (knows every question's population accuracy curve, twin test sets).
``--size paper --methods binomial`` runs the paper-size grid with the recommended calibrator
(``--seq-methods binomial``: its ``auto-seq`` rows only, not base's and the truth's).

Run: ``PYTHONPATH=src python benchmarks/experiments/ias_pays_grid.py --root /tmp/pays PRESET ...`` then
``... --root /tmp/pays --summarise``; ``--beta-steps`` adds the beta-cal sweep's per-step
question-sampling errors (:func:`beta_steps`).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import results_page as rp

METHODS = ("binomial", "ot", "qr")
RULES = ("highest-last", "majority", "weighted-last", "weighted-calibrated")
RECOMMENDED = "binomial"  # README "Which calibrator?": meant for IAS


def run(
    root: Path,
    preset: str,
    seeds: list[int],
    vote_trials: int,
    rules=RULES,
    *,
    size: str = "demo",
    methods=METHODS,
    models_only: bool = False,
    seq_methods: tuple[str, ...] | None = None,
) -> None:
    import torch

    torch.set_num_threads(1)
    import dprm
    from dprm.data import read_bon_set, read_calibration_set
    from dprm.data.synth import write_world
    from dprm.ias import run_ias, truth_estimate
    from dprm.ias.outputs import write_ias_outputs
    from dprm.models import load

    world = root / f"{preset}-{size}"
    if not (world / "train" / "bon").exists():
        t0 = time.time()
        write_world(world, preset, size=size, progress=False, overwrite=True)
        print(f"{preset}: world written in {time.time() - t0:.0f} s", flush=True)
    data = read_calibration_set(world / "train" / "calib")
    train = read_bon_set(world / "train" / "bon", check_hidden=False)
    for seed in seeds:
        models = {}
        for method in methods:
            out = world / "models" / f"{method}-s{seed}"
            if not out.exists():
                t0 = time.time()
                dprm.fit(method, data, seed=seed, progress=False).save(out)
                print(
                    f"{preset}: {method} seed {seed} fitted in {time.time() - t0:.0f} s", flush=True
                )
            models[method] = load(out)
        if models_only:
            continue
        for split in ("id", "ood"):
            res = world / "ias" / f"{split}-s{seed}"
            if (res / "pays.csv").exists():
                continue
            bon = read_bon_set(world / split / "bon", check_hidden=False)
            t0 = time.time()
            summary, budgets = run_ias(
                bon, models, mc_trials=0, seed=seed, greedy=True, rules=rules,
                train_bon=train, extra_estimates=[truth_estimate(bon)], vote_trials=vote_trials,
                sequential=seq_methods or True,
            )  # fmt: skip
            write_ias_outputs(res, summary, budgets, meta={"world": preset, "split": split})
            print(f"{preset} {split} seed {seed}: {time.time() - t0:.0f} s", flush=True)


def collect(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every ``pays.csv`` and ``ias_full.csv`` under a grid root, one frame each (also written
    to ``root / "pays_all.csv"``)."""
    from dprm.ias.outputs import RENAMED_PAYS_COLUMNS, read_ias_rows

    pays, full = [], []
    for path in sorted(glob.glob(str(root / "*" / "ias" / "*" / "pays.csv"))):
        split, seed = Path(path).parent.name.split("-s")
        world = (
            Path(path)
            .parents[2]
            .name.removesuffix("-demo")
            .removesuffix("-paper")
            .removesuffix("-tiny")
        )
        frame = pd.read_csv(path).assign(world=world, split=split, seed=int(seed))
        # a grid root written before the column was named allocation
        renamed = {k: v for k, v in RENAMED_PAYS_COLUMNS.items() if v not in frame}
        pays.append(frame.rename(columns=renamed))
        f = read_ias_rows(Path(path).parent / "ias_full.csv")
        full.append(f.assign(world=world, split=split, seed=int(seed)))
    pays, full = pd.concat(pays), pd.concat(full)
    pays.to_csv(root / "pays_all.csv", index=False)
    return pays, full


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def summary(pays: pd.DataFrame, full: pd.DataFrame | None = None) -> str:
    """The grid's answer to "does adaptive compute pay?" as Markdown, from its pays rows (and,
    when given, its ``ias_full.csv`` rows: ``auto-seq`` minus ``auto`` and the beta sweeps)."""
    keys = ["world", "split", "rule", "cost"]
    oracles = pays[pays.allocation == "oracle"].groupby(keys)["headroom"].mean()
    pop = pays[pays.allocation == "oracle-pop"].groupby(keys)["gain"].mean()  # oracle-pop - uniform
    seeds = ", ".join(str(s) for s in sorted(pays.seed.unique()))
    out = [
        f"{pays.world.nunique()} worlds, seeds {seeds}; a cell is a (world, split, selection "
        "rule, target cost), values are seed means. Gain: accuracy minus uniform best-of-N at "
        "the same mean cost. Headroom: the oracle's gain (`oracle`: knows each question's "
        "realised pool of 64; `oracle-pop`: knows each question's population accuracy-vs-n "
        "curve). Share: sum of gains / sum of headroom.\n",
    ]
    rows = []
    for allocation in ("auto",):
        for method in (RECOMMENDED, "ot", "qr", "base", "truth"):
            sel = pays[(pays.allocation == allocation) & (pays.method == method)]
            cells = sel.groupby(keys)[["gain"]].mean()
            if cells.empty:
                continue
            cells = cells.join(oracles.rename("headroom")).join(pop.rename("headroom_pop"))
            below = cells["gain"] < -0.005
            big = cells["headroom_pop"] >= 0.04
            rows.append([
                f"`{allocation}` ({method})", str(len(cells)),
                f"{int((~below).sum())} / {len(cells)}", f"{cells['gain'].min():+.4f}",
                f"{cells['gain'].mean():+.4f}",
                _pct(cells["gain"].sum() / cells["headroom"].sum()),
                _pct(cells["gain"].sum() / cells["headroom_pop"].sum()),
                f"{int((cells['gain'][big] >= 0.02).sum())} / {int(big.sum())}",
            ])  # fmt: skip
    out.append(rp.table(
        ["allocation (estimate)", "cells", "not below uniform by > 0.005", "worst gain",
         "mean gain", "share of `oracle` headroom", "share of `oracle-pop` headroom",
         "gain ≥ 0.02 where `oracle-pop` headroom ≥ 0.04"],
        rows, "lrrrrrrr",
    ))  # fmt: skip
    out.append(f"\n## By split and rule ({RECOMMENDED})\n")
    by = []
    for allocation in ("auto",):
        sel = pays[(pays.allocation == allocation) & (pays.method == RECOMMENDED)]
        cells = sel.groupby(keys)[["gain"]].mean().join(pop.rename("headroom_pop"))
        for (split, rule), grp in cells.groupby(level=["split", "rule"]):
            by.append([
                f"`{allocation}`", split, rule, str(len(grp)), f"{grp['gain'].mean():+.4f}",
                f"{grp['headroom_pop'].mean():+.4f}",
                _pct(grp["gain"].sum() / grp["headroom_pop"].sum()), f"{grp['gain'].min():+.4f}",
            ])  # fmt: skip
    out.append(rp.table(
        ["allocation", "split", "rule", "cells", "mean gain", "mean `oracle-pop` headroom",
         "share", "worst gain"],
        by, "lllrrrrr",
    ))  # fmt: skip
    out.append(f"\n## Accuracy at each target cost ({RECOMMENDED})\n")
    rec = pays[(pays.allocation == "auto") & (pays.method == RECOMMENDED)]
    per = rec.groupby(["allocation", "rule", "split", "cost"])[
        ["accuracy", "gain", "headroom"]
    ].mean()
    out.append(rp.table(
        ["allocation", "rule", "split", "cost", "accuracy", "gain", "`oracle` headroom"],
        [[f"`{k}`", r, sp, f"{c:g}", f"{v.accuracy:.4f}", f"{v.gain:+.4f}",
          f"{v.headroom:+.4f}"] for (k, r, sp, c), v in per.iterrows()],
        "llllrrr",
    ))  # fmt: skip
    out.append("## The C rule against uniform (highest-last), where its sweep reaches the cost\n")
    c = pays[(pays.allocation == "C")].dropna(subset=["accuracy"])
    per_c = c.groupby(["method", "split", "cost"])[["gain", "headroom"]].mean()
    out.append(rp.table(
        ["estimate", "split", "cost", "gain", "`oracle` headroom"],
        [[m, sp, f"{cost:g}", f"{v.gain:+.4f}", f"{v.headroom:+.4f}"]
         for (m, sp, cost), v in per_c.iterrows()],
        "lllrr",
    ))  # fmt: skip
    if full is not None and not full.empty:
        seq = full[full.allocation == "auto-seq"]
        if not seq.empty:
            out.append("## `auto-seq` minus `auto` (paired on common draw orders)\n")
            keys = ["method", "split", "rule", "target_cost"]
            d = seq.groupby(keys)[["minus_auto", "minus_auto_se"]]
            out.append("```text\n" + d.mean().round(4).to_string() + "\n```\n")
    return "\n".join(out)


def beta_summary(frame: pd.DataFrame, title: str) -> str:
    """Per (world, split): is the ``beta-cal`` sweep's accuracy non-decreasing in beta?"""
    from statistics import NormalDist

    bound = NormalDist().inv_cdf(0.05 / len(frame))  # one-sided, Bonferroni over every step
    cells = frame.groupby(["world", "split"]).agg(
        questions=("questions", "first"), worst_step=("step", "min"), worst_z=("z", "min")
    )
    out = [f"\n## {title}\n", f"{len(cells)} cells, {len(frame)} steps of 0.1 in beta; a step "
           f"down is significant (family-wise 5 %) when z < {bound:.2f}.\n"]  # fmt: skip
    rows = []
    for split, grp in cells.groupby(level="split"):
        rows.append([
            split, str(int(grp["questions"].iloc[0])),
            f"{int((grp['worst_step'] >= -1e-9).sum())} / {len(grp)}",
            str(int((grp["worst_z"] < -2).sum())), str(int((grp["worst_z"] < bound).sum())),
            f"{grp['worst_step'].min():+.4f}",
        ])  # fmt: skip
    out.append(rp.table(
        ["split", "questions", "non-decreasing in beta", "worst z < -2", "significant drop",
         "worst step"],
        rows, "lrrrrr",
    ))  # fmt: skip
    return "\n".join(out)


def summarise(root: Path) -> None:
    pays, full = collect(root)
    print(summary(pays, full))
    print("\nbeta sweeps at C = 0.9 (cost range, accuracy monotone?):")
    beta = full[full.allocation.isin(["beta", "beta-cal"])]
    for (world, split, method, allocation), grp in beta.groupby(
        ["world", "split", "method", "allocation"]
    ):
        g = grp.groupby("level")[["cost", "accuracy"]].mean().sort_index()
        mono = bool((np.diff(g["accuracy"].to_numpy()) >= -1e-9).all())
        lo, hi = g["cost"].min(), g["cost"].max()
        print(f"  {world:>24} {split:>3} {method:>8} {allocation:>8}: cost {lo:.3f}-{hi:.3f} "
              f"({hi / lo:5.1f}x), accuracy {g['accuracy'].min():.3f}-{g['accuracy'].max():.3f}, "
              f"non-decreasing {mono}")  # fmt: skip


PAGE = "adaptive-compute"


def render() -> Path:
    """Write ``docs/results/adaptive-compute.md`` from the CSVs in its folder."""
    data = rp.folder(PAGE)
    # the static allocations only: ``auto-seq`` is a sequential policy (no static oracle is a
    # ceiling of its kind) and is measured against its peers on adaptive-peers.md
    pays = pd.read_csv(data / "pays_uniform_oracle_auto_c.csv")
    body = (
        "Does adaptive compute pay? On the paper-size twin v2 grid (18 worlds, held-out ID and "
        f"OOD best-of-N sets, pools of 64, `{RECOMMENDED}` fitted at 3 seeds on each world's "
        "training split): uniform best-of-N, the C rule, the up-front `auto` allocation and the "
        "two oracles at target costs 0.05 / 0.1 / 0.25 (cost = mean draws / 64), for "
        "highest-last and majority vote. The oracles are static allocations, a ceiling of the "
        "same kind as `auto`. The sequential `auto-seq` is measured against a sequential "
        "ceiling and against the calibrator-free stopping rules on "
        "[adaptive-peers.md](adaptive-peers.md). docs/adaptive-bon.md explains the "
        "allocations; docs/glossary.md the words.\n\n"
        "## Headroom captured\n\n"
        + summary(pays)
        + beta_summary(pd.read_csv(data / "beta_steps.csv"),
                       "The paper's beta early stopping (`beta-cal`, C = 0.9): accuracy against beta")
        + "\n"
        + beta_summary(pd.read_csv(data / "beta_steps_ood1000.csv"),
                       "The same with 1,000 fresh questions of the AIME-like population per "
                       "`ood` split")
    )  # fmt: skip
    return rp.write_page(
        PAGE, "Adaptive compute: does it pay?",
        "python benchmarks/experiments/ias_pays_grid.py --render", body,
    )  # fmt: skip


def _grown_ood(world: Path, questions: int, scratch: Path):
    """The world's AIME-like BoN split grown to ``questions`` questions: the same twin world (its
    preset, size and default seed, so the same question population, PRM embedding and
    calibrators apply), a fresh sample of that many test questions. Written under ``scratch``
    (the train and id splits cut to one question) and read back."""
    import dataclasses

    from dprm.data import read_bon_set
    from dprm.data.synth import SIZES, write_world

    preset, size = world.name.rsplit("-", 1)
    base = SIZES[size]
    splits = tuple(
        dataclasses.replace(s, n_bon_questions=questions) if s.name == "ood"
        else dataclasses.replace(s, n_questions=1, n_bon_questions=min(s.n_bon_questions, 1))
        for s in base.splits
    )  # fmt: skip
    name = f"{size}-ood{questions}"
    SIZES[name] = dataclasses.replace(base, splits=splits)  # a scratch size, this process only
    try:
        write_world(scratch, preset, size=name, progress=False)
    finally:
        del SIZES[name]
    return read_bon_set(scratch / "ood" / "bon", check_hidden=False)


def beta_steps(
    root: Path, method: str = RECOMMENDED, ood_questions: int | None = None
) -> pd.DataFrame:
    """The ``beta-cal`` sweep (C = 0.9) per question: is accuracy non-decreasing in beta?

    The sweep's accuracies are exact expectations over draws, so a step down is a property of the
    test questions' pools, not Monte Carlo error. What is left is the *question sample*: on a
    60-question split one question whose only good candidate stops being acceptable moves the mean
    by 1/60. For each step beta -> beta + 0.1 this takes the per-question accuracy (mean over the
    seeds' calibrators), the paired difference over questions, and its standard error
    (sd / sqrt(Q)); z = step / se. A step down is *significant* at family-wise 5 % when z is below
    the one-sided Bonferroni bound over every step of every cell printed.

    With ``ood_questions`` the ``ood`` split is replaced by a fresh sample of that many questions
    from the same AIME-like population (:func:`_grown_ood`, scored by the same fits): what the
    rule does on the population rather than on the 60 questions of the grid.

    Args:
        root: a grid root (worlds ``<preset>-<size>`` with ``models/<method>-s<seed>``).
        method: the calibrator whose fits are read.
        ood_questions: grow the ``ood`` split to this many questions (None: the world's own).

    Returns:
        one row per (world, split, step), also written to ``root / "beta_steps.csv"``.
    """
    import torch

    torch.set_num_threads(1)
    from dprm.data import read_bon_set
    from dprm.ias.constants import BETA_C, BETA_GRID, N_MAX
    from dprm.ias.paper.accuracy import threshold_mask_exact
    from dprm.ias.paper.estimates import candidate_estimates, estimate_from_model
    from dprm.ias.paper.pools import Pools
    from dprm.models import load

    rows = []
    for world in sorted(p for p in root.iterdir() if (p / "models").is_dir()):
        fits = sorted((world / "models").glob(f"{method}-s*"))
        for split in ("id", "ood"):
            scratch = None
            if split == "ood" and ood_questions:
                scratch = Path(tempfile.mkdtemp(prefix="ood-", dir=root))
                bon = _grown_ood(world, ood_questions, scratch)
            else:
                bon = read_bon_set(world / split / "bon", check_hidden=False)
            pools = Pools.from_bon(bon)
            per_seed = []
            for fit in fits:
                model = load(fit)
                est = estimate_from_model(model, bon, method)
                cand = pools.gather(candidate_estimates(model, bon))
                q_beta = est.quantiles_at(BETA_GRID)
                cap = est.budgets(BETA_C, N_MAX)
                per_seed.append(
                    [threshold_mask_exact(pools, cand >= q_beta[:, i][:, None], cap)[0]
                     for i in range(len(BETA_GRID))]
                )  # fmt: skip
            if scratch is not None:
                shutil.rmtree(scratch)
            acc = np.mean(per_seed, axis=0)  # [B, Q]
            step = np.diff(acc, axis=0)  # [B - 1, Q]
            se = step.std(axis=1, ddof=1) / np.sqrt(step.shape[1])
            for b in range(step.shape[0]):
                rows.append(
                    (world.name.rsplit("-", 1)[0], split, acc.shape[1], len(fits),
                     BETA_GRID[b], BETA_GRID[b + 1], acc[b].mean(), acc[b + 1].mean(),
                     step[b].mean(), se[b])
                )  # fmt: skip
    frame = pd.DataFrame(
        rows, columns=["world", "split", "questions", "seeds", "beta_from", "beta_to",
                       "accuracy_from", "accuracy_to", "step", "step_se"],
    )  # fmt: skip
    frame["z"] = frame["step"] / frame["step_se"].where(frame["step_se"] > 0)
    suffix = f"_ood{ood_questions}" if ood_questions else ""
    frame.to_csv(root / f"beta_steps{suffix}.csv", index=False)
    print(beta_summary(frame, f"beta-cal ({method}, C = {BETA_C})"))
    return frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*")
    parser.add_argument("--root", type=Path, default=None)
    parser.add_argument(
        "--render", action="store_true", help=f"write docs/results/{PAGE}.md from its stored CSVs"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the smallest run: one tiny world, seed 0, binomial, highest-last",
    )
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--vote-trials", type=int, default=96)
    parser.add_argument("--summarise", action="store_true")
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--size", default="demo", choices=("tiny", "demo", "paper"))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--models-only", action="store_true", help="write worlds, fit, stop")
    parser.add_argument(
        "--beta-steps", action="store_true",
        help="per-question beta-cal steps with paired standard errors (recommended calibrator)",
    )  # fmt: skip
    parser.add_argument(
        "--ood-questions", type=int, default=None,
        help="with --beta-steps: grow each world's ood split to this many fresh questions",
    )  # fmt: skip
    parser.add_argument(
        "--seq-methods", default=None,
        help="auto-seq for these estimates only (comma list; default: every one with candidate "
        "estimates, base and truth included); e.g. binomial, as auto-seq is slow",
    )  # fmt: skip
    args = parser.parse_args()
    if args.render:
        print(render())
        return
    if args.root is None:
        parser.error("--root is required (or --render)")
    if args.smoke:
        args.presets = args.presets or ["llama-3.2-1b__qwen-prm"]
        args.size, args.seeds, args.methods, args.rules = "tiny", "0", "binomial", "highest-last"
        args.vote_trials, args.summarise = 8, True
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for preset in args.presets:
        seeds = [int(s) for s in args.seeds.split(",")]
        run(
            args.root, preset, seeds, args.vote_trials, tuple(args.rules.split(",")),
            size=args.size, methods=tuple(args.methods.split(",")), models_only=args.models_only,
            seq_methods=tuple(args.seq_methods.split(",")) if args.seq_methods else None,
        )  # fmt: skip
    if args.summarise:
        summarise(args.root)
    if args.beta_steps:
        beta_steps(args.root, ood_questions=args.ood_questions)


if __name__ == "__main__":
    main()
