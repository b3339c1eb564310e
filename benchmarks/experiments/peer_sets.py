"""The peer table on BoN sets given on the command line (a recipe's): ``adaptive_peers.py --bon``.

One world, given as its test BoN sets (``--bon id=DIR --bon ood=DIR``), its training BoN set
(``--train-bon DIR``) and saved calibrators (``--calibrator DIR``, repeated: one per calibrator
seed). Every (calibrator seed, split) cell traces every method's cost-accuracy curve on the same
draw orders (:func:`dprm.ias.peers.curves.set_curves`, draw-order seed = the calibrator's index),
as the twin grid does, and the page reports the mean over calibrator seeds with two standard
errors: a bootstrap over questions (within a seed, mean over seeds) and the spread over the
seeds (calibrator seed and draw orders together).

On a set with no true distribution of p (real data), ``auto-seq[truth]`` takes each question's
pool solve rate (the share of its candidates that are correct: the Monte Carlo truth of the
question, read from the labels) as a point prior, with the calibrator's candidate estimates: the
limit of a calibrator that knew every question's p, which calibration's share is measured
against. The training pool gets its own solve rates, so the floor share it fits is
consistent.

Cells are cached under ``--root`` keyed by the settings and the content of every input, so a
rerun resumes and a changed input is noticed.

The world must be pre-registered (benchmarks/experiments/draws.toml): its calibrator seeds
(``--calibrator-seeds``, default each calibrator's recorded seed) and ``--question-resample``
must be report draws, or the run stops before computing (one line, exit 2). Several resamples
(``--question-resample 1,2,3``) split every test set into that many consecutive blocks of
questions, block i being the i-th resample named: each (resample, calibrator) pair is one draw
of the page (its own draw-order seed), so the paired statistics run over resamples and seeds.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_page as rp  # noqa: E402

KIND = "bon-sets"
COSTS = ("0.05", "0.1", "0.25")


def parse_sets(entries: list[str]) -> dict[str, Path]:
    """``SPLIT=DIR`` (or a bare ``DIR``: split ``test``) entries -> split -> folder.

    Raises:
        SystemExit(2): a split named twice or a folder that does not exist (one line).
    """
    sets: dict[str, Path] = {}
    for entry in entries:
        split, sep, path = entry.partition("=")
        split, path = (split, path) if sep else ("test", entry)
        if not split or split in sets:
            _fail(f"--bon {entry}: split {split!r} named twice or empty")
        if not (Path(path) / "responses.parquet").exists():
            _fail(f"--bon {entry}: {path}/responses.parquet not found (not a BoN set)")
        sets[split] = Path(path)
    return sets


def _fail(message: str) -> None:
    print(f"adaptive_peers.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def pool_rates(bon) -> np.ndarray:
    """Each question's share of correct candidates in its pool [Q] (``bon.questions`` order)."""
    rate = bon.responses.groupby("question_id", sort=False)["correct"].mean()
    return rate.reindex(bon.questions["question_id"]).to_numpy(np.float64)


def pool_truth(bon, candidate: np.ndarray):
    """``auto-seq[truth]`` on a set without a true distribution: the pool solve rate as a
    point prior, with ``candidate`` [R] as its candidate estimates."""
    from dprm.ias.paper.estimates import Estimate

    return Estimate("truth", "point", p=pool_rates(bon), candidate=candidate)


def _auroc(score: np.ndarray, label: np.ndarray) -> float:
    """P(score of a correct > score of a wrong), ties counted half; NaN with one class."""
    pos, neg = score[label], score[~label]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    ranks = pd.Series(np.concatenate([pos, neg])).rank().to_numpy()
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def set_facts(bon, split: str) -> dict:
    """What a set can show: its size, solve rates and whether the PRM ranks its candidates
    (AUROC of the last-step score for correct against wrong candidates, pooled and within a
    question, mean over questions with both)."""
    resp = bon.responses
    correct = resp["correct"].to_numpy(bool)
    score = resp["prm_score"].to_numpy(np.float64)
    within = [
        _auroc(g["prm_score"].to_numpy(np.float64), g["correct"].to_numpy(bool))
        for _, g in resp.groupby("question_id", sort=False)
    ]
    within = np.asarray(within)
    rates = pool_rates(bon)
    return {
        "split": split,
        "questions": len(bon.questions),
        "pool": int(resp.groupby("question_id").size().median()),
        "solve_rate": float(rates.mean()),
        "any_correct": float((rates > 0).mean()),
        "auroc_pooled": _auroc(score, correct),
        "auroc_within": float(np.nanmean(within)) if np.isfinite(within).any() else np.nan,
        "questions_both": int(np.isfinite(within).sum()),
    }


