"""``dprm serve``: the calibrated PRM as an HTTP service (FastAPI + uvicorn, the ``serve``
extra). See docs/serve.md."""

from __future__ import annotations

import argparse
import dataclasses

from dprm.cli._common import (
    add_progress_flags,
    add_threads_flag,
    apply_threads,
    integer_at_least,
    unit_interval,
)

DESCRIPTION = """\
Serve a PRM and a trained calibrator over HTTP (JSON, OpenAPI schema at /docs and
/openapi.json) for tools that run their own sampling loop:

  POST /v1/score     question + solutions (lists of steps) -> per step the PRM score, the
                     calibrated quantiles at the requested levels, p_hat and the lower bound
                     Q(--lower-level) the beam rules read
  POST /v1/allocate  questions (+ their draws so far) -> the budget of an allocation rule
                     (ias: the C rule of `dprm ias`; auto / auto-seq with --train-bon and
                     --auto-cost) and whether to draw again, and the current pick; auto-seq
                     makes the decision `dprm solve --auto-seq` makes after the same draws
  GET  /healthz      liveness
  GET  /v1/info      models and their content digests, versions, the calibrator's training
                     data, settings, batching counters

Concurrent /v1/score requests are scored in one PRM forward: the first waits up to
--batch-wait-ms for others, at most --max-batch together. Requests hold text only (no paths);
oversized or malformed ones get a 4xx with one line. Binds 127.0.0.1 unless --host says
otherwise (the service has no authentication: put it behind your own proxy to expose it).
SIGTERM or Ctrl-C: stop accepting, finish the requests in flight, exit 0.

  dprm serve --prm src/dprm/llm/worlds/arith/prm --calibrator runs/cal/binomial --port 8700
"""


def _serve(args: argparse.Namespace) -> int:
    from dprm.config import ConfigError
    from dprm.io import DataError
    from dprm.serve.server import bind, build, serve, setup_logging
    from dprm.serve.service import Policy
    from dprm.serve.settings import ServeSettings

    if (args.train_bon is None) != (args.auto_cost is None):
        raise ConfigError("--train-bon and --auto-cost go together")
    level = "warning" if args.quiet else args.log_level
    setup_logging(level)
    settings = ServeSettings(
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(ServeSettings)}
    )
    policy = Policy(
        C=args.C,
        lower_level=args.lower_level,
        train_bon=args.train_bon,
        auto_cost=args.auto_cost,
        rule=args.rule,
        round_size=args.round_size,
    )
    try:  # the address first: a taken port fails before the models load
        sock = bind(args.host, args.port)
    except OSError as err:
        raise DataError(None, f"cannot listen on {args.host}:{args.port}: {err.strerror}") from None
    apply_threads(args)
    options = {"max_tokens": args.max_tokens, "batch_tokens": args.batch_tokens}
    if args.prm_prompt != "park":
        options["prompt"] = args.prm_prompt
    service, info = build(
        args.prm,
        args.calibrator,
        settings=settings,
        policy=policy,
        prm_kind=args.prm_kind,
        device=args.prm_device,
        dtype=args.prm_dtype,
        prm_options=options,
        n_max=args.n_max,
        beta=args.beta,
    )
    return serve(service, info, sock, level, announce=not args.quiet)


_SETTING_HELP = {
    "max_batch": "scoring requests scored together in one PRM forward (1: one at a time)",
    "batch_wait_ms": "how long the first request of a batch waits for others to join",
    "max_solutions": "solutions in one /v1/score request",
    "max_steps": "steps in one solution or draw",
    "max_chars": "characters in one text (question, step, answer)",
    "max_request_chars": "characters of text in one request, all texts together",
    "max_levels": "quantile levels in one request",
    "max_questions": "questions in one /v1/allocate request",
    "max_draws": "draws of one question in one /v1/allocate request",
    "max_body_bytes": "largest request body (413 beyond)",
    "max_queue": "requests waiting for the models before new ones get 503",
}


def register(sub: argparse._SubParsersAction) -> None:
    from dprm.live.solve_config import LIVE_RULES
    from dprm.serve.settings import ServeSettings

    p = sub.add_parser("serve", description=DESCRIPTION)
    models = p.add_argument_group("models")
    models.add_argument("--prm", required=True, help="PRM directory or hub id")
    models.add_argument(
        "--calibrator", required=True, metavar="DIR", help="calibrator directory (dprm train)"
    )
    models.add_argument(
        "--prm-kind", default=None, help="PRM wrapper (default: inferred from name/config)"
    )
    models.add_argument(
        "--prm-device", default=None, help="PRM device (default: cuda if available)"
    )
    models.add_argument(
        "--prm-dtype", default=None, help="PRM dtype (default: bf16 on GPU, fp32 on CPU)"
    )
    models.add_argument(
        "--max-tokens", type=integer_at_least(1), default=4096, help="PRM input cap; longer "
        "solutions are read at their last scored step and marked truncated",
    )  # fmt: skip
    models.add_argument(
        "--batch-tokens", type=integer_at_least(1), default=16384,
        help="padded tokens per PRM forward batch",
    )  # fmt: skip
    models.add_argument(
        "--prm-prompt", default="park", choices=["park", "model-card"],
        help="qwen-prm / token-classification system prompt (as dprm embed)",
    )  # fmt: skip
    rules = p.add_argument_group("allocation (as dprm solve)")
    rules.add_argument("--C", type=unit_interval, default=0.9, help="ias: default target C")
    rules.add_argument("--n-max", type=integer_at_least(1), default=64, help="largest budget")
    rules.add_argument(
        "--beta", type=unit_interval, default=0.1, help="QR calibrators: point-rule level"
    )
    rules.add_argument(
        "--lower-level", type=unit_interval, default=0.1,
        help="default level of the lower bound /v1/score returns (the beam rules' Q(0.1))",
    )  # fmt: skip
    rules.add_argument(
        "--train-bon", default=None, metavar="DIR",
        help="training BoN set scored by this PRM: enables the auto and auto-seq allocations",
    )  # fmt: skip
    rules.add_argument(
        "--auto-cost", type=unit_interval, default=None,
        help="auto / auto-seq: mean cost (mean draws / n_max) over a request's questions",
    )  # fmt: skip
    rules.add_argument(
        "--rule", default=LIVE_RULES[0], choices=list(LIVE_RULES),
        help="how a question's answer is picked from its draws",
    )  # fmt: skip
    rules.add_argument(
        "--round-size", type=integer_at_least(1), default=16, help="auto-seq: draws per round"
    )
    http = p.add_argument_group("server")
    http.add_argument("--host", default="127.0.0.1", help="address to bind")
    http.add_argument("--port", type=integer_at_least(0), default=8700, help="port (0: a free one)")
    http.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    defaults = ServeSettings()
    for field in dataclasses.fields(ServeSettings):
        kind = float if field.name == "batch_wait_ms" else integer_at_least(1)
        http.add_argument(
            "--" + field.name.replace("_", "-"),
            type=kind,
            default=getattr(defaults, field.name),
            help=_SETTING_HELP[field.name],
        )
    add_threads_flag(p)
    add_progress_flags(p)  # --quiet: warnings and errors only; the service has no progress bar
    p.set_defaults(func=_serve)
