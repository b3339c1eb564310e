"""Adaptive best-of-N against its peers: samples to match uniform, accuracy at equal cost.

For each twin preset and world draw (the preset's world written at another world seed), fit the
recommended calibrator on the training records and, on the ID and OOD test pools (and a subtle
shift: the ID pools with their question priors shuffled across questions, so the calibrator is
wrong while the question states look alike), trace every method's cost-accuracy curve on the same
draw orders (:mod:`dprm.ias.peers.curves`): the peers (uniform, Adaptive-Consistency, ESC w = 4 /
8, the vote-lead rule, the best-score threshold rules, the reward-based stopping rules beacon
and pandora) and ``auto-seq`` with the calibrated prior, the raw PRM (base), no prior and the
truth. Writes docs/results/adaptive-peers.md and its CSVs.

Any world's BoN sets work: ``--bon id=DIR --bon ood=DIR --train-bon DIR --calibrator DIR ...``
runs them instead of the twin grid (e.g. a recipe's; peer_sets.py), with a page of its own.

Run: ``PYTHONPATH=src python benchmarks/experiments/adaptive_peers.py --root /tmp/peers``; it
stores the CSVs and ``source.json`` (commit, date, machine, settings) in
docs/results/adaptive-peers/ and renders the page from them, as ``--render`` does (seconds).
``--smoke`` aggregates and renders a hand-made cells table under ``--root``.

Only pre-registered report draws make a page (benchmarks/experiments/draws.toml,
:mod:`preregistration`): the world seeds default to the preset's report draws, and development
draws are refused before anything is computed (one line, exit 2). The headline and
calibration's share are paired statistics over the draws (:mod:`peer_stats`): per-draw ratios,
their median and a paired bootstrap 90 % interval, computed from each cell's replicates in the
work root and stored as headline.csv / calibration_share.csv; pages whose data predates them
re-render as they were.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_stats  # noqa: E402
import preregistration as prereg  # noqa: E402
import results_page as rp  # noqa: E402

REPO = rp.ROOT
PAGE = "adaptive-peers"
TITLE = "Adaptive best-of-N against its peers"
SCRIPT = "PYTHONPATH=src python benchmarks/experiments/adaptive_peers.py"
PRESETS = ("llama-3.1-8b__qwen-prm",)
#: world draws default to the preset's report draws in draws.toml (world seeds)
REPLICATES = "replicates.csv.gz"
#: cells of this run: computed now, or reused from an earlier run into the same --root
CELLS_SEEN = {"computed": 0, "reused": 0}
RULES = ("highest-last", "majority")
CALIBRATOR = "binomial"  # README "Which calibrator?": the one meant for IAS
SPLITS = ("id", "ood", "subtle")
COSTS = ("0.05", "0.1", "0.25")
#: the methods that read no calibrator (the samples-to-match comparison's "best calibrator-free"):
#: the peers, the reward-based stopping rules and auto-seq with a flat or raw-score prior
FREE_PEERS = ("adaptive-consistency", "esc-4", "esc-8", "vote-lead", "score-raw", "beacon",
              "pandora", "auto-seq[none]", "auto-seq[base]")  # fmt: skip
#: calibrator-free methods for calibration's share of the gain (item: what calibration adds)
FREE_METHODS = FREE_PEERS


def _fingerprint(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def _atomic_csv(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    frame.to_csv(tmp, index=False)
    os.replace(tmp, path)


def _atomic_text(text: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def draws_file() -> Path:
    """The pre-registration file (``DPRM_DRAWS_FILE`` points a test at its own)."""
    return Path(os.environ.get("DPRM_DRAWS_FILE", prereg.DRAWS_FILE))


def report_seeds(preset: str) -> list[int]:
    """The preset's pre-registered report world seeds."""
    worlds = prereg.read_draws(draws_file())
    if preset not in worlds:
        prereg.require_report("adaptive_peers.py", preset, {"world_seeds": []}, draws_file())
    return list(worlds[preset].report["world_seeds"])