def evaluate(bon, train, model, rules, trials, train_trials, bootstrap, seed):
    """Summary rows, mean curves and paired bootstrap replicates of every method on one set
    (all rules), with the pool solve-rate ceiling as ``auto-seq[truth]`` where the set has no
    truth of its own."""
    from dprm.ias.curves.paired import figure_replicates
    from dprm.ias.learnt.inputs import CalibratorInput
    from dprm.ias.peers.curves import prior_inputs, set_curves, summarise

    priors = prior_inputs(model, bon, train)
    if not any(p.label == "truth" for p in priors):
        calibrated = next(p for p in priors if p.label == "calibrated")
        priors = (*priors, CalibratorInput(
            "truth", pool_truth(bon, calibrated.test_candidates),
            pool_truth(train, calibrated.train_candidates),
        ))  # fmt: skip
    rows, curves, reps = [], [], []
    for rule in rules:
        cs = set_curves(bon, train, priors, rule, trials=trials, seed=seed,
                        train_trials=train_trials)  # fmt: skip
        rows.append(summarise(cs, bootstrap=bootstrap, seed=seed)
                    .assign(fallback=cs.fallback, shifted=cs.extra["shifted"]))  # fmt: skip
        reps.append(figure_replicates(cs, bootstrap=bootstrap, seed=seed))
        for name, c in cs.curves.items():
            curves.append(pd.DataFrame({
                "rule": rule, "method": name, "knob": c.levels,
                "draws": c.draws.mean(axis=1), "accuracy": c.accuracy.mean(axis=1),
            }))  # fmt: skip
    return (pd.concat(rows, ignore_index=True), pd.concat(curves, ignore_index=True),
            pd.concat(reps, ignore_index=True))  # fmt: skip


def question_block(bon, index: int, blocks: int):
    """The ``index``-th of ``blocks`` consecutive blocks of ``bon``'s questions (file order),
    with their candidates (and their hidden states); ``bon`` itself when ``blocks`` is 1."""
    import dataclasses

    if blocks == 1:
        return bon
    count = len(bon.questions)
    lo, hi = index * count // blocks, (index + 1) * count // blocks
    questions = bon.questions.iloc[lo:hi].reset_index(drop=True)
    keep = bon.responses["question_id"].isin(set(questions["question_id"])).to_numpy()
    return dataclasses.replace(
        bon, questions=questions, hidden=bon.hidden[lo:hi],
        responses=bon.responses[keep].reset_index(drop=True),
        response_hidden=None if bon.response_hidden is None else bon.response_hidden[keep],
    )  # fmt: skip


def _content(path: Path) -> str:
    from dprm.digests import digest

    return digest(path) or "missing"


