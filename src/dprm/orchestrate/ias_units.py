"""The IAS units of a run: the sweeps of each calibrator and its "does it pay?" rows.

One unit per (world, split, calibrator, seed), plus the reference unit (Base, the synthetic
truth and plain best-of-n: :data:`~dprm.runner.layout.REFERENCE`). :func:`pays_plan` decides,
from what the BoN sets on disk offer, which selection rules run and whether ``auto`` /
``auto-seq`` rows can be learned on the training BoN set.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dprm.orchestrate.calibrator_units import is_trained, model_inputs
from dprm.orchestrate.world_units import promised_sets
from dprm.runner.layout import IAS_SPLITS, REFERENCE, TRAIN_SPLIT
from dprm.runner.units import Unit

if TYPE_CHECKING:
    from dprm.runner.pipeline import Pipeline


def _mc_seed(world: str, split: str) -> int:
    """One Monte Carlo seed per (world, split): every method sees the same random draws."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{world}/{split}".encode()).digest()[:4], "little")


@dataclass(frozen=True)
class PaysPlan:
    """What the "does it pay?" rows of one (world, split) can be (:func:`pays_plan`).

    Attributes:
        rules: the selection rules that run (the requested ones the sets support).
        train_bon: the training BoN set ``auto`` learns on, or None (no ``auto`` rows).
        notes: one line per thing skipped, and why.
        states: whether the test set and ``train_bon`` both have candidate hidden states
            (BoN contract v2), which ``auto-seq`` needs for a calibrator that reads hidden
            states (True when the world is not on disk: a synthetic world has them).
    """

    rules: tuple[str, ...]
    train_bon: str | None
    notes: tuple[str, ...] = ()
    states: bool = True


def _bon_features(bon_dir: Path) -> set[str] | None:
    """What a BoN set on disk offers the selection rules, from its meta.json and the schema of
    its responses (no data read): ``answers`` (contract v2), ``steps`` (per-step scores),
    ``states`` (candidate hidden states); None when the set is not on disk."""
    meta_path = bon_dir / "meta.json"
    if not meta_path.exists():
        return None
    import pyarrow.parquet as pq

    from dprm.data.contract import BON_STEP_SCORES, RESPONSE_HIDDEN_FILE
    from dprm.io import read_json

    meta = read_json(meta_path)
    names = set(pq.read_schema(bon_dir / "responses.parquet").names)
    features = set()
    if int(meta.get("bon_version", 1)) >= 2 and "answer" in names:
        features.add("answers")
    if BON_STEP_SCORES in names:
        features.add("steps")
    if (bon_dir / RESPONSE_HIDDEN_FILE).exists():
        features.add("states")
    return features


def pays_plan(
    world_dir: str | Path, split: str, rules: Sequence[str], train_promised: bool = True
) -> PaysPlan:
    """The rules and training set of the "does it pay?" rows of one (world, split).

    ``auto`` needs the world's ``train/bon`` (synthetic worlds write one; a recipe's real data
    has none: then uniform and oracle rows only). Voting rules (``weighted-*``, ``majority``)
    need final answers (BoN contract v2) in the test set and, for ``auto``, in ``train/bon``;
    ``*-min`` / ``*-product`` need per-step scores; ``*-calibrated`` needs candidate hidden
    states. A rule a set cannot serve is skipped with a note. When the world is not on disk
    (a synthetic world deleted after use, regenerated before the unit runs) every rule is kept.
    ``train_promised`` False: the world does not promise a ``train/bon`` (a recipe without
    ``[bon] train``), so one left on disk by an earlier recipe is never read.
    """
    from dprm.ias.selection.rules import parse_rule

    world_dir = Path(world_dir)
    test = _bon_features(world_dir / split / "bon")
    train_dir = world_dir / TRAIN_SPLIT / "bon"
    train = _bon_features(train_dir) if train_promised else None
    if test is None and not train_promised:
        return PaysPlan(tuple(rules), None)
    if test is None:  # not on disk now: a synthetic world (v2, with train/bon)
        return PaysPlan(tuple(rules), str(train_dir))
    notes = []
    if train is None:
        notes.append(
            f"{world_dir.name}/{split}: no {TRAIN_SPLIT}/bon, so no 'auto' rows "
            "(uniform and oracle rows kept)"
        )
    kept = []
    for rule in rules:
        kind, weight = parse_rule(rule)
        need = {"answers"} if kind in ("weighted", "majority") else set()
        need |= {"steps"} if weight in ("min", "product") else set()
        need |= {"states"} if weight == "calibrated" else set()
        missing = (need - test) | (need - train if train is not None else set())
        if missing:
            what = {
                "answers": "final answers (it is BoN contract v1)",
                "steps": "per-step scores",
                "states": "candidate hidden states",
            }
            notes.append(
                f"{world_dir.name}/{split}: rule {rule!r} skipped: the BoN set has no "
                + ", no ".join(what[m] for m in sorted(missing))
            )
            continue
        kept.append(rule)
    states = "states" in test and train is not None and "states" in train
    train_bon = None if train is None else str(train_dir)
    return PaysPlan(tuple(kept), train_bon, tuple(notes), states)


