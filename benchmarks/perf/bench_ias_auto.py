"""Benchmark: the cost of ``auto`` and of the rules' expectations against today's C sweep.

Workload: the largest twin BoN set, the paper-size ``id`` split (500 questions x a pool of 64),
and its ``train/bon`` (500 training pools), of ``llama-3.1-8b__qwen-prm``, written with a small
hidden dimension (the IAS work does not depend on D: calibrators are not run here; the truth
estimate stands in for a distribution calibrator, 100 mid-point quantiles per question).

Timed, each the best of ``--repeat`` runs, one CPU thread:

* ``C sweep``: today's contract C sweep for one distribution estimate (10 values of C, mixture
  budgets over 100 levels, the exact accuracy table, lookups);
* ``exact table``: the highest-last rule's exact accuracy table for n = 1..64;
* ``vote table``: the majority rule's Monte Carlo table (``--trials`` orders per question);
* ``auto``: everything ``auto`` adds for one estimate and one (exact) rule: the training
  pools' table, the selection model, the cross-fitted floor share, and the allocation and its
  exact accuracy at the 10 target costs of ``dprm.ias.curves.pays.COST_GRID``;
* ``oracle``: the oracle allocation at the same 10 costs;
* ``oracle-pop``: the population oracle: replaying the split's questions, the closed-form
  highest-last population curves, and the allocation at the 10 costs;
* ``auto-seq``: the sequential ``auto`` (:mod:`dprm.ias.sequential`) at the 3 report costs over
  32 draw orders per question (likelihood and wrong-answer fits, the floor share chosen on the
  training pools, draw orders, outcomes and the policy, which reads the draws' final answers),
  for highest-last and for majority; the candidates' raw ``prm_score`` stands in for their
  calibrated estimates (the work does not depend on the values).

Prints each timing and the ratio to the C sweep in one run.
Run: ``PYTHONPATH=src python benchmarks/perf/bench_ias_auto.py``.
"""

from __future__ import annotations

import argparse
import tempfile
import time


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--hidden-dim", type=int, default=32)
    parser.add_argument("--size", default="paper", help="twin world size (default paper)")
    parser.add_argument("--smoke", action="store_true", help="the smallest run: tiny world")
    args = parser.parse_args()
    if args.smoke:
        args.size, args.repeat, args.trials = "tiny", 1, 8
    import torch

    torch.set_num_threads(1)
    from dprm.data import read_bon_set
    from dprm.data.synth import write_world
    from dprm.data.synth.population import twin_questions
    from dprm.ias import C_GRID, Pools, exact_accuracy_table, lookup, truth_estimate
    from dprm.ias.constants import COST_GRID
    from dprm.ias.curves.equal_cost import reference_rows, sequential_rows
    from dprm.ias.curves.population import population_curves, population_oracle_rows
    from dprm.ias.learnt.auto import AutoAllocator, pool_share
    from dprm.ias.learnt.inputs import CalibratorInput
    from dprm.ias.selection.draws import table_weight
    from dprm.ias.selection.rules import Candidates, rule_table

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        paths = write_world(
            tmp,
            "llama-3.1-8b__qwen-prm",
            size=args.size,
            hidden_dim=args.hidden_dim,
            progress=False,
        )
        print(f"world written in {time.perf_counter() - t0:.1f} s")
        bon = read_bon_set(paths["id/bon"], check_hidden=False)
        train = read_bon_set(paths["train/bon"], check_hidden=False)
        est, train_est = truth_estimate(bon), truth_estimate(train)
        pools, cands, train_cands = Pools.from_bon(bon), Candidates.from_bon(bon), None
        train_cands = Candidates.from_bon(train)
        print(f"test pools {pools.scores.shape}, training pools {train_cands.correct.shape}")

        def c_sweep():
            budgets = est.budgets(C_GRID)  # [10, Q], mixture rule
            acc_table = exact_accuracy_table(pools)
            for b in budgets:
                lookup(acc_table, b).mean()

        def exact_table():
            rule_table(cands, "highest-last")

        def vote_table():
            rule_table(cands, "majority", trials=args.trials)

        table = rule_table(cands, "highest-last")

        def auto():
            allocator = AutoAllocator(
                rule_table(train_cands, "highest-last"), pool_share(train_cands)
            )
            share, _ = allocator.floor_share(train_est)
            predicted = allocator.predicted(est)
            for cost in COST_GRID:
                table.accuracy(allocator.budgets(est, cost, share, predicted=predicted))

        def oracle():
            reference_rows(table, COST_GRID)

        def oracle_pop():
            bq = twin_questions(bon)
            pop = population_curves(bq, ["highest-last"])["highest-last"]
            population_oracle_rows(table, pop, COST_GRID)

        allocator = AutoAllocator(rule_table(train_cands, "highest-last"), pool_share(train_cands))
        truth = CalibratorInput(
            est.method,
            est.with_candidate(bon.responses["prm_score"].to_numpy(float)),
            train_est.with_candidate(train.responses["prm_score"].to_numpy(float)),
        )

        def auto_seq():
            sequential_rows(
                cands, table, cands.weights["last"], [truth], train_cands, allocator,
            )  # fmt: skip

        vote = rule_table(cands, "majority", trials=64)
        vote_allocator = AutoAllocator(
            rule_table(train_cands, "majority", trials=64), pool_share(train_cands)
        )

        def auto_seq_majority():
            sequential_rows(
                cands, vote, table_weight(cands, "majority", None), [truth], train_cands,
                vote_allocator, vote=True,
                train_weight=table_weight(train_cands, "majority", None),
            )  # fmt: skip

        timings = {
            "C sweep (10 C, exact)": best_of(c_sweep, args.repeat),
            "exact table (highest-last)": best_of(exact_table, args.repeat),
            f"vote table (majority, {args.trials} MC orders)": best_of(vote_table, 1),
            "auto (fit + floor share + 10 costs)": best_of(auto, args.repeat),
            "uniform + oracle (10 costs)": best_of(oracle, args.repeat),
            "oracle-pop (replay + closed form, 10 costs)": best_of(oracle_pop, 1),
            "auto-seq (32 orders, 3 costs)": best_of(auto_seq, 1),
            "auto-seq, majority (32 orders, 3 costs)": best_of(auto_seq_majority, 1),
        }
        base = timings["C sweep (10 C, exact)"]
        for name, sec in timings.items():
            print(f"{name:<45} {sec * 1e3:9.1f} ms   {sec / base:7.2f} x C sweep")
        print(f"threads: torch {torch.get_num_threads()}, numpy as configured (OMP_NUM_THREADS)")


if __name__ == "__main__":
    main()
