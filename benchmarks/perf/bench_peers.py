"""Time every adaptive best-of-N peer against ``auto-seq`` on one BoN set (ratios, one run).

Each method computes its budgets for its whole knob sweep on the same draw orders of the test
set (the peers: :data:`dprm.ias.peers.methods.PEERS`; ``auto-seq``: the calibrated prior at the mean
budgets of :data:`dprm.ias.peers.curves.SEQ_BUDGETS`, without the floor-share choice). Prints
CPU seconds per method (process time: robust to a shared machine) and auto-seq's time over the peer's.

Run: ``PYTHONPATH=src python benchmarks/perf/bench_peers.py --bon WORLD/id/bon --train-bon
WORLD/train/bon --calibrator WORLD/models/binomial-s0`` (default: the largest ID set a
``benchmarks/experiments/adaptive_peers.py`` run left under ``--root``). ``--smoke`` writes a
tiny world into a temporary folder and fits ``binomial`` for 20 steps on it first.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def smoke_world() -> tuple[Path, Path, Path]:
    """(ID BoN set, training BoN set, calibrator) of a tiny world in a temporary folder."""
    import dprm
    from dprm.data import read_calibration_set
    from dprm.data.synth import write_world

    world = Path(tempfile.mkdtemp(prefix="bench-peers-")) / "w"
    write_world(world, "llama-3.1-8b__qwen-prm", size="tiny", progress=False)
    model = dprm.fit("binomial", read_calibration_set(world / "train" / "calib"), seed=0,
                     overrides={"max_steps": 20}, progress=False)  # fmt: skip
    model.save(world / "models" / "binomial-s0")
    return world / "id" / "bon", world / "train" / "bon", world / "models" / "binomial-s0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bon", type=Path)
    parser.add_argument("--train-bon", type=Path)
    parser.add_argument("--calibrator", type=Path)
    parser.add_argument("--root", type=Path, default=Path("/tmp/adaptive-peers"))
    parser.add_argument("--rule", default="majority")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="a tiny world, binomial 20 steps")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    from dprm.data import read_bon_set
    from dprm.ias.learnt.allocation import SelectionModel
    from dprm.ias.learnt.auto import pool_share
    from dprm.ias.paper.estimates import estimate_samples
    from dprm.ias.peers.curves import SEQ_BUDGETS, prior_inputs, training_scores
    from dprm.ias.peers.methods import PEERS, DrawView, peers_for_rule
    from dprm.ias.selection.draws import draw_orders, rule_outcomes, table_weight
    from dprm.ias.selection.rules import Candidates, rule_table, uses_answers
    from dprm.ias.sequential import SequentialAuto
    from dprm.models import load

    if args.smoke:
        args.bon, args.train_bon, args.calibrator = smoke_world()
    if args.bon is None:
        worlds = sorted(args.root.glob("*/id/bon"), key=lambda p: -len(list(p.iterdir())))
        if not worlds:
            parser.error(f"no BoN set under {args.root}: pass --bon, --train-bon, --calibrator")
        world = worlds[0].parents[1]
        args.bon, args.train_bon = world / "id" / "bon", world / "train" / "bon"
        args.calibrator = sorted((world / "models").iterdir())[0]
    bon = read_bon_set(args.bon, check_hidden=False)
    train = read_bon_set(args.train_bon, check_hidden=False)
    model = load(args.calibrator)
    calibrated = prior_inputs(model, bon, train)[0]
    est, te = calibrated.test, calibrated.train
    cands, train_cands = Candidates.from_bon(bon), Candidates.from_bon(train)
    orders = draw_orders(cands.size, args.trials, 0)
    weight = table_weight(cands, args.rule, None)
    rule_outcomes(cands, weight, orders, uses_answers(args.rule), 0)
    cal = cands.gather(est.candidate, 0.5)
    scores = training_scores(train_cands, te.candidate)
    print(f"{args.bon}: {len(cands)} questions, pools of {int(cands.size.max())}, "
          f"{args.trials} draw orders, rule {args.rule}")  # fmt: skip

    t0 = time.process_time()
    table = rule_table(train_cands, args.rule, trials=64)
    model_g = SelectionModel.fit(pool_share(train_cands), np.asarray(table.mean))
    answers = train_cands.answer is not None and cands.answer is not None
    seq = SequentialAuto.fit(
        model_g, estimate_samples(te), train_cands.gather(te.candidate, 0.5),
        train_cands.correct, train_cands.row >= 0, train_cands.answer if answers else None,
    )  # fmt: skip
    seq.budgets(
        estimate_samples(est), cal, cands.size, orders, list(SEQ_BUDGETS), 0.25,
        answer=cands.answer if answers else None, majority=answers and args.rule == "majority",
    )  # fmt: skip
    t_seq = time.process_time() - t0
    print(f"{'auto-seq[calibrated]':24s} {t_seq:8.3f} s  (fit + {len(SEQ_BUDGETS)} budgets)")
    for name in peers_for_rule(args.rule, calibrated=True):
        t0 = time.process_time()
        view = DrawView.from_pools(
            cands.answer, cands.weights["last"], cands.size, orders, cal, train=scores
        )
        peer = PEERS[name]
        peer.budgets(view, peer.levels(view, scores))
        took = time.process_time() - t0
        print(f"{name:24s} {took:8.3f} s  auto-seq / {name}: {t_seq / max(took, 1e-9):8.1f}x")


if __name__ == "__main__":
    main()