def _for_rules(bon, rules: Sequence[str]):
    """``bon`` without its per-step scores when no rule aggregates them (``*-min`` /
    ``*-product``): the candidate tables then skip a per-candidate pass over the steps."""
    import dataclasses

    from dprm.data.contract import BON_STEP_SCORES
    from dprm.ias.selection.rules import parse_rule

    if BON_STEP_SCORES not in bon.responses.columns:
        return bon
    if any(parse_rule(r)[1] in ("min", "product") for r in rules):
        return bon
    return dataclasses.replace(bon, responses=bon.responses.drop(columns=BON_STEP_SCORES))


@functools.lru_cache(maxsize=2)
def _read_train_bon(path: str, stamp: tuple):
    """A world's ``train/bon``, read once per process for all its IAS units (``stamp``: the
    files' sizes and modification times, so a set changed on disk is read again)."""
    from dprm.data import read_bon_set

    return read_bon_set(path, check_hidden=False)


def _stamp(path: str) -> tuple:
    return tuple(
        (p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(Path(path).iterdir())
    )


def _pays_rows(
    bon,
    estimates: list,
    models: dict,
    method: str,
    plan: PaysPlan,
    *,
    beta: float,
    vote_trials: int,
    seed: int,
    sequential: bool = False,
) -> tuple[Any, tuple[str, ...]]:
    """The "does it pay?" rows of one IAS unit (:func:`dprm.ias.curves.pays.run_pays`).

    The reference unit keeps every row (uniform, oracle, oracle-p, and ``auto`` of Base and
    the truth); a calibrator's unit keeps its own rows (``auto``, and the reference rows of a
    rule weighted by its own candidate estimates, ``rule[method]``), so uniform and oracle are
    computed once per (world, split) and every unit uses the same Monte Carlo orders.

    ``sequential`` (a calibrator's unit, with a training set): also its ``auto-seq`` rows
    (:mod:`dprm.ias.sequential`), which read each candidate's calibrated estimate on the test
    and the training set; a calibrator that reads hidden states is skipped, with a note, when
    either set has no candidate hidden states (BoN contract v1).

    Returns:
        (rows, notes): the rows, and one line per thing skipped.
    """
    from dprm.ias.curves.pays import COST_GRID, run_pays
    from dprm.ias.learnt.allocation import REPORT_COSTS
    from dprm.ias.learnt.inputs import CalibratorInput
    from dprm.ias.paper.estimates import candidate_estimates, estimate_from_model, truth_estimate

    bon = _for_rules(bon, plan.rules)
    train = None
    if plan.train_bon is not None:
        train = _for_rules(_read_train_bon(plan.train_bon, _stamp(plan.train_bon)), plan.rules)
    calibrated_rules = any(r.endswith("-calibrated") for r in plan.rules)
    notes: list[str] = []
    sequential = sequential and method != REFERENCE and train is not None
    inputs = []
    for est in estimates:
        model = models.get(est.method)
        if model is None:  # the synthetic truth: its estimate on the training set, if any
            train_est = truth_estimate(train) if train is not None else None
            inputs.append(CalibratorInput(est.method, est, train_est))
            continue
        # a *-calibrated rule weights the pools with every candidate's calibrated estimate;
        # auto-seq reads them on both sets
        candidates = calibrated_rules
        if sequential:
            lacking = [
                what
                for what, data in (("test", bon), (TRAIN_SPLIT, train))
                if data.response_hidden is None
            ]
            if model.uses_hidden and lacking:
                notes.append(
                    f"no 'auto-seq' rows of {est.method}: it reads hidden states and the "
                    f"{' and '.join(lacking)} BoN set{'s have' if len(lacking) > 1 else ' has'} "
                    "no candidate hidden states"
                )
            else:
                candidates = True
        test = est.with_candidate(candidate_estimates(model, bon)) if candidates else est
        train_est = None
        if train is not None:
            train_est = estimate_from_model(model, train, est.method, beta=beta)
            if candidates:
                train_est = train_est.with_candidate(candidate_estimates(model, train))
        inputs.append(CalibratorInput(est.method, test, train_est))
    # the reference's lines are drawn in the IAS figures (a cost grid); a calibrator's auto
    # rows are read at the report's costs only (each cost is an allocation to evaluate)
    costs = COST_GRID if method == REFERENCE else REPORT_COSTS
    rows = run_pays(
        bon,
        inputs,
        rules=plan.rules,
        train_bon=train,
        costs=costs,
        trials=vote_trials,
        seed=seed,
        references=method == REFERENCE,  # a calibrator's unit: its own rows only
        sequential=sequential,
    )
    if rows.empty:
        return rows, tuple(notes)
    if method != REFERENCE:
        own = (rows["method"] == method) | rows["rule"].astype(str).str.endswith(f"[{method}]")
        rows = rows[own]
    # the columns of run_sweeps' rows that these rows do not have (as dprm ias writes them)
    rows = rows.assign(C=np.nan, accuracy_mc=np.nan, n_questions=len(bon.questions))
    return rows.reset_index(drop=True), tuple(notes)


def sweep_one(
    bon_dir: str,
    out: str,
    world: str,
    split: str,
    method: str,
    seed: int,
    model_dir: str | None,
    beta: float,
    mc_trials: int,
    rules: Sequence[str] = (),
    vote_trials: int = 64,
    sequential: bool = False,
    train_promised: bool = True,
) -> dict:
    """The IAS sweeps of one calibrator (or, for :data:`REFERENCE`, of Base and the truth),
    and its "does it pay?" rows (:func:`_pays_rows`) for each of ``rules`` (``sequential``: a
    calibrator's ``auto-seq`` rows too).

    Module level with plain arguments, so any executor (worker process, Ray, SLURM) can run it.

    Returns:
        ``{"pays_notes": [...]}``: what the "does it pay?" rows skipped (:func:`pays_plan`,
        and a calibrator's ``auto-seq`` rows without the candidate states it needs).
    """
    import pandas as pd

    from dprm.data import read_bon_set
    from dprm.ias import Pools, estimate_from_model, run_sweeps, truth_estimate, uniform_curve
    from dprm.ias.outputs import write_ias_outputs

    bon = read_bon_set(bon_dir, check_hidden=False)
    pools = Pools.from_bon(bon)
    uniform = None
    if method == REFERENCE:
        from dprm.models.raw_score import RawScoreCalibrator

        models = {"base": RawScoreCalibrator(bon.hidden_dim)}
        estimates = [estimate_from_model(models["base"], bon, "base")]
        truth = truth_estimate(bon)
        if truth is not None:
            estimates.append(truth)
        uniform = uniform_curve(pools)
    else:
        from dprm.models import load

        models = {method: load(model_dir)}
        estimates = [estimate_from_model(models[method], bon, method, beta=beta)]
    # The greedy sweep (cost-aware allocation, beyond the paper) rides along: same estimates.
    mc_seed = _mc_seed(world, split)
    summary, budgets = run_sweeps(pools, estimates, mc_trials=mc_trials, seed=mc_seed, greedy=True)
    notes: tuple[str, ...] = ()
    if rules:
        plan = pays_plan(Path(bon_dir).parent.parent, split, rules, train_promised)
        notes = plan.notes
        if plan.rules:
            pays, seq_notes = _pays_rows(
                bon,
                estimates,
                models,
                method,
                plan,
                beta=beta,
                vote_trials=vote_trials,
                seed=mc_seed,
                sequential=sequential,
            )
            notes += tuple(f"{world}/{split}: {note}" for note in seq_notes)
            summary = pd.concat([summary, pays], ignore_index=True)
    meta = {"world": world, "split": split, "method": method, "seed": seed}
    meta |= {"beta": beta, "mc_trials": mc_trials, "mc_seed": mc_seed}
    meta |= {"rules": list(rules), "vote_trials": vote_trials, "pays_notes": list(notes)}
    if sequential:
        meta["sequential"] = True
    write_ias_outputs(Path(out), summary, budgets, uniform=uniform, meta=meta)
    return {"pays_notes": list(notes)}


def ias_units(pipe: Pipeline, world: str) -> list[Unit]:
    settings = {"beta": pipe.config.beta, "mc_trials": pipe.config.mc_trials}
    units = []
    train_promised = f"{TRAIN_SPLIT}/bon" in promised_sets(pipe, world)
    for split in IAS_SPLITS:
        plan = pays_plan(pipe.world_dir(world), split, pipe.config.ias_rules, train_promised)
        for note in plan.notes:
            pipe.log(f"{pipe.command}: ias: {note}")
        pays = {"rules": list(plan.rules), "vote_trials": pipe.config.vote_trials}
        reads = [pipe.world_dir(world) / split / "bon"]
        if plan.train_bon is not None and plan.rules:
            reads.append(Path(plan.train_bon))  # auto learns on it: a change re-runs the unit
        # auto-seq: the calibrators' units only (in their fingerprint only when on, so the
        # units of a run without it keep theirs)
        sequential = pipe.config.ias_sequential and bool(plan.rules) and plan.train_bon is not None
        if sequential and not plan.states:
            pipe.log(
                f"{pipe.command}: ias: {world}/{split}: the test or {TRAIN_SPLIT} BoN set has "
                "no candidate hidden states, so no 'auto-seq' rows of calibrators that read "
                "hidden states"
            )
        jobs = [(REFERENCE, 0)] + [
            (m, s)
            for m in pipe.config.methods
            for s in pipe.config.seeds
            if is_trained(pipe, world, m, s)  # a failed training is reported, nothing to sweep
        ]
        for method, seed in jobs:
            out = pipe.layout.ias_dir(world, split, method, seed)
            model = "base" if method == REFERENCE else method
            seq = sequential and method != REFERENCE
            units.append(
                Unit(
                    key=f"ias/{world}/{split}/{method}/seed{seed}",
                    outputs=[out / "ias_full.csv", out / "budgets.parquet", out],
                    run=functools.partial(
                        sweep_one,
                        str(pipe.world_dir(world) / split / "bon"),
                        str(out),
                        world,
                        split,
                        method,
                        seed,
                        None
                        if method == REFERENCE
                        else str(pipe.layout.model_dir(world, method, seed)),
                        pipe.config.beta,
                        pipe.config.mc_trials,
                        tuple(plan.rules),
                        pipe.config.vote_trials,
                        seq,
                        train_promised,
                    ),
                    inputs=model_inputs(pipe, world, model, seed)
                    | settings
                    | {"split": split, "pays": (pays | {"sequential": True}) if seq else pays},
                    reads=pipe.reads(*reads),
                    world=world,
                )
            )
    return units