def run(args, sets: dict[str, Path], world: str):
    """Every (question resample, calibrator seed, split) cell, cached under ``args.root``;
    returns the cells, the curves, the facts of every set and the paired replicates (``draw``:
    the cell's draw index, resample-major)."""
    import adaptive_peers as ap
    import torch

    from dprm.data import read_bon_set
    from dprm.ias.curves.costs import TrainingData
    from dprm.models import load

    torch.set_num_threads(1)
    train = read_bon_set(args.train_bon, check_hidden=False)
    bons = {split: read_bon_set(path, check_hidden=False) for split, path in sets.items()}
    facts = [set_facts(train, "train")] + [set_facts(b, s) for s, b in bons.items()]
    seeds = getattr(args, "calibrator_seed_values", None)  # set by :func:`preregistered`
    resamples = getattr(args, "question_resample_values", None) or [None]
    for split, whole in bons.items():
        if len(whole.questions) < len(resamples):
            _fail(f"--bon {split}={sets[split]}: {len(whole.questions)} questions cannot make "
                  f"{len(resamples)} question resamples")  # fmt: skip
    models = [load(calibrator) for calibrator in args.calibrator]
    trainings = [TrainingData.of(model, train) for model in models]
    frames, curve_frames, rep_frames = [], [], []
    for r, resample in enumerate(resamples):
        for k, calibrator in enumerate(args.calibrator):
            model, training = models[k], trainings[k]
            draw = r * len(args.calibrator) + k
            for split, whole in bons.items():
                bon = question_block(whole, r, len(resamples))
                settings = {"rules": list(args.rules), "trials": args.trials, "seed": draw,
                            "train_trials": args.train_trials, "bootstrap": args.bootstrap,
                            "test": _content(sets[split]), "train": _content(args.train_bon),
                            "calibrator": _content(calibrator), "version": 2}  # fmt: skip
                if len(resamples) > 1:
                    settings["block"] = [r, len(resamples)]
                key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
                cell = args.root / "sets" / f"{world}-{split}-s{draw}-{key[:12]}"
                ap.CELLS_SEEN["reused" if (cell / ap.REPLICATES).exists() else "computed"] += 1
                if not (cell / ap.REPLICATES).exists():
                    t0 = time.time()
                    summary, curves, reps = evaluate(bon, train, model, args.rules, args.trials,
                                                     args.train_trials, args.bootstrap, draw)  # fmt: skip
                    _atomic_csv(curves, cell / "curves.csv")
                    _atomic_csv(summary, cell / "summary.csv")
                    ap.write_csv_gz(reps, cell / ap.REPLICATES)  # last: the cell is complete
                    print(f"{world} {split} seed {draw}: {time.time() - t0:.0f} s", flush=True)
                meta = {"world": world, "world_seed": draw, "split": split,
                        "calibrator_seed": seeds[k] if seeds else k}  # fmt: skip
                if resample is not None:
                    meta["question_resample"] = resample
                summary = ap.with_training_costs(pd.read_csv(cell / "summary.csv"), training)
                frames.append(summary.assign(**meta))
                curve_frames.append(pd.read_csv(cell / "curves.csv").assign(**meta))
                rep_frames.append(pd.read_csv(cell / ap.REPLICATES).assign(**meta, draw=draw))
    return (pd.concat(frames, ignore_index=True), pd.concat(curve_frames), facts,
            pd.concat(rep_frames, ignore_index=True))  # fmt: skip


def _atomic_csv(frame: pd.DataFrame, path: Path) -> None:
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    frame.to_csv(tmp, index=False)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- the page
def _pm(value: float, boot: float, seeds: float, digits: int = 3) -> str:
    if not np.isfinite(value):
        return "—"
    text = f"{value:.{digits}f}"
    if np.isfinite(boot):
        text += f" ± {boot:.{digits}f}"
    if np.isfinite(seeds):
        text += f" [{seeds:.{digits}f}]"
    return text


def _draws(row, target: str, saved: bool) -> str:
    fig = f"draws_to_{target}"
    if not np.isfinite(row[fig]):
        return f"not reached ({int(row[f'{fig}_reached'])}/{int(row['draws'])} seeds)"
    text = _pm(row[fig], row[f"{fig}_se_boot"], row[f"{fig}_se_draws"], 1)
    return text + (f" ({1 - row[fig] / 64:+.0%})" if saved else "")


def table(agg: pd.DataFrame) -> list[str]:
    """The peer table: rule x split x method (with the cost columns where stored)."""
    import adaptive_peers as ap

    return rp.peer_table(
        agg, lambda r: _draws(r, "u64", True), lambda r: _draws(r, "u16", False),
        lambda r, c: _pm(r[f"acc_at_{c}"], r[f"acc_at_{c}_se_boot"], r[f"acc_at_{c}_se_draws"]),
        costs=ap.costs_cell if "labelled_samples" in agg else None,
    )  # fmt: skip


