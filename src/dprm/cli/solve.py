"""``dprm solve``: answer questions with a live generator, spending compute per question."""

from __future__ import annotations

import argparse

from dprm.cli._common import unit_interval

ORDER = 80

DESCRIPTION = """\
Answer questions with a live generator and a calibrated distributional PRM, spending samples
where they are needed (instance-adaptive scaling), next to a fixed-budget baseline.

  --mode bon   for each question the calibrator reads the PRM's question-only state and the IAS
               rule of `dprm ias` sets N_i (mixture over 100 mid-point levels for distribution
               calibrators, Q(--beta) for QR, p for point ones); N_i candidates are sampled, the
               PRM scores each (last step) and the highest raw score is the answer. The baseline
               picks from the first --baseline-n samples of the same pool.
  --mode beam  step-level beam search (steps end at a blank line) with Park et al.'s IAS-of-K
               (how many beams to keep) and IAS-of-M (samples per kept beam) from the lower
               quantile Q(--lower-level); beams ranked by the median (or mean). The baseline is
               the same search at full width (K = N / M_MAX, M = M_MAX).

Writes OUT/run.json, OUT/{bon,beam}.jsonl (one line per finished question: budget, samples,
tokens, chosen response, its PRM score, correct; beam: per-step samples, tokens, K, M),
OUT/summary.json (accuracy and compute vs the baseline) and, in bon mode, OUT/bon_set/ (the run
as a best-of-N set: `dprm ias --bon OUT/bon_set --model CAL` reproduces the live budgets).
Interrupted runs resume: finished questions are skipped.
"""