def write_csv_gz(frame: pd.DataFrame, path: Path) -> None:
    """A gzipped CSV with no timestamp in its header, so equal frames give equal bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    frame.to_csv(tmp, index=False, float_format="%.6g",
                 compression={"method": "gzip", "mtime": 0})  # fmt: skip
    os.replace(tmp, path)


def evaluate_set(bon, train, model, rules, trials, train_trials, bootstrap, seed, subtle=False):
    """Summary rows of every method on one BoN set (all rules), the mean curves, and every
    method's figures on paired bootstrap resamples of the questions."""
    from dprm.ias.curves.paired import figure_replicates
    from dprm.ias.peers.curves import prior_inputs, set_curves, shuffle_priors, summarise

    priors = prior_inputs(model, bon, train)
    if subtle:
        priors = shuffle_priors(priors, ("calibrated", "base"), seed)
    rows, curves, reps = [], [], []
    for rule in rules:
        cs = set_curves(
            bon, train, priors, rule, trials=trials, seed=seed,
            train_trials=train_trials, priors=("calibrated",) if subtle else None,
        )  # fmt: skip
        summary = summarise(cs, bootstrap=bootstrap, seed=seed)
        rows.append(summary.assign(fallback=cs.fallback, shifted=cs.extra["shifted"]))
        reps.append(figure_replicates(cs, bootstrap=bootstrap, seed=seed))
        for name, c in cs.curves.items():
            curves.append(pd.DataFrame({
                "rule": rule, "method": name, "knob": c.levels,
                "draws": c.draws.mean(axis=1), "accuracy": c.accuracy.mean(axis=1),
            }))  # fmt: skip
    return (pd.concat(rows, ignore_index=True), pd.concat(curves, ignore_index=True),
            pd.concat(reps, ignore_index=True))  # fmt: skip


def run_world(root, preset, world_seed, calib_seed, args):
    """Every split of one world draw: cached per cell under ``root`` (keyed by the settings)."""
    import torch

    torch.set_num_threads(1)
    import dprm
    from dprm.data import read_bon_set, read_calibration_set
    from dprm.data.synth import write_world
    from dprm.models import load

    world = root / f"{preset}-{args.size}-w{world_seed}"
    if not (world / "train" / "bon").exists():
        write_world(world, preset, size=args.size, seed=world_seed, progress=False)
    model_dir = world / "models" / f"{CALIBRATOR}-s{calib_seed}"
    if not model_dir.exists():
        t0 = time.time()
        data = read_calibration_set(world / "train" / "calib")
        dprm.fit(CALIBRATOR, data, seed=calib_seed, progress=False).save(model_dir)
        print(f"{preset} w{world_seed}: fitted in {time.time() - t0:.0f} s", flush=True)
    model = load(model_dir)
    train = read_bon_set(world / "train" / "bon", check_hidden=False)
    from dprm.ias.curves.costs import TrainingData

    training = TrainingData.of(model, train)
    frames, curve_frames, rep_frames = [], [], []
    for split in SPLITS:
        settings = {"rules": list(args.rules), "trials": args.trials, "seed": calib_seed,
                    "train_trials": args.train_trials, "bootstrap": args.bootstrap,
                    "version": 2}  # fmt: skip
        cell = world / "peers" / f"{split}-{_fingerprint(settings)}"
        CELLS_SEEN["reused" if (cell / REPLICATES).exists() else "computed"] += 1
        if not (cell / REPLICATES).exists():
            t0 = time.time()
            bon = read_bon_set(world / ("id" if split == "subtle" else split) / "bon",
                               check_hidden=False)  # fmt: skip
            summary, curves, reps = evaluate_set(
                bon, train, model, args.rules, args.trials, args.train_trials, args.bootstrap,
                calib_seed, subtle=split == "subtle",
            )  # fmt: skip
            _atomic_csv(curves, cell / "curves.csv")
            _atomic_csv(summary, cell / "summary.csv")
            write_csv_gz(reps, cell / REPLICATES)  # last: a cell is complete once it exists
            print(f"{preset} w{world_seed} {split}: {time.time() - t0:.0f} s", flush=True)
        meta = {"world": preset, "world_seed": world_seed, "calibrator_seed": calib_seed,
                "split": split}  # fmt: skip
        summary = with_training_costs(pd.read_csv(cell / "summary.csv"), training)
        frames.append(summary.assign(**meta))
        curve_frames.append(pd.read_csv(cell / "curves.csv").assign(**meta))
        rep_frames.append(pd.read_csv(cell / REPLICATES).assign(**meta, draw=world_seed))
    return (pd.concat(frames, ignore_index=True), pd.concat(curve_frames, ignore_index=True),
            pd.concat(rep_frames, ignore_index=True))  # fmt: skip


def with_training_costs(summary: pd.DataFrame, training) -> pd.DataFrame:
    """A cell's summary with every method's labelled training samples and PRM passes per test
    question at its draws to reach uniform-64 (:mod:`dprm.ias.curves.costs`), and the training
    data they count."""
    from dprm.ias.curves.costs import with_costs

    records = np.nan if training.calibration_records is None else training.calibration_records
    return with_costs(summary, training).assign(
        calibration_records=records, train_candidates=training.train_candidates
    )


