"""``dprm solve``: answer questions with a live generator, spending compute per question."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dprm.cli._common import (
    add_dataclass_flags,
    add_progress_flags,
    add_threads_flag,
    add_verify_inputs_flag,
    apply_threads,
    claim_output,
    dataclass_from_args,
    input_paths,
    local_inputs,
    require_vllm,
    show_progress,
    warn_provenance,
)
from dprm.cli._names import GENERATION_BACKENDS
from dprm.cli._sampling import add_server_flags

DESCRIPTION = """\
Answer questions with a live generator and a calibrated distributional PRM, spending samples
where they are needed (instance-adaptive scaling), next to a fixed-budget baseline.

  --mode bon   for each question the calibrator reads the PRM's question-only state and the IAS
               rule of `dprm ias` sets N_i (mixture over 100 mid-point levels for distribution
               calibrators, Q(--beta) for QR, p for point ones); N_i candidates are sampled, the
               PRM scores each (last step) and the highest raw score is the answer (--rule
               weighted-last / majority: the vote on their final answers instead). The
               baseline picks from the first --baseline-n samples of the same pool, by the
               same rule.
               --auto-cost c --train-bon DIR: N_i by `dprm ias`'s `auto` allocation instead
               (shard total round(c x N_max x Q), learnt on a training BoN set of this PRM).
               --auto-seq (with both): `dprm ias --sequential`'s `auto-seq`, live: a uniform
               floor, then rounds of --round-size draws, each to the question whose posterior
               over p (prior: the calibrated distribution; updated by every drawn candidate's
               calibrated estimate and final answer) expects the largest gain, until the total
               is spent (--rule majority: the index reads the vote's state, the race of
               `dprm ias`). OUT/seq_draws.jsonl logs every draw (round, order, estimate,
               answer).
  --mode beam  step-level beam search (steps end at a blank line) with Park et al.'s IAS-of-K
               (how many beams to keep) and IAS-of-M (samples per kept beam) from the lower
               quantile Q(--lower-level); beams ranked by the median (or mean). The baseline is
               the same search at full width (K = N / M_MAX, M = M_MAX).

Writes OUT/run.json, OUT/{bon,beam}.jsonl (one line per finished question: budget, samples,
tokens, chosen response, its PRM score, correct; beam: per-step samples, tokens, K, M),
OUT/summary.json (accuracy and compute vs the baseline) and, in bon mode, OUT/bon_set/ (the run
as a best-of-N set: `dprm ias --bon OUT/bon_set --model CAL` reproduces the live budgets).
Interrupted runs resume: finished questions are skipped.

Which calibrator: binomial, the recommendation for IAS (docs/calibrators.md), e.g.
  dprm train --method binomial --data calib/train --out runs/cal/binomial
  dprm solve --mode bon --questions math500 --generator Qwen/Qwen2.5-Math-7B-Instruct \
      --prm Qwen/Qwen2.5-Math-PRM-7B --calibrator runs/cal/binomial --out runs/solve