def uniform_lines(curves: pd.DataFrame) -> list[str]:
    """Uniform best-of-n's accuracy at n = 1, 4, 16, 64 per rule and split (mean over seeds)."""
    uni = curves[curves["method"] == "uniform"]
    mean = uni.groupby(["rule", "split", "knob"], sort=False)["accuracy"].mean()
    lines = ["| rule | split | n = 1 | n = 4 | n = 16 | n = 64 |", "|---|---|---|---|---|---|"]
    for (rule, split), grp in mean.groupby(level=["rule", "split"], sort=False):
        by = grp.droplevel(["rule", "split"])
        cells = [f"{by.loc[float(n)]:.3f}" if float(n) in by.index else "—" for n in (1, 4, 16, 64)]
        lines.append(f"| {rule} | {split} | " + " | ".join(cells) + " |")
    return lines


def facts_lines(facts: pd.DataFrame) -> list[str]:
    lines = [
        "| set | questions | pool | mean solve rate | questions with a correct candidate | "
        "PRM AUROC, pooled | PRM AUROC within a question (questions) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in facts.itertuples():
        lines.append(
            f"| {r.split} | {r.questions} | {r.pool} | {r.solve_rate:.3f} | {r.any_correct:.1%} | "
            f"{r.auroc_pooled:.3f} | {r.auroc_within:.3f} ({r.questions_both}) |"
        )
    return lines


def store(cells, curves, facts, agg, name: str, command: str, settings: dict,
          replicates: pd.DataFrame) -> None:  # fmt: skip
    """Write the page's CSVs and ``source.json`` (``settings['kind']`` marks this page)."""
    import peer_stats

    out = rp.folder(name)
    _atomic_csv(cells, out / "cells.csv")
    _atomic_csv(curves, out / "curves.csv")
    _atomic_csv(agg, out / "summary.csv")
    _atomic_csv(pd.DataFrame(facts), out / "sets.csv")
    _atomic_csv(peer_stats.headline(replicates, cells)[1], out / "headline.csv")
    _atomic_csv(peer_stats.calibration_share(replicates, cells)[1], out / "calibration_share.csv")
    import adaptive_peers as ap

    rp.record_source(name, command, note=ap.run_note(settings))
    source = {**rp.read_source(name), "settings": {**settings, "kind": KIND}}
    tmp = out / "source.json.tmp"
    tmp.write_text(json.dumps(source, indent=2) + "\n")
    tmp.replace(out / "source.json")


def render(name: str) -> Path:
    """Write ``docs/results/<name>.md`` from the stored CSVs and ``source.json`` alone."""
    import adaptive_peers as ap

    out = rp.folder(name)
    settings = rp.read_source(name)["settings"]
    cells = pd.read_csv(out / "cells.csv")
    curves = pd.read_csv(out / "curves.csv")
    facts = pd.read_csv(out / "sets.csv")
    agg = pd.read_csv(out / "summary.csv")
    agg["falls_back_to"] = agg["falls_back_to"].fillna("")
    target_text, head_lines, share_text, share_lines, verdict = ap.statistics_sections(
        name, cells, agg
    )
    auc = cells.groupby(["split", "world_seed"])["shift_auc"].first().unstack("world_seed")
    fallbacks = cells.groupby(["rule", "world_seed"])["fallback"].first().reset_index()
    seed_column = "calibrator_seed" if "preregistered" in settings else "world_seed"
    seeds = sorted(cells[seed_column].unique())
    world = ", ".join(sorted(cells["world"].unique()))
    by_resample = "question_resample" in cells
    names = (cells.groupby("world_seed")[["question_resample", "calibrator_seed"]].first()
             if by_resample else None)  # fmt: skip

    def draw_name(draw) -> str:
        if names is None:
            return f"seed {draw}"
        resample, seed = names.loc[draw]
        return f"r{int(resample)}/s{int(seed)}"

    unit = "draws" if by_resample else "calibrator seeds"
    spread = ("questions, calibrator and draw orders" if by_resample
              else "calibrator and draw orders")  # fmt: skip
    calibrators = (f"{len(seeds)} calibrators (`{settings['calibrator']}`, seeds "
                   f"{', '.join(str(s) for s in seeds)})")  # fmt: skip
    if by_resample:
        resamples = sorted(cells["question_resample"].unique())
        data = (f"its test sets split into {len(resamples)} question resamples (consecutive "
                f"blocks of each set's questions: resamples {', '.join(map(str, resamples))}) "
                f"x {calibrators} = {cells['world_seed'].nunique()} draws")  # fmt: skip
    else:
        data = f"one draw of its data (the BoN sets below), {calibrators}"
    lines = [
        f"World: `{world}`, {data}, each with its own draw-order seed; "
        f"{settings['trials']} draw orders per test question, {settings['train_trials']} per "
        f"training question for the choices made on the training pool (auto-seq's floor share, "
        f"the fallback peer); {settings['bootstrap']} bootstrap resamples of the questions. "
        f"Rules: {', '.join(f'`{r}`' for r in settings['rules'])}."
        + ap.draws_sentence(settings, cells),
        "",
        "## What this world can show",
        "",
        "The sets (the calibrator trains on the `train` split's calibration records; the "
        "`train` pool is where auto-seq's floor share and the fallback peer are chosen):",
        "",
        *facts_lines(facts),
        "",
        "Uniform best-of-n (accuracy of the selected answer; the targets of the samples-to-match "
        "figure are n = 16 and n = 64):",
        "",
        *uniform_lines(curves),
        "",
        "How to read it. A within-question AUROC near 0.5 means the PRM's last-step score "
        "barely ranks a question's candidates, so the score-threshold peers (`score-raw`, "
        "`score-calibrated`) have little to stop on. Where uniform best-of-n stops gaining (or "
        "loses) between n = 16 and n = 64, uniform reaches best-of-64's accuracy itself well "
        "before 64 draws, and every method's samples-to-match mostly measures that flat curve, "
        "not the policy. A question with no correct candidate in its pool is lost to every "
        f"method; one question is {1 / facts['questions'].max():.3f} of accuracy here, so "
        "compare differences with the bootstrap standard errors (±).",
        "",
        "Methods: as on [adaptive-peers.md](adaptive-peers.md) (the same code, "
        "`dprm.ias.peer_curves`). `auto-seq[truth]` on this world: each question's pool solve "
        "rate (its share of correct candidates, read from the labels) as a point prior, with the "
        "calibrator's candidate estimates; the limit of a calibrator that knew p.",
        "",
        f"Figures as there. In every cell, `x ± b [s]`: x the mean over the {unit}, b "
        f"the standard error of a bootstrap over questions (mean over the {unit}), s the "
        f"standard error over the {unit} (sd / √{len(cells['world_seed'].unique())}: "
        f"{spread} together). Draws to "
        "uniform-n: mean draws per question to reach uniform best-of-n's accuracy (same rule, "
        "same orders) less 0.001; (saved) = 1 − draws / 64.",
        "",
        *verdict,
        "## Against the target: samples to reach uniform-64 (and -16)",
        "",
        target_text if "preregistered" in settings else
        "`auto-seq[calibrated]` against the best calibrator-free peer (fewest draws to the "
        "target), means over seeds; ID needs ratio ≤ 0.7 (≥ 30 % fewer draws), OOD ≤ 1.1.",
        "",
        *head_lines,
        "",
        "## What calibration adds",
        "",
        share_text if "preregistered" in settings else
        "Share = (auto-seq[calibrated] − best calibrator-free) / (auto-seq[truth] − best "
        "calibrator-free), accuracy at equal mean cost; calibrator-free = the peers and "
        "auto-seq[base] / auto-seq[none].",
        "",
        *share_lines,
        "",
        "## The shift check",
        "",
        "Shift AUC (training pool's question states against the split's; > 0.75: shifted, "
        "auto-seq falls back to the peer chosen on the training pool), per "
        + ("draw (rN/sM: question resample N, calibrator seed M):" if by_resample
           else "calibrator seed:"),
        "",
        "| split | " + " | ".join(draw_name(s) for s in auc.columns) + " |",
        "|---|" + "---|" * len(auc.columns),
        *[f"| {split} | " + " | ".join(f"{v:.3f}" for v in row) + " |"
          for split, row in auc.iterrows()],
        "",
        "Fallback peer chosen on the training pool: "
        + "; ".join(f"{r.rule} {draw_name(r.world_seed)}: {r.fallback}"
                    for r in fallbacks.itertuples())
        + ".",
        "",
        "## The table",
        "",
        *table(agg),
        "",
        f"CSVs: [{name}/summary.csv]({name}/summary.csv) (every figure, both standard errors), "
        f"[{name}/cells.csv]({name}/cells.csv) (every seed), [{name}/curves.csv]({name}/"
        f"curves.csv) (the mean curves), [{name}/sets.csv]({name}/sets.csv).",
        "",
    ]  # fmt: skip
    again = f"{ap.SCRIPT} --render --out docs/results/{name}.md"
    return rp.write_page(name, ap.TITLE, again, "\n".join(lines))


def main(args, name: str) -> Path:
    """``adaptive_peers.py --bon ...``: run (or resume) every cell, store, render."""
    import adaptive_peers as ap

    if args.train_bon is None or not args.calibrator:
        _fail("--bon needs --train-bon and at least one --calibrator")
    sets = parse_sets(args.bon)
    world = args.world or args.train_bon.resolve().parents[1].name
    record = preregistered(args, world)
    t0 = time.time()
    cells, curves, facts, replicates = run(args, sets, world)
    agg = ap.aggregate(cells)
    settings = {"calibrator": Path(args.calibrator[0]).parent.name or "calibrator",
                "rules": list(args.rules), "trials": args.trials,
                "train_trials": args.train_trials, "bootstrap": args.bootstrap,
                "sets": {s: str(p) for s, p in sets.items()},
                "elapsed_min": round((time.time() - t0) / 60, 1),
                "preregistered": [record]}  # fmt: skip
    ap.cells_seen(settings)
    store(cells, curves, facts, agg, name, " ".join([ap.SCRIPT, *sys.argv[1:]]), settings,
          replicates)  # fmt: skip
    return render(name)


def calibrator_seeds(args) -> list[int]:
    """The calibrators' seeds: ``--calibrator-seeds`` (one per ``--calibrator``, checked
    against a recorded seed) or each calibrator's recorded seed (``info["seed"]``).

    Raises:
        SystemExit(2): a count mismatch, a seed that disagrees with the record, or no seed.
    """
    from dprm.models import load

    given = [int(s) for s in args.calibrator_seeds.split(",")] if args.calibrator_seeds else None
    if given is not None and len(given) != len(args.calibrator):
        _fail(f"--calibrator-seeds names {len(given)} seeds for {len(args.calibrator)} "
              "calibrators")  # fmt: skip
    seeds = []
    for k, path in enumerate(args.calibrator):
        recorded = (load(path).info or {}).get("seed")
        if given is None and recorded is None:
            _fail(f"--calibrator {path}: no recorded seed; name it with --calibrator-seeds")
        if given is not None and recorded is not None and int(recorded) != given[k]:
            _fail(f"--calibrator {path}: recorded seed {recorded}, --calibrator-seeds says "
                  f"{given[k]}")  # fmt: skip
        seeds.append(given[k] if given is not None else int(recorded))
    return seeds


def preregistered(args, world: str) -> dict:
    """The pre-registration record of this run; stops (one line, exit 2) unless the
    calibrator seeds and the question resample are report draws of ``world``."""
    import adaptive_peers as ap
    import preregistration as prereg

    if args.question_resample is None:
        _fail("--bon needs --question-resample (the pre-registered resample the test sets are)")
    try:
        resamples = [int(r) for r in str(args.question_resample).split(",")]
    except ValueError:
        _fail(f"--question-resample {args.question_resample}: expected resamples such as 1,2,3")
    if len(set(resamples)) != len(resamples):
        _fail(f"--question-resample {args.question_resample}: a resample named twice")
    args.question_resample_values = resamples if len(resamples) > 1 else None
    args.calibrator_seed_values = calibrator_seeds(args)
    draws = {"calibrator_seeds": args.calibrator_seed_values,
             "question_resamples": resamples}  # fmt: skip
    return prereg.require_report("adaptive_peers.py", world, draws, ap.draws_file())
