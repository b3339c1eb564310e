"""``dprm doctor``: the first command on a new GPU machine (real PRMs vs their model cards)."""

from __future__ import annotations

import argparse

KINDS = ("qwen-prm", "math-shepherd", "reasoneval")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="check the real PRMs against their model cards' published step rewards",
        description="Load each supported PRM (hub id, or a local directory with --prm KIND=DIR) "
        "through the same path every stage uses, score its model card's example and compare the "
        "step rewards with the card's values: pass/fail per model with the largest difference. "
        "Needs a GPU (7B models) and the hub or local copies; says plainly when either is missing. "
        "Exit status: 0 all checked models pass, 1 a model fails, 2 nothing could be checked.",
    )
    p.add_argument(
        "--prm",
        action="append",
        default=[],
        metavar="KIND=PATH",
        help=f"a local directory or hub id for a kind ({', '.join(KINDS)}); repeatable",
    )
    p.add_argument("--only", choices=KINDS, action="append", help="check only these kinds")
    p.add_argument(
        "--device", default=None, help="torch device (default: cuda; cpu only when asked)"
    )
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.add_argument(
        "--quiet", action="store_true", help="print only failures and errors (no summary lines)"
    )
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from dprm.io import DataError
    from dprm.llm.doctor import check_model, environment, hub_reachable

    sources = {}
    for item in args.prm:
        kind, sep, path = item.partition("=")
        if not sep or kind not in KINDS:
            raise DataError(None, f"--prm {item!r}: expected KIND=PATH with KIND in {list(KINDS)}")
        sources[kind] = path
    env = environment()
    if not args.quiet:
        print("doctor: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    missing = [k for k in ("transformers", "sentencepiece", "google.protobuf") if not env[k]]
    if missing:
        print(f"doctor: missing {missing}: pip install 'dprm[llm]'")
        return 2
    if not env["gpu"] and args.device is None:
        print(
            "doctor: no GPU visible (torch.cuda.is_available() is False). The checks load the "
            "real 7B checkpoints and compare with values published for GPU runs; run this on a "
            "GPU machine, or pass --device cpu to try anyway (slow, ~30 GB of memory in fp32)."
        )
        return 2
    hub = hub_reachable()
    if not args.quiet:
        print(
            f"doctor: hub {'reachable' if hub else 'not reachable (local --prm directories only)'}"
        )
    checks = [check_model(k, sources.get(k), args.device, hub) for k in (args.only or KINDS)]
    for check in checks:
        diff = "" if check.max_diff is None else f" max |diff| {check.max_diff:.4g}"
        if args.quiet and check.status != "fail":
            continue
        print(f"doctor: {check.status.upper():4s} {check.name}:{diff} {check.message}")
    statuses = {c.status for c in checks}
    if "fail" in statuses:
        return 1
    if statuses == {"skip"}:
        print("doctor: nothing could be checked (no hub access and no local --prm directories?)")
        return 2
    return 0