def _solve(args: argparse.Namespace) -> int:
    import json

    from dprm.live import CalibratedPRM, SolveConfig, run_beam, run_bon
    from dprm.live.run import load_run_questions
    from dprm.llm.generate import load_generator

    config = SolveConfig(
        mode=args.mode,
        questions=args.questions,
        generator=args.generator,
        prm=args.prm,
        calibrator=args.calibrator,
        C=args.C,
        n_max=args.n_max,
        baseline_n=args.baseline_n,
        beta=args.beta,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        beam_width=args.beam_width,
        freq=args.freq,
        max_steps=args.max_steps,
        max_beam_tokens=args.max_beam_tokens,
        lower_level=args.lower_level,
        rank_by=args.rank_by,
        adaptive=args.adaptive,
        batch_questions=args.batch_questions,
        grade_timeout=args.grade_timeout,
        grade_workers=args.grade_workers,
        limit=args.limit,
        shard=args.shard or "0/1",
    )
    load_run_questions(config)  # fail fast on the question file before loading any model
    cprm = CalibratedPRM.from_dirs(
        args.prm,
        args.calibrator,
        device=args.prm_device,
        dtype=args.prm_dtype,
        prm_kind=args.prm_kind,
        beta=args.beta,
        n_max=args.n_max,
    )
    memory = args.gpu_memory_utilization
    if args.backend == "vllm" and memory is None:
        memory = 0.6  # leave room for the PRM on the same GPU
    options = {
        "device": args.device,
        "dtype": args.dtype,
        "max_model_len": args.max_model_len,
        "tensor_parallel_size": args.tensor_parallel_size,
        "gpu_memory_utilization": memory,
    }
    generator = load_generator(
        args.backend, args.generator, **{k: v for k, v in options.items() if v is not None}
    )
    run = run_bon if args.mode == "bon" else run_beam
    summary = run(config, cprm, generator, args.out, progress=not args.quiet)
    if not args.quiet:
        print(json.dumps({k: v for k, v in summary.items() if k != "fixed_curve"}, indent=2))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "solve",
        help="live adaptive best-of-N / beam search with a calibrated PRM (+ fixed baseline)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--mode", choices=["bon", "beam"], required=True, help="adaptive best-of-N or beam search"
    )
    p.add_argument(
        "--questions",
        required=True,
        metavar="FILE_OR_NAME",
        help="question file (.jsonl/.json/.parquet with problem|question and answer) or a set name "
        "(math500, math, math-park, aime24, aime25; names need the hub). No gold answer: not graded",
    )
    p.add_argument(
        "--generator", required=True, metavar="MODEL", help="generator model directory or hub id"
    )
    p.add_argument(
        "--prm",
        required=True,
        help="PRM directory or hub id (the one the calibrator was fitted on)",
    )
    p.add_argument(
        "--calibrator",
        required=True,
        metavar="DIR",
        help="calibrator directory (dprm train output)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="run directory (rerun the same command to resume)",
    )
    p.add_argument(
        "--C",
        type=float,
        default=None,
        help="target P(at least one correct); default 0.9 (bon), 0.99 (beam)",
    )
    p.add_argument(
        "--n-max",
        type=int,
        default=64,
        help="largest budget N_max; beam: samples per pruning step N (default 64)",
    )
    p.add_argument(
        "--baseline-n",
        type=int,
        default=None,
        help="fixed baseline: bon = best of this many samples, beam = full-width search with N = this; "
        "default: --n-max; 0 = no baseline (only the adaptive run is paid for)",
    )
    p.add_argument(
        "--backend",
        choices=["transformers", "vllm"],
        default="transformers",
        help="generation backend",
    )
    p.add_argument(
        "--limit", type=int, default=None, metavar="K", help="only the first K questions"
    )
    p.add_argument(
        "--shard",
        default=None,
        metavar="i/n",
        help="run the i-th of n blocks of questions (0-based)",
    )
    p.add_argument(
        "--beta",
        type=unit_interval,
        default=0.1,
        help="QR calibrators: level of the point rule, as dprm ias (default 0.1)",
    )
    g = p.add_argument_group("sampling")
    g.add_argument(
        "--temperature", type=float, default=0.7, help="sampling temperature (default 0.7)"
    )
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default 1.0)")
    g.add_argument(
        "--max-new-tokens",
        type=int,
        default=2048,
        help="token cap of one generation call: a response (bon) or a step (beam)",
    )
    g.add_argument(
        "--seed", type=int, default=0, help="base seed; every prompt gets its own derived seed"
    )
    g.add_argument(
        "--batch-questions",
        type=int,
        default=8,
        help="questions generated together (one resumable part)",
    )
    b = p.add_argument_group("beam search")
    b.add_argument(
        "--beam-width",
        type=int,
        default=8,
        help="M_MAX, samples per kept beam at full width (K_MAX = N / M_MAX)",
    )
    b.add_argument(
        "--freq", type=int, default=5, help="prune and re-expand every this many steps (default 5)"
    )
    b.add_argument(
        "--max-steps",
        type=int,
        default=100,
        help="stop a search after this many steps (default 100)",
    )
    b.add_argument(
        "--max-beam-tokens",
        type=int,
        default=3072,
        help="a beam ends once its steps hold this many tokens",
    )
    b.add_argument(
        "--lower-level",
        type=unit_interval,
        default=0.1,
        help="quantile level that sets K and M (default 0.1)",
    )
    b.add_argument(
        "--rank-by", choices=["median", "mean"], default="median", help="how beams are ranked"
    )
    b.add_argument(
        "--adaptive",
        choices=["km", "k", "m", "none"],
        default="km",
        help="which rules adapt: IAS-of-K, IAS-of-M, both",
    )
    d = p.add_argument_group("models and grading")
    d.add_argument(
        "--prm-kind",
        default=None,
        help="PRM wrapper (qwen-prm, math-shepherd, reasoneval, token-classification)",
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
    d.add_argument(
        "--grade-timeout", type=float, default=5.0, help="seconds per math-verify grading call"
    )
    d.add_argument("--grade-workers", type=int, default=2, help="grading worker processes")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no printed summary")
    p.set_defaults(func=_solve)
