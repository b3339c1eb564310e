"""The trained arithmetic world's own page: docs/results/arith-world.md and its CSVs.

    python benchmarks/experiments/arith_world.py            # measure (tools/world_stats.py), then render
    python benchmarks/experiments/arith_world.py --render   # the page from the stored summary (seconds)
    python benchmarks/experiments/arith_world.py --smoke --out DIR  # render the stored summary into DIR

The numbers come from ``tools/world_stats.py`` on the shipped generator and PRM (400 ID and 200 OOD
questions x 64 draws, minutes of CPU): it writes ``docs/results/arith-world/`` (summary.json,
CSVs, the reliability diagram); this script records where they were computed and renders the
page from ``summary.json`` alone, with the header every results page carries. When
``docs/results/arith-world/audit.json`` is present (``python tools/audit_world.py``: the same
quantities measured again with none of the page's code), the page ends with the comparison.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_page as rp  # noqa: E402

sys.path.insert(0, str(rp.ROOT / "tools"))
import world_page  # noqa: E402

PAGE = "arith-world"
TITLE = "The arithmetic world: generator and PRM, measured"
SCRIPT = "python benchmarks/experiments/arith_world.py"


AUDIT_COMMAND = "python tools/audit_world.py"
#: (audit key, label, page value, page interval or None) of each compared quantity
COMPARED = (
    ("pass@1", "pass@1", lambda s: s["pass@1"], lambda s: s["pass@1_ci"]),
    ("majority@64", "majority@64", lambda s: s["majority@n@64"], lambda s: s["majority@n@64_ci"]),
    ("prm_best_of_64", "PRM best-of-64", lambda s: s["prm-best-of-n@64"],
     lambda s: s["prm-best-of-n@64_ci"]),
    ("within_question_auroc", "within-question AUROC", lambda s: s["within_question_auroc"],
     lambda s: s["within_question_auroc_ci"]),
    ("pooled_auroc", "pooled AUROC", lambda s: s["pooled_auroc"], None),
    ("last_step_ece", "ECE, last step", lambda s: s["last_step_calibration"]["ece"], None),
    ("last_step_brier", "Brier, last step", lambda s: s["last_step_calibration"]["brier"], None),
)  # fmt: skip


def _inside(value: float, ci) -> str:
    return "yes" if ci[0] <= value <= ci[1] else "**no**"


def _paired_pass1(split: str, audit: dict) -> str:
    """Audit minus page pass@1 over the same questions (per_question.csv), mean and 95 %
    normal interval of the per-question differences."""
    page = {}
    with (rp.folder(PAGE) / "per_question.csv").open(encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            s, qid, _, rate = line.strip().split(",")
            if s == split:
                page[qid] = float(rate)
    diffs = [r - page[q] for q, r in audit["solve_rates"].items() if q in page]
    if len(diffs) < 2:
        return "-"
    mean = sum(diffs) / len(diffs)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    half = 1.96 * sd / math.sqrt(len(diffs))
    return f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}] over {len(diffs)} questions"


def audit_section(summary: dict, audit: dict) -> str:
    """The "Independent check" section: each audited quantity beside the page's."""
    digest = hashlib.sha256((rp.folder(PAGE) / "summary.json").read_bytes()).hexdigest()
    stale = [name for name, sha in audit["files_sha256"].items()
             if (rp.ROOT / name).is_file()
             and hashlib.sha256((rp.ROOT / name).read_bytes()).hexdigest() != sha]  # fmt: skip
    settings = audit["settings"]
    sizes = ", ".join(f"{s} {n}" for s, n in settings["questions_per_split"].items())
    lines = [
        "## Independent check",
        "",
        f"`{audit['command']}` measured the shipped models again with none of the code above "
        "(it imports neither dprm nor tools/world_*.py): its own reading of the question files, "
        "each answer worked out from the question's text, its own KV-cached sampler over "
        "transformers' forward (temperature 1, seed "
        f"{settings['seed']}), a numeric grader of the last `\\boxed{{}}`, and its own reading "
        "of the PRM (transformers' Qwen2 body, the score head applied by hand). Questions: "
        f"{sizes}, {settings['samples']} draws each; 95 % bootstrap intervals over questions; "
        f"commit `{audit['commit'][:7]}`, {audit['cpu_s']:.0f} CPU-s. After the models or "
        f"the page's data change, rerun `{AUDIT_COMMAND}` and then "
        f"`{SCRIPT} --render`.",
        "",
    ]
    mismatches = sum(len(c["answer_mismatches"]) for c in audit["answer_checks"].values())
    lines.append(f"Stored answers that differ from the computed ones: {mismatches}.")
    if audit.get("page_summary_sha256") != digest:
        lines.append("**The page's summary changed after this audit: rerun it.**")
    if stale:
        lines.append(f"**Files changed after this audit: {', '.join(stale)}; rerun it.**")
    lines += [
        "",
        "| split | quantity | page [95 %] | audit [95 %] | audit inside page's interval | "
        "page inside audit's interval |",
        "|---|---|---|---|---|---|",
    ]
    subset = False
    for split, mine in audit["splits"].items():
        page = summary["splits"][split]
        # on a subset of the questions the audit estimates the all-question value with its own
        # interval; the page's interval is then not about the same questions
        whole = mine["questions"] == page["questions"]
        subset = subset or not whole
        for key, label, value, interval in COMPARED:
            p, a = value(page), mine[key]
            p_ci = interval(page) if interval else None
            shown = f"{p:.3f} {world_page._ci(p_ci)}" if p_ci else f"{p:.3f}"
            inside_page = _inside(a["value"], p_ci) if p_ci and whole else "-"
            lines.append(
                f"| {split} | {label} | {shown} | {a['value']:.3f} {world_page._ci(a['ci'])} | "
                f"{inside_page} | {_inside(p, a['ci'])} |"
            )
    if subset:
        lines += [
            "",
            "The audit ran on the first questions of each split only, so the page's value (all "
            "questions) is checked against the audit's interval, not the other way round. ECE "
            "on few questions is biased upward (noise in each bin adds to it), so a small "
            "audit's ECE interval can lie above the all-question value.",
        ]
    lines += ["", "Paired pass@1 (audit minus page, the same questions): " + "; ".join(
        f"{split} {_paired_pass1(split, mine)}" for split, mine in audit["splits"].items()
    ) + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def body(summary: dict) -> str:
    """The page below its header: tools/world_page.py's text without its own title lines, and
    the independent check when audit.json is present."""
    lines = world_page.render(summary, SCRIPT).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Generated by"))
    text = "\n".join(lines[start:]) + "\n"
    audit = rp.folder(PAGE) / "audit.json"
    if audit.is_file():
        text += "\n" + audit_section(summary, json.loads(audit.read_text(encoding="utf-8")))
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render", action="store_true", help="only re-render the page")
    parser.add_argument("--smoke", action="store_true", help="render the stored summary into --out")
    parser.add_argument("--out", type=Path, default=None, help="with --smoke: the folder")
    args = parser.parse_args()
    if args.smoke:
        if args.out is None:
            parser.error("--smoke needs --out DIR")
        summary = json.loads((rp.folder(PAGE) / "summary.json").read_text(encoding="utf-8"))
        args.out.mkdir(parents=True, exist_ok=True)
        target = args.out / f"{PAGE}.md"
        target.write_text(f"# {TITLE}\n\n" + body(summary), encoding="utf-8")
        print(f"wrote {target}")
        return
    if not args.render:
        subprocess.run([sys.executable, str(rp.ROOT / "tools" / "world_stats.py")], check=True)
        rp.record_source(PAGE, SCRIPT)
    summary = json.loads((rp.folder(PAGE) / "summary.json").read_text(encoding="utf-8"))
    print(f"wrote {rp.write_page(PAGE, TITLE, f'{SCRIPT} --render', body(summary))}")


if __name__ == "__main__":
    main()
