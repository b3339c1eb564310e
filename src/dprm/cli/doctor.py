"""``dprm doctor``: the first command on a new GPU machine (real PRMs vs published values)."""

from __future__ import annotations

import argparse


def _check_list() -> str:
    from dprm.llm.doctor import GOLDEN

    lines = []
    for name, golden in GOLDEN.items():
        values = golden.expected[0] if golden.expected else "none (load + score only)"
        adapter = f" + adapter {golden.adapter}" if golden.adapter else ""
        lines.append(f"  {name}: {golden.hub_id}{adapter}, {golden.dtype}; {golden.source}; "
                     f"expected {values}")  # fmt: skip
    return "\n".join(lines)


def extras_report() -> str:
    """One line per optional extra: its installed version, or missing and how to get it."""
    from dprm.llm.extras import EXTRAS, extras_status

    lines = ["doctor: optional extras"]
    for name, version in extras_status().items():
        extra = EXTRAS[name]
        state = version if version else f"missing ({extra.install})"
        lines.append(f"doctor:   {name:<12} {state:<34} {extra.needed_for}")
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    from dprm.llm.doctor import GOLDEN

    names = tuple(GOLDEN)
    p = subparsers.add_parser(
        "doctor",
        help="check the real PRMs (and Park et al.'s adapter) against published values",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="List the optional extras (transformers, math-verify, datasets, peft, vllm, "
        "optuna, ray, submitit: installed version or missing). Then load each supported PRM "
        "(hub id, or a local directory with --prm NAME=DIR) "
        "through the same path every stage uses, score a published example and compare with "
        "the published values: pass/fail per check with the largest difference; checks it "
        "cannot run are listed with the reason. Needs a GPU (7B models) and the hub or local "
        "copies; says plainly when either is missing. Exit status: 0 every check that ran "
        "passed, 1 a check failed, 2 nothing could be checked.\n\nGolden checks:\n" + _check_list(),
    )
    p.add_argument(
        "--prm",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help=f"a local directory or hub id for a check ({', '.join(names)}); repeatable",
    )
    p.add_argument(
        "--adapter",
        default=None,
        metavar="DIR_OR_ID",
        help="Park et al.'s adapter for the park-adapter check (default: its hub id)",
    )
    p.add_argument("--only", choices=names, action="append", help="run only these checks")
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
    from dprm.llm.doctor import GOLDEN, check_model, environment, hub_reachable

    names = tuple(GOLDEN)
    sources = {}
    for item in args.prm:
        name, sep, path = item.partition("=")
        if not sep or name not in names:
            raise DataError(None, f"--prm {item!r}: expected NAME=PATH with NAME in {list(names)}")
        sources[name] = path
    env = environment()
    if not args.quiet:
        print("doctor: " + ", ".join(f"{k}={v}" for k, v in env.items()))
        print(extras_report())
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
    checks = []
    for name in args.only or names:
        # Park's checks run the same Qwen checkpoint: a --prm qwen-prm=DIR serves them too
        source = sources.get(name) or (sources.get("qwen-prm") if name.startswith("park") else None)
        check = check_model(name, source, args.device, hub, adapter=args.adapter)
        checks.append((name, check))
        if args.quiet and check.status != "fail":
            continue
        diff = "" if check.max_diff is None else f" max |diff| {check.max_diff:.4g}"
        print(f"doctor: {check.status.upper():4s} {name} ({check.name}):{diff} {check.message}")
    not_run = [(n, c.message) for n, c in checks if c.status == "skip"]
    if not_run and not args.quiet:
        print(f"doctor: {len(not_run)} check(s) not run:")
        for name, why in not_run:
            print(f"doctor:   {name}: {why}")
    statuses = {c.status for _, c in checks}
    if "fail" in statuses:
        return 1
    if statuses == {"skip"}:
        print("doctor: nothing could be checked (no hub access and no local --prm directories?)")
        return 2
    return 0