FIGURES = ("draws_to_u64", "draws_to_u16", *(f"acc_at_{c}" for c in COSTS))
#: the cost columns of a cell (:func:`with_training_costs`), averaged over draws
COST_COLUMNS = ("labelled_samples", "prm_passes_q500", "prm_passes_q5000")


def aggregate(cells: pd.DataFrame) -> pd.DataFrame:
    """Mean over world draws of every figure, its standard error over the draws
    (``<figure>_se_draws`` = sd / sqrt(draws), NaN with one draw), the mean bootstrap standard
    error within a draw (``<figure>_se_boot``), how many draws reach each target, and the
    peer a method fell back to (if it did in any draw)."""
    keys = ["world", "rule", "split", "method"]
    out = []
    for key, grp in cells.groupby(keys, sort=False):
        row = dict(zip(keys, key, strict=True))
        row["draws"] = len(grp)
        for fig in FIGURES:
            values = grp[fig].to_numpy(float)
            ok = np.isfinite(values)
            row[fig] = float(values[ok].mean()) if ok.all() else np.nan
            row[f"{fig}_se_draws"] = (
                float(values.std(ddof=1) / np.sqrt(len(values))) if ok.all() and len(values) > 1
                else np.nan
            )  # fmt: skip
            row[f"{fig}_se_boot"] = float(np.nanmean(grp[f"{fig}_se"].to_numpy(float)))
            row[f"{fig}_reached"] = int(ok.sum())
        backs = sorted({b for b in grp["falls_back_to"].fillna("") if b})
        row["falls_back_to"] = ",".join(backs)
        for col in COST_COLUMNS:
            if col in grp:  # cells written before the cost columns have none
                values = grp[col].to_numpy(float)
                row[col] = float(values.mean()) if np.isfinite(values).all() else np.nan
        row["target_u64"] = float(grp["target_u64"].mean())
        row["target_u16"] = float(grp["target_u16"].mean())
        row["shift_auc"] = float(grp["shift_auc"].mean())
        out.append(row)
    return pd.DataFrame(out)


def _fmt(value: float, se: float, digits: int = 3) -> str:
    if not np.isfinite(value):
        return "—"
    text = f"{value:.{digits}f}"
    return text + (f" ± {se:.{digits}f}" if np.isfinite(se) else "")


def _draws_cell(row) -> str:
    fig = "draws_to_u64"
    if not np.isfinite(row[fig]):
        n = int(row[f"{fig}_reached"])
        return f"not reached ({n}/{int(row['draws'])} draws)"
    return f"{row[fig]:.1f} ± {row[f'{fig}_se_draws']:.1f} ({1 - row[fig] / 64:+.0%})"


def _u16_cell(row) -> str:
    fig = "draws_to_u16"
    if not np.isfinite(row[fig]):
        return f"not reached ({int(row[f'{fig}_reached'])}/{int(row['draws'])})"
    return f"{row[fig]:.1f} ± {row[f'{fig}_se_draws']:.1f}"


def costs_cell(row) -> str:
    """Labelled training samples and PRM passes per test question (amortised over 500 /
    5,000 test questions) at the method's draws to reach uniform-64."""
    labelled = row["labelled_samples"]
    text = "—" if not np.isfinite(labelled) else f"{labelled:,.0f}"
    passes = [row[f"prm_passes_q{n}"] for n in (500, 5000)]
    if not all(np.isfinite(passes)):
        return text + " | —"
    return text + f" | {passes[0]:.1f} / {passes[1]:.1f}"


def world_table(agg: pd.DataFrame) -> list[str]:
    return rp.peer_table(
        agg, _draws_cell, _u16_cell,
        lambda r, c: _fmt(r[f"acc_at_{c}"], r[f"acc_at_{c}_se_draws"]),
        costs=costs_cell if "labelled_samples" in agg else None,
    )  # fmt: skip