"""


def _solve(args: argparse.Namespace) -> int:
    import json

    from dprm.cli._sampling import check_backend_flags, server_options
    from dprm.io import guard_output
    from dprm.live import CalibratedPRM, SolveConfig, run_beam, run_bon
    from dprm.live.run import load_run_questions
    from dprm.llm.generate import load_generator
    from dprm.llm.generator_base import request_journal

    check_backend_flags(args)  # --backend openai's flags: one line, before --out
    if args.backend == "vllm":
        require_vllm()  # before any model loads, one line instead of a traceback
    inputs = local_inputs(input_paths(args, "--questions", "--generator", "--prm", "--calibrator"))
    config = dataclass_from_args(SolveConfig, args)  # bad settings: one line, before --out
    if config.auto_seq:  # the calibrator must read the training candidates: check before --out
        from dprm.live.bon_seq import check_sequential_training
        from dprm.models import load

        check_sequential_training(load(args.calibrator), config.train_bon)
    if config.train_bon is not None:  # a voting rule learns on the training set's answers
        from dprm.live.bon import check_training_answers

        check_training_answers(config.train_bon, config.rule)
    # fail fast on the question file and the grader, before --out is claimed or a model loads
    questions, _ = load_run_questions(config)
    if (questions["answer"].astype(str).str.strip() != "").any():  # graded: needs the grader
        from dprm.llm.grading import require_grader

        require_grader()
    if args.shard in ("0/1", None):  # resumable: the run log checks the settings
        claim_output(args.out, overwrite=False, directory=True, resumable=True, inputs=inputs)
    else:  # the shards of one --out write their own files side by side: no lock on --out
        guard_output(args.out, inputs)
    apply_threads(args)
    cprm = CalibratedPRM.from_dirs(
        args.prm,
        args.calibrator,
        device=args.prm_device,
        dtype=args.prm_dtype,
        prm_kind=args.prm_kind,
        beta=args.beta,
        n_max=args.n_max,
    )
    # the same check as evaluate / predict / ias: the run's PRM and generator stand for the
    # meta.json of a data set
    live = {"prm": args.prm, "generator": args.generator}
    warn_provenance(args, cprm.calibrator, live, "this run (--prm, --generator)")
    memory = args.gpu_memory_utilization
    if args.backend == "vllm" and memory is None:
        memory = 0.6  # leave room for the PRM on the same GPU
    options = {
        "device": args.device,
        "dtype": args.dtype,
        "max_model_len": args.max_model_len,
        "tensor_parallel_size": args.tensor_parallel_size,
        "gpu_memory_utilization": memory,
        **server_options(args),
    }
    generator = load_generator(
        args.backend, args.generator, **{k: v for k, v in options.items() if v is not None}
    )
    run = run_bon if args.mode == "bon" else run_beam
    # a served generator's answered requests: a resumed run does not ask for them again
    journal = Path(args.out) / f".requests{_shard_tag(args.shard)}.jsonl"
    with request_journal(generator, journal):
        summary = run(config, cprm, generator, args.out, progress=show_progress(args))
    journal.unlink(missing_ok=True)
    if summary.get("falls_back_to") and not args.quiet:
        print(
            f"auto-seq: the questions are unlike the training set's (shift check): falls back "
            f"to {summary['falls_back_to']}, the calibrator-free rule chosen on the training pools",
            file=sys.stderr,
        )
    if not args.quiet:
        print(json.dumps({k: v for k, v in summary.items() if k != "fixed_curve"}, indent=2))
    return 0


def _shard_tag(shard: str | None) -> str:
    """``""`` for the whole run, ``-I-of-N`` for shard ``I/N`` (each shard keeps its own file)."""
    return "" if shard in ("0/1", None) else "-" + str(shard).replace("/", "-of-")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "solve",
        help="live adaptive best-of-N / beam search with a calibrated PRM (+ fixed baseline)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from dprm.live.solve_config import SolveConfig

    groups = add_dataclass_flags(p, SolveConfig)
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="run directory (rerun the same command to resume)",
    )
    p.add_argument(
        "--backend",
        choices=GENERATION_BACKENDS,
        default="transformers",
        help="generation backend: in-process (transformers, vllm) or a served model (openai: "
        "an OpenAI-compatible server at --base-url serving --generator)",
    )
    d = groups["models and grading"]
    d.add_argument(
        "--prm-kind",
        default=None,
        help="PRM wrapper (qwen-prm, math-shepherd, reasoneval, skywork-prm, rlhflow-prm, "
        "token-classification; default: inferred from the name / config.json)",
    )
    d.add_argument(
        "--prm-device", default=None, help="PRM device, e.g. cuda:1 (default: cuda if available)"
    )
    d.add_argument(
        "--prm-dtype", default=None, help="PRM dtype (default: bf16 on GPU, fp32 on CPU)"
    )
    d.add_argument("--device", default=None, help="generator device (transformers backend)")
    d.add_argument("--dtype", default=None, help="generator dtype")
    d.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="generator context limit (vLLM default 4096)",
    )
    d.add_argument(
        "--tensor-parallel-size", type=int, default=None, help="vLLM: GPUs per generator"
    )
    d.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help="vLLM: GPU memory share (default 0.6, the PRM needs room)",
    )
    add_server_flags(p)
    add_threads_flag(p)
    add_progress_flags(p)
    add_verify_inputs_flag(p)
    p.set_defaults(func=_solve)
