"""``dprm ias``: instance-adaptive best-of-N sweeps on a BoN set (contract, docs/design.md §4)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dprm.cli._common import (
    add_output_flags,
    add_progress_flags,
    add_threads_flag,
    apply_threads,
    check_hidden_dim,
    check_out,
    input_paths,
    integer_at_least,
    unit_interval,
    warn_provenance,
)


def _ias(args: argparse.Namespace) -> int:
    if args.sequential and not args.train_bon:
        from dprm.config import ConfigError

        raise ConfigError("--sequential needs --train-bon (auto-seq learns on a training BoN set)")
    if args.peers and (not args.train_bon or not args.model):
        from dprm.config import ConfigError

        raise ConfigError("--peers needs --train-bon and a --model (auto-seq's calibrated prior)")
    out = check_out(
        args, directory=True, inputs=input_paths(args, "--bon", "--train-bon", "--model")
    )
    apply_threads(args)
    from dprm.data import read_bon_set
    from dprm.evaluation import model_names
    from dprm.ias import Pools, run_ias, uniform_curve
    from dprm.ias.outputs import write_ias_outputs
    from dprm.io import DataError, atomic_dir
    from dprm.models import load

    bon = read_bon_set(args.bon)
    train_bon = read_bon_set(args.train_bon) if args.train_bon else None
    _check_rules(args.rule, bon, args.bon)
    if train_bon is not None:
        _check_rules(args.rule, train_bon, args.train_bon)
        if train_bon.hidden_dim != bon.hidden_dim:  # the shift score compares their states
            raise DataError(
                args.train_bon,
                f"hidden states of dimension {train_bon.hidden_dim}, but --bon {args.bon} has "
                f"{bon.hidden_dim}: both pools must be scored by the same PRM",
            )
    loaded = [(Path(m).name, load(m)) for m in args.model]
    for _, model in loaded:
        warn_provenance(args, model, bon.meta, args.bon)
    names = model_names(loaded)
    models = {name: m for name, (_, m) in zip(names, loaded, strict=True) if name != "base"}
    check_hidden_dim(models.values(), bon.hidden_dim, args.bon)
    if train_bon is not None:
        check_hidden_dim(models.values(), train_bon.hidden_dim, args.train_bon)
    summary, budgets = run_ias(
        bon,
        models,
        beta=args.beta,
        n_max=args.n_max,
        mc_trials=args.mc_trials,
        seed=args.seed,
        greedy=args.greedy,
        rules=args.rule,
        train_bon=train_bon,
        sequential=args.sequential,
    )
    peer_frames = None
    if args.peers:  # the peers beside auto-seq on the same orders (dprm.ias.peers.curves)
        from dprm.ias.curves.costs import TrainingData, with_costs
        from dprm.ias.peers.curves import peer_tables

        peer_frames = peer_tables(
            bon, train_bon, loaded[0][1], [r for r in args.rule if not r.endswith("-calibrated")]
            or ["highest-last"], seed=args.seed, n_max=args.n_max,
        )  # fmt: skip
        training = TrainingData.of(loaded[0][1], train_bon)
        peer_frames = (with_costs(peer_frames[0], training), peer_frames[1])
    with atomic_dir(out) as tmp:  # all files or none
        written = []
        if peer_frames is not None:
            peer_frames[0].to_csv(tmp / "peers.csv", index=False)
            peer_frames[1].to_csv(tmp / "peer_curves.csv", index=False)
            written += ["peers.csv", "peer_curves.csv"]
        written += [
            p.name
            for p in write_ias_outputs(
                tmp,
                summary,
                budgets,
                uniform=uniform_curve(Pools.from_bon(bon), n_max=args.n_max),
                meta={
                    "bon": str(bon.path),
                    "models": {name: str(Path(args.model[i])) for i, name in enumerate(names)},
                    "beta": args.beta,
                    "n_max": args.n_max,
                    "mc_trials": args.mc_trials,
                    "seed": args.seed,
                    "greedy": args.greedy,
                    "rules": args.rule,
                    "train_bon": None if train_bon is None else str(train_bon.path),
                    "sequential": args.sequential,
                    "peers": args.peers,
                    "n_questions": len(bon),
                },
            )
        ]
    if not args.quiet:
        c_rows = summary[summary["allocation"] == "C"]
        for method, grp in c_rows.groupby("method", sort=False):
            pts = ", ".join(
                f"C={c:g}: {a:.3f}@{x:.3f}"
                for c, a, x in zip(grp["C"], grp["accuracy"], grp["cost"], strict=True)
            )
            print(f"{method:>12}  accuracy@cost  {pts}")
        pays = out / "pays.csv"
        if pays.exists():
            import pandas as pd

            print(equal_cost_table(pd.read_csv(pays)))
        else:
            print("(--train-bon adds the equal-cost table: uniform, C rule, auto, oracle)")
        if peer_frames is not None:
            print(peers_table(peer_frames[0]))
        print(f"wrote {out}/: " + ", ".join(sorted(written)) + f" ({len(summary)} rows in ias.csv)")
    return 0


def peers_table(peers) -> str:
    """``dprm ias --peers`` as text: per rule, every method's draws to reach uniform
    best-of-64's accuracy, accuracy at cost 0.1, labelled training samples and PRM passes per
    test question (amortised over 500 / 5,000 test questions); a method that fell back under
    a detected shift says which peer it ran.

    Args:
        peers: the rows of ``peers.csv`` (:func:`dprm.ias.peers.curves.peer_tables` with the
            columns of :func:`dprm.ias.curves.costs.with_costs`).
    """
    import math

    def number(value, digits: int) -> str:
        return "-" if value is None or math.isnan(float(value)) else f"{float(value):.{digits}f}"

    lines = []
    for rule, rows in peers.groupby("rule", sort=False):
        lines.append(f"peers beside auto-seq, rule {rule} (every row and standard error in "
                     "peers.csv)")  # fmt: skip
        lines.append(f"  {'method':<46} {'draws to u64':>12} {'acc @ 0.1':>10} "
                     f"{'labelled':>10} {'PRM passes/q (500 / 5000)':>26}")  # fmt: skip
        for _, r in rows.iterrows():
            method = str(r["method"])
            back = r.get("falls_back_to")
            if isinstance(back, str) and back:
                method += f" (falls back to {back})"
            draws = (
                number(r["draws_to_u64"], 1)
                if not math.isnan(r["draws_to_u64"])
                else ("not reached")
            )
            passes = f"{number(r['prm_passes_q500'], 1)} / {number(r['prm_passes_q5000'], 1)}"
            lines.append(f"  {method:<46} {draws:>12} {number(r['acc_at_0.1'], 3):>10} "
                         f"{number(r['labelled_samples'], 0):>10} {passes:>26}")  # fmt: skip
    return "\n".join(lines)


#: the rows of the printed equal-cost table, in order (``allocation`` of pays.csv)
EQUAL_COST_ALLOCATIONS = ("uniform", "C", "auto", "auto-seq", "oracle")


def equal_cost_table(pays) -> str:
    """ "Does adaptive compute pay?" as text: accuracy per selection rule at each cost of
    pays.csv (mean draws per question / N_max) for uniform, the C rule, ``auto``, ``auto-seq``
    and the oracle; a calibrator's rows also show the gain over uniform at that cost.

    Args:
        pays: the rows of ``pays.csv`` (:func:`dprm.ias.curves.pays.pays_table`).
    """
    import math

    costs = sorted(set(pays["cost"].astype(float)))
    lines = []
    for rule, rows in pays.groupby("rule", sort=False):
        rows = rows[rows["allocation"].isin(EQUAL_COST_ALLOCATIONS)]
        if rows.empty:
            continue
        lines.append(f"does adaptive compute pay? accuracy at equal cost, rule {rule}")
        head = f"  {'allocation':<10} {'calibrator':<14}" + "".join(
            f"{'cost ' + format(c, 'g'):>17}" for c in costs
        )
        lines.append(head)
        for allocation in EQUAL_COST_ALLOCATIONS:
            of_allocation = rows[rows["allocation"] == allocation]
            for method, grp in of_allocation.groupby("method", sort=False):
                reference = allocation in ("uniform", "oracle")
                cells = []
                for cost in costs:
                    at = grp[grp["cost"].astype(float) == cost]
                    acc = float(at["accuracy"].iloc[0]) if len(at) else math.nan
                    gain = float(at["gain"].iloc[0]) if len(at) else math.nan
                    text = "-" if math.isnan(acc) else f"{acc:.3f}"
                    if not reference and not math.isnan(gain):
                        text += f" ({gain:+.3f})"
                    cells.append(f"{text:>17}")
                name = "" if reference else str(method)
                lines.append(f"  {allocation:<10} {name:<14}" + "".join(cells))
    if lines:
        lines.append("  (gain over uniform in brackets; every row and seed in pays.csv)")
    return "\n".join(lines)


def _check_rules(rules: list[str], bon, path: str) -> None:
    """Voting rules need final answers (BoN contract v2); fail with one line otherwise."""
    from dprm.ias.selection.rules import uses_answers
    from dprm.io import DataError

    voting = [r for r in rules if uses_answers(r)]
    if voting and not bon.has_answers:
        raise DataError(
            path,
            f"rule {voting[0]!r} needs final answers, but this BoN set is contract v1 (no "
            "'answer' column in responses.parquet); rebuild it with dprm embed or dprm synth",
        )


def register(sub: argparse._SubParsersAction) -> None:
    from dprm.ias.outputs import FILE_DOC

    parser = sub.add_parser(
        "ias",
        help="instance-adaptive best-of-N: C, tau and beta sweeps (exact + Monte Carlo)",
        description=(
            "Allocate a per-question sample budget with Base (the raw PRM score), each --model "
            "(QR: point rule at Q(beta); full-distribution calibrators: the mixture rule over 100 "
            "mid-point levels) and pick the candidate with the highest uncalibrated PRM score. "
            "'accuracy' is the exact expectation over draws; 'accuracy_mc' a seeded Monte "
            "Carlo.\n\nWrites the directory OUT (atomically, all files or none):\n"
            + "\n".join(f"  {name:<16} {what}" for name, what in FILE_DOC.items())
        ),
    )
    parser.add_argument("--bon", required=True, help="best-of-N set directory")
    parser.add_argument(
        "--model", action="append", default=[], help="calibrator directory (repeatable)"
    )
    add_output_flags(parser, "output directory", metavar="DIR")
    parser.add_argument(
        "--beta",
        type=unit_interval,
        default=0.1,
        help="QR's quantile level for the point rule (default 0.1)",
    )
    parser.add_argument(
        "--n-max", type=integer_at_least(1), default=64, help="maximum budget N_max (default 64)"
    )
    parser.add_argument(
        "--mc-trials",
        type=integer_at_least(0),
        default=100,
        help="Monte Carlo trials (default 100; 0 skips)",
    )
    parser.add_argument("--seed", type=int, default=0, help="Monte Carlo seed (default 0)")
    parser.add_argument(
        "--greedy",
        action="store_true",
        help="also write allocation='greedy' rows: at each C, the C rule's total budget spent on the "
        "largest marginal gains of the same success curves (optimal for them; beyond the paper, "
        "see docs/calibrators.md)",
    )
    from dprm.ias.constants import RULES

    parser.add_argument(
        "--rule",
        action="append",
        default=[],
        choices=RULES,
        help="selection rule whose uniform best-of-n and oracle (headroom) rows are added "
        "(repeatable; highest-last is the contract rule; weighted-* and majority vote on final "
        "answers and need a v2 BoN set)",
    )
    parser.add_argument(
        "--train-bon",
        default=None,
        help="training BoN set (e.g. a twin world's train/bon): adds allocation='auto' rows for every "
        "calibrator (allocation on predicted selection accuracy, learnt on this set only) and "
        "writes pays.csv",
    )
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="with --train-bon: also the sequential allocation, allocation='auto-seq' (reads each "
        "drawn candidate's calibrated estimate and, on v2 sets, its final answer; every rule; "
        "its floor share chosen on the training pools; under a detected shift the best "
        "calibrator-free peer chosen on the training pools (uniform without final answers); "
        "Monte Carlo over draw orders)",
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="with --train-bon and --model (the first is auto-seq's calibrated prior): the "
        "calibrator-free peers (Adaptive-Consistency, ESC, vote-lead, score thresholds) beside "
        "auto-seq with the calibrated / raw-PRM / flat / true prior, on the same draw orders, "
        "for each --rule (v2 sets); prints their table (a shifted auto-seq says which peer it "
        "falls back to) and writes peers.csv (draws to reach uniform-64 and -16, accuracy at "
        "cost 0.05 / 0.1 / 0.25, bootstrap standard errors, labelled training samples and PRM "
        "passes per test question) and peer_curves.csv",
    )
    add_threads_flag(parser)
    add_progress_flags(parser)
    parser.set_defaults(func=_ias)