def headline(agg: pd.DataFrame) -> tuple[list[str], pd.DataFrame]:
    """The target check per world, rule and split: auto-seq[calibrated]'s draws to reach
    uniform-64 (and -16) against the best calibrator-free peer's; ID needs <= 0.7x, OOD and the
    subtle shift <= 1.1x."""
    rows = []
    for (world, rule, split), grp in agg.groupby(["world", "rule", "split"], sort=False):
        by = grp.set_index("method")
        if "auto-seq[calibrated]" not in by.index:
            continue
        cal = by.loc["auto-seq[calibrated]"]
        for target in ("u64", "u16"):
            fig = f"draws_to_{target}"
            free = by.loc[[m for m in FREE_PEERS if m in by.index], fig]
            best = free.idxmin() if free.notna().any() else None
            best_draws = float(free.min()) if best else np.nan
            ratio = float(cal[fig]) / best_draws if best else np.nan
            limit = 0.7 if split == "id" else 1.1
            rows.append({
                "world": world, "rule": rule, "split": split, "target": target,
                "calibrated_draws": float(cal[fig]), "best_free_peer": best or "none reaches",
                "best_free_draws": best_draws, "ratio": ratio, "limit": limit,
                "met": bool(np.isfinite(ratio) and ratio <= limit),
                "falls_back_to": cal["falls_back_to"],
            })  # fmt: skip
    frame = pd.DataFrame(rows)
    lines = [
        "| world | rule | split | target | auto-seq[calibrated] draws | best calibrator-free "
        "peer (draws) | ratio | limit | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in frame.iterrows():
        cal = (
            f"{r['calibrated_draws']:.1f}" if np.isfinite(r["calibrated_draws"]) else "not reached"
        )
        if r["falls_back_to"]:
            cal += f" (falls back to {r['falls_back_to']})"
        best = f"{r['best_free_peer']} ({r['best_free_draws']:.1f})"
        ratio = f"{r['ratio']:.2f}" if np.isfinite(r["ratio"]) else "—"
        lines.append(
            f"| {r['world']} | {r['rule']} | {r['split']} | {r['target']} | {cal} | {best} | "
            f"{ratio} | ≤ {r['limit']:.1f} | {'yes' if r['met'] else 'no'} |"
        )
    return lines, frame


def calibration_share(agg: pd.DataFrame) -> tuple[list[str], pd.DataFrame]:
    """(calibrated - best calibrator-free) / (truth - best calibrator-free) per world, rule,
    split and cost; the ceiling is auto-seq with the truth as prior (a sequential policy, as
    auto-seq); shown only where the ceiling is above the best calibrator-free method, and not
    above 100 % (otherwise the cell says why)."""
    rows = []
    for (world, rule, split), grp in agg.groupby(["world", "rule", "split"], sort=False):
        by = grp.set_index("method")
        if not {"auto-seq[calibrated]", "auto-seq[truth]"} <= set(by.index):
            continue
        for c in COSTS:
            fig = f"acc_at_{c}"
            free = by.loc[[m for m in FREE_METHODS if m in by.index], fig].dropna()
            best, best_acc = free.idxmax(), float(free.max())
            cal, truth = (
                float(by.loc["auto-seq[calibrated]", fig]),
                float(by.loc["auto-seq[truth]", fig]),
            )
            head = truth - best_acc
            share = (cal - best_acc) / head if head > 1e-9 else np.nan
            rows.append({
                "world": world, "rule": rule, "split": split, "cost": c, "calibrated": cal,
                "truth": truth, "best_free": best, "best_free_acc": best_acc, "share": share,
                "falls_back_to": by.loc["auto-seq[calibrated]", "falls_back_to"],
            })  # fmt: skip
    frame = pd.DataFrame(rows)
    lines = [
        "| world | rule | split | cost | auto-seq[calibrated] | auto-seq[truth] | best "
        "calibrator-free (acc) | calibration's share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, r in frame.iterrows():
        if r["falls_back_to"]:
            share = f"— (falls back to {r['falls_back_to']})"
        elif not np.isfinite(r["share"]):
            share = "— (the truth is no better than the best calibrator-free method)"
        elif r["share"] > 1:
            share = "— (calibrated above the truth: no ceiling)"
        else:
            share = f"{r['share']:.0%}"
        lines.append(
            f"| {r['world']} | {r['rule']} | {r['split']} | {r['cost']} | {r['calibrated']:.4f} | "
            f"{r['truth']:.4f} | {r['best_free']} ({r['best_free_acc']:.4f}) | {share} |"
        )
    return lines, frame


def _size_text(size: str) -> str:
    from dprm.data.synth import SIZES

    if size not in SIZES:
        return "a BoN set given on the command line"
    world = SIZES[size]
    parts = [f"{s.name} {s.n_bon_questions or s.n_questions} questions" for s in world.splits]
    return ", ".join(parts) + f", pools of {world.pool_size}"


def store(cells, curves, agg, name: str, command: str, settings: dict, replicates) -> None:
    """Write the page's CSVs and ``source.json`` (command, commit, date, machine, settings)."""
    out_dir = rp.folder(name)
    _atomic_csv(cells, out_dir / "cells.csv")
    _atomic_csv(curves, out_dir / "curves.csv")
    _atomic_csv(agg, out_dir / "summary.csv")
    # the paired tables, not the replicates they come from (megabytes; each cell keeps its own
    # in the work root, so a rerun into the same --root recomputes them in seconds)
    _atomic_csv(peer_stats.headline(replicates, cells)[1], out_dir / "headline.csv")
    _atomic_csv(peer_stats.calibration_share(replicates, cells)[1],
                out_dir / "calibration_share.csv")  # fmt: skip
    rp.record_source(name, command, note=run_note(settings))
    source = {**rp.read_source(name), "settings": settings}
    _atomic_text(json.dumps(source, indent=2) + "\n", out_dir / "source.json")


def run_note(settings: dict) -> str:
    """The page header's note on the run: its time, and the cells it reused from earlier runs
    into the same --root (``settings['cells_reused']``, :data:`CELLS_SEEN`)."""
    if not settings.get("cells_reused"):
        return f"The run took {settings['elapsed_min']:.1f} min."
    return (f"This run took {settings['elapsed_min']:.1f} min; it reused "
            f"{settings['cells_reused']} of its {settings['cells']} cells, computed by "
            f"earlier runs into the same --root.")  # fmt: skip


def cells_seen(settings: dict) -> dict:
    """``settings`` with the counts of :data:`CELLS_SEEN` when the run reused any cell."""
    if CELLS_SEEN["reused"]:
        settings.update(cells=sum(CELLS_SEEN.values()), cells_reused=CELLS_SEEN["reused"])
    return settings


#: the target and share sections' introductions, paired (replicates stored) or not
PAIRED_TARGET_TEXT = (
    "`auto-seq[calibrated]` against the best calibrator-free rival (the peers and "
    "`auto-seq[base]` / `auto-seq[none]`; the rival with the least median draws over the draws "
    "to the target): the ratio of draws on each draw, its median over the draws and a paired "
    "bootstrap 90 % interval of the median (the draw's questions resampled, the same resamples "
    "for every method; `dprm.ias.curves.paired`). ∞: never reached. ID needs ratio ≤ 0.7 (≥ 30 % "
    "fewer draws), OOD and subtle ≤ 1.1, and a target is met only if the interval's upper end "
    "is within it."
)
PAIRED_SHARE_TEXT = (
    "Share = (auto-seq[calibrated] − best calibrator-free) / (auto-seq[truth] − best "
    "calibrator-free), accuracy at equal mean cost, on each draw (the rival with the highest "
    "median accuracy over the draws); its median over the draws and paired bootstrap 90 % "
    "interval. Every cell is shown: below 0 the calibrated policy is behind the rival, above "
    "100 % it is ahead of the ceiling; the ceiling auto-seq[truth] is a sequential policy like "
    "auto-seq."
)
HEADLINE_TEXT = (
    "`auto-seq[calibrated]` against the best calibrator-free rival, per split, from the table "
    "of the next section (worlds named by their PRM): a check is met only if the upper end of "
    "the 90 % interval of the median ratio of draws is within the limit."
)
#: the methods paragraph of pages with paired statistics (pages stored before keep theirs)
METHODS_TEXT = (
    "Methods, on the same pools and draw orders (`dprm.ias.peers.methods`, "
    "`dprm.ias.peers.curves`): `uniform`; `adaptive-consistency` (stop when P(p1 > p2) ≥ "
    "threshold, 12 thresholds); `esc-4`, `esc-8` (stop after a unanimous window; knob: the "
    "most draws); `vote-lead` (one draw each, then the smallest vote lead; exact matched "
    "budget); `score-raw`, `score-calibrated` (stop when the best drawn PRM score, raw or "
    "calibrated, clears a threshold set at 12 quantiles of the training candidates' scores); "
    "`beacon`, `pandora` (stop when one more draw's expected gain in raw PRM score is below its "
    "cost: a reward posterior fitted on the training pools, Weitzman's reservation value of "
    "their scores; 12 costs); the score rules only for score-based picks; "
    "`auto-seq[calibrated | base | none | truth]` (the calibrated prior, the raw PRM, a flat "
    "prior reading only the answers, the true distribution of p). Under a detected shift "
    "(shift AUC > 0.75) `auto-seq[calibrated]` and `auto-seq[truth]` fall back to the "
    "calibrator-free peer for the rule chosen on the training pools; such a cell is that "
    "peer's, never a gain. `auto-seq[base]` and `auto-seq[none]` read no calibrator and run as "
    "themselves; with the peers they are the calibrator-free rivals."
)
LEGACY_METHODS_TEXT = (
    "Methods, on the same pools and draw orders (`dprm.ias.peers`, `dprm.ias.peer_curves`): "
    "`uniform`; `adaptive-consistency` (stop when P(p1 > p2) ≥ threshold, 12 thresholds); "
    "`esc-4`, `esc-8` (stop after a unanimous window; knob: the most draws); `vote-lead` "
    "(one draw each, then the smallest vote lead; exact matched budget); `score-raw`, "
    "`score-calibrated` (stop when the best drawn PRM score, raw or calibrated, clears a "
    "threshold set at 12 quantiles of the training candidates' scores; score-based rules "
    "only); `auto-seq[calibrated | base | none | truth]` (the calibrated prior, the raw PRM, "
    "a flat prior reading only the answers, the true distribution of p). Under a detected "
    "shift (shift AUC > 0.75) every `auto-seq` falls back to the best calibrator-free peer "
    "for the rule, chosen on the training pools; such a cell is that peer's, never a gain."
)
LEGACY_TARGET_TEXT = (
    "`auto-seq[calibrated]` against the best calibrator-free peer (fewest draws to the "
    "target); ID needs ratio ≤ 0.7 (≥ 30 % fewer draws), OOD and subtle ≤ 1.1."
)
LEGACY_SHARE_TEXT = (
    "Share = (auto-seq[calibrated] − best calibrator-free) / (auto-seq[truth] − best "
    "calibrator-free), accuracy at equal mean cost; calibrator-free = the peers and "
    "auto-seq[base] / auto-seq[none]; the ceiling auto-seq[truth] is a sequential policy "
    "like auto-seq."
)


def statistics_sections(name: str, cells: pd.DataFrame, agg: pd.DataFrame):
    """(target text, target lines, share text, share lines, headline lines): paired over the
    draws from the stored replicates; data stored before them renders its means as it did
    (and has no headline section)."""
    folder = rp.folder(name)
    targets = folder / "headline.csv"
    if not targets.exists() or "per_draw" not in pd.read_csv(targets, nrows=0).columns:
        return (LEGACY_TARGET_TEXT, headline(agg)[0], LEGACY_SHARE_TEXT,
                calibration_share(agg)[0], [])  # fmt: skip
    frame = pd.read_csv(targets)
    shares = pd.read_csv(folder / "calibration_share.csv")
    verdict = ["## Headline", "", HEADLINE_TEXT, "", *peer_stats.verdict(frame), ""]
    why = peer_stats.why_missed(frame)
    if why:
        verdict += ["Why the misses (from each check's row in the next section):", "", *why, ""]
    return (PAIRED_TARGET_TEXT, peer_stats.headline_lines(frame), PAIRED_SHARE_TEXT,
            peer_stats.share_lines(shares), verdict)  # fmt: skip


def calibrator_seeds_text(settings: dict, cells: pd.DataFrame) -> str:
    """The calibrator seeds of the page's draws (pages stored before the pre-registration
    record name seeds 0, 1, 2, as their runs had)."""
    if "preregistered" not in settings:
        return "0, 1, 2"
    return ", ".join(str(s) for s in sorted(cells["calibrator_seed"].unique()))


def draws_sentence(settings: dict, cells: pd.DataFrame) -> str:
    """Which pre-registered draws the page reports ("" for pages stored before the record)."""
    if "preregistered" not in settings:
        return ""
    if not settings["preregistered"]:
        return " Hand-made data: no pre-registered draws."
    worlds = "; ".join(
        f"{r['world']}: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in r["draws"].items())
        for r in settings["preregistered"]
    )
    return (f" Every draw is a pre-registered report draw (benchmarks/experiments/draws.toml), "
            f"never read while designing the methods: {worlds}.")  # fmt: skip


def render(name: str = PAGE) -> Path:
    """Write ``docs/results/<name>.md`` from ``cells.csv``, ``summary.csv`` and ``source.json``
    in ``docs/results/<name>/`` alone."""
    out_dir = rp.folder(name)
    settings = rp.read_source(name)["settings"]
    if settings.get("kind") == "bon-sets":  # written by --bon: peer_sets.py's page
        import peer_sets

        return peer_sets.render(name)
    cells = pd.read_csv(out_dir / "cells.csv")
    agg = pd.read_csv(out_dir / "summary.csv")
    agg["falls_back_to"] = agg["falls_back_to"].fillna("")
    target_text, head_lines, share_text, share_lines, verdict = statistics_sections(
        name, cells, agg
    )
    auc = cells.groupby(["world", "split", "world_seed"])["shift_auc"].first().reset_index()
    fallbacks = cells.groupby(["world", "rule", "world_seed"])["fallback"].first().reset_index()
    lines = [
        f"Worlds: {', '.join(sorted(cells['world'].unique()))}; size `{settings['size']}` "
        f"({settings['size_text']}); world draws "
        f"(world seeds) {', '.join(str(s) for s in sorted(cells['world_seed'].unique()))}, each "
        f"with its own calibrator seed (`{settings['calibrator']}`, seeds "
        f"{calibrator_seeds_text(settings, cells)}) and "
        f"draw-order seed; {settings['trials']} draw orders per test question, "
        f"{settings['train_trials']} per training question for the choices made on the training "
        f"pools (auto-seq's floor share, the fallback peer), {settings['bootstrap']} bootstrap "
        f"resamples of the questions." + draws_sentence(settings, cells),
        "",
        METHODS_TEXT if verdict else LEGACY_METHODS_TEXT,
        "",
        "Figures: **draws to uniform-n** = the mean draws per question at which a method's "
        "cost–accuracy curve first reaches uniform best-of-n's accuracy (same rule, same "
        "orders) less 0.001 (Adaptive-Consistency's \"< 0.1 % drop\"), linear between sweep "
        "points; (saved) = 1 − draws / 64. **acc @ c** = accuracy at mean cost c (draws / 64), "
        "linear along the curve (— : outside the method's range, e.g. ESC's least cost is one "
        "window). ± = standard error over the world draws (sd / √draws; each draw has its own "
        "questions, pools, calibrator seed and orders); the bootstrap standard errors within a "
        "draw are in `summary.csv` (`*_se_boot`). The split `subtle` (auto-seq[calibrated] "
        "only) is the ID pools with the calibrated and raw-PRM question priors permuted across "
        "questions: a calibrator that is wrong about every question while the question states "
        "look as in training.",
        "",
        *verdict,
        "## Against the target: samples to reach uniform-64 (and -16)",
        "",
        target_text,
        "",
        *head_lines,
        "",
        "## What calibration adds",
        "",
        share_text,
        "",
        *share_lines,
        "",
        "## The shift check",
        "",
        "| world | split | world seed | shift AUC |",
        "|---|---|---|---|",
        *[f"| {r.world} | {r.split} | {r.world_seed} | {r.shift_auc:.3f} |"
          for r in auc.itertuples()],
        "",
        "Fallback peer chosen on the training pools (per rule and world draw): "
        + "; ".join(f"{r.world} {r.rule} w{r.world_seed}: {r.fallback}"
                    for r in fallbacks.itertuples()) + ".",
        "",
    ]  # fmt: skip
    for world, grp in agg.groupby("world", sort=False):
        lines += [f"## {world}", "", *world_table(grp), ""]
    again = f"{SCRIPT} --render" + ("" if name == PAGE else f" --out docs/results/{name}.md")
    return rp.write_page(name, TITLE, again, "\n".join(lines))


def smoke_cells() -> pd.DataFrame:
    """A hand-made ``cells.csv``: two world draws, four methods per rule and split, with the
    cost columns of a hand-made training set."""
    from dprm.ias.curves.costs import TrainingData

    rows = []
    for world_seed in (11, 12):
        for rule, peer in (("highest-last", "score-raw"), ("majority", "vote-lead")):
            for split in ("id", "ood"):
                shifted = split == "ood"
                for k, method in enumerate(("uniform", peer, "auto-seq[calibrated]",
                                            "auto-seq[truth]")):  # fmt: skip
                    row = {"rule": rule, "method": method, "world": "smoke",
                           "world_seed": world_seed, "calibrator_seed": 0, "split": split,
                           "falls_back_to": peer if shifted and method.startswith("auto")
                           else "", "fallback": peer, "shifted": shifted,
                           "target_u64": 0.5, "target_u16": 0.4,
                           "shift_auc": 0.9 if shifted else 0.5}  # fmt: skip
                    for j, fig in enumerate(FIGURES):
                        value = 60.0 - 10 * k if fig.startswith("draws") else 0.4 + 0.05 * k
                        row[fig] = value + 0.1 * j + 0.01 * world_seed
                        row[f"{fig}_se"] = 0.01
                    rows.append(row)
    return with_training_costs(pd.DataFrame(rows), TrainingData(1000, 12800))


def smoke_replicates(cells: pd.DataFrame, bootstrap: int = 4) -> pd.DataFrame:
    """Hand-made paired replicates of :func:`smoke_cells`: replicate 0 is the cell's figure,
    replicate b scales it by 1 + (b - 2) / 100."""
    rows = []
    for _, r in cells.iterrows():
        for b in range(bootstrap + 1):
            scale = 1.0 if b == 0 else 1 + (b - 2) / 100
            rows.append({"rule": r["rule"], "method": r["method"], "replicate": b,
                         **{fig: scale * float(r[fig]) for fig in FIGURES},
                         "world": r["world"], "world_seed": r["world_seed"], "split": r["split"],
                         "draw": r["world_seed"]})  # fmt: skip
    return pd.DataFrame(rows)


def twin_draws(presets: list[str], seeds_text: str) -> tuple[dict[str, list[int]], list[dict]]:
    """Each preset's world seeds (``--world-seeds``, default its report draws) and the
    pre-registration records; exits 2 (one line) on a development or unlisted draw."""
    seeds_of, records = {}, []
    for preset in presets:
        seeds = ([int(s) for s in seeds_text.split(",")] if seeds_text
                 else report_seeds(preset))  # fmt: skip
        records.append(prereg.require_report("adaptive_peers.py", preset,
                                             {"world_seeds": seeds}, draws_file()))  # fmt: skip
        seeds_of[preset] = seeds
    return seeds_of, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/adaptive-peers"))
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--world-seeds", default="",
                        help="world seeds (default: each preset's report draws in draws.toml; "
                             "development draws are refused)")  # fmt: skip
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--size", default="demo")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--train-trials", type=int, default=2)
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--bon", action="append", metavar="[SPLIT=]DIR",
                        help="test BoN sets instead of the twin grid (peer_sets.py)")  # fmt: skip
    parser.add_argument("--train-bon", type=Path, help="with --bon: its training BoN set")
    parser.add_argument("--calibrator", type=Path, action="append",
                        help="with --bon: a saved calibrator (repeat: one per seed)")  # fmt: skip
    parser.add_argument("--calibrator-seeds", default="",
                        help="with --bon: the calibrators' seeds, in order (default: each "
                             "calibrator's recorded seed); checked against draws.toml")  # fmt: skip
    parser.add_argument(
        "--question-resample",
        default=None,
        help="with --bon: the question resample the test sets are (draws.toml); several "
        "(1,2,3) split each test set into that many consecutive blocks, one a resample",
    )
    parser.add_argument("--world", default="", help="with --bon: the world's name")
    parser.add_argument("--out", type=Path, default=None,
                        help="the page (default: docs/results/adaptive-peers.md, honouring "
                             "DPRM_RESULTS_DIR); its CSVs go to the folder of its name")  # fmt: skip
    parser.add_argument("--render", action="store_true", help="re-render from the stored CSVs")
    parser.add_argument("--smoke", action="store_true",
                        help="aggregate and render a hand-made cells table into --root")  # fmt: skip
    args = parser.parse_args()
    args.rules = tuple(args.rules.split(","))
    name = PAGE
    if args.out is not None:
        rp.RESULTS, name = args.out.parent, args.out.stem
    elif args.smoke and "DPRM_RESULTS_DIR" not in os.environ:
        rp.RESULTS = args.root / "results"
    if args.render:
        print(render(name))
        return
    t0 = time.time()
    records = []
    if args.smoke:
        cells = smoke_cells()
        curves = pd.DataFrame({"rule": ["majority"], "method": ["uniform"], "knob": [1.0]})
        replicates = smoke_replicates(cells)
    elif args.bon is not None:  # one world's BoN sets: peer_sets.py runs, stores and renders
        import peer_sets

        print(f"wrote {peer_sets.main(args, name)} in {(time.time() - t0) / 60:.1f} min")
        return
    else:
        seeds_of, records = twin_draws(args.presets.split(","), args.world_seeds)
        frames, curve_frames, rep_frames = [], [], []
        for preset, seeds in seeds_of.items():
            for k, world_seed in enumerate(seeds):
                c, cv, reps = run_world(args.root, preset, world_seed, k, args)
                frames.append(c)
                curve_frames.append(cv)
                rep_frames.append(reps)
        cells, curves = pd.concat(frames, ignore_index=True), pd.concat(curve_frames)
        replicates = pd.concat(rep_frames, ignore_index=True)
    agg = aggregate(cells)
    command = " ".join(["PYTHONPATH=src python benchmarks/experiments/adaptive_peers.py",
                        *sys.argv[1:]])  # fmt: skip
    settings = {
        "size": args.size, "size_text": _size_text(args.size), "calibrator": CALIBRATOR,
        "trials": args.trials, "train_trials": args.train_trials, "bootstrap": args.bootstrap,
        "elapsed_min": round((time.time() - t0) / 60, 1), "preregistered": records,
    }  # fmt: skip
    cells_seen(settings)
    if args.smoke:
        settings.update(size="smoke", size_text="a hand-made cells table, no world")
    store(cells, curves, agg, name, command.strip(), settings, replicates)
    path = render(name)
    print(f"wrote {path} in {(time.time() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
