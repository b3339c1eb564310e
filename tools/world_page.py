"""Write the arithmetic world's results page and its CSVs (``tools/world_stats.py``)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from world_metrics import KINDS, TARGETS

#: what would close each target's miss: today's text (prose, not a measurement), so a page
#: rendered from stored numbers says what has been learnt since they were computed
CLOSERS = {target[0]: target[-1] for target in TARGETS}
#: each target's bounds (low, high or None)
BOUNDS = {target[0]: (target[3], target[4]) for target in TARGETS}


def verdict(target: dict) -> str:
    """The target's verdict: "yes" / "no" when the whole 95 % interval is on that side of the
    bounds; otherwise the point estimate's side, saying the interval reaches past the bound."""
    word = "yes" if target["met"] else "no"
    low, high = BOUNDS.get(target["target"], (None, None))
    ci_low, ci_high = target["ci"]
    if low is None or math.isnan(ci_low) or math.isnan(ci_high):  # nothing to judge by
        return word
    inside = ci_low >= low and (high is None or ci_high <= high)
    outside = ci_high < low or (high is not None and ci_low > high)
    if (target["met"] and inside) or (not target["met"] and outside):
        return word
    return f"{word} (point estimate; the 95 % interval reaches past the bound)"


#: the recipes that build this world's calibration sets (``[rollout] n``: rollouts per prefix)
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RECIPES = {"make demo": EXAMPLES / "arith.toml", "peer table": EXAMPLES / "arith-peers-report.toml"}
#: the rollouts per prefix a calibration set needs to decide (the world's target)
MIN_ROLLOUTS = 16


def recipe_rollouts(recipes: dict[str, Path]) -> dict[str, int]:
    """``[rollout] n`` of each recipe file that exists."""
    import tomllib

    return {
        name: int(tomllib.loads(path.read_text(encoding="utf-8"))["rollout"]["n"])
        for name, path in recipes.items()
        if path.is_file()
    }


def size_target_rows(splits: dict, rollouts: dict[str, int]) -> list[str]:
    """Table rows: test split sizes and pools against 400 ID / 200 OOD x 64, and the
    calibration sets' rollouts per prefix against ``MIN_ROLLOUTS``."""
    idd, ood = splits["id"], splits["ood"]
    pools = min(idd["draws"] // idd["questions"], ood["draws"] // ood["questions"])
    sized = idd["questions"] >= 400 and ood["questions"] >= 200 and pools >= 64
    rows = [
        f"| test splits >= 400 ID and >= 200 OOD questions, pools of 64 | {idd['questions']} ID, "
        f"{ood['questions']} OOD, {pools} draws each | {'yes' if sized else 'no'} |"
    ]
    for name, n in rollouts.items():
        gap = (
            ""
            if n >= MIN_ROLLOUTS
            else f": missed by {MIN_ROLLOUTS - n} (docs/real-world.md says what it costs)"
        )
        rows.append(
            f"| calibration sets >= {MIN_ROLLOUTS} Monte Carlo rollouts per prefix ({name}) | "
            f"{n} | {'yes' if n >= MIN_ROLLOUTS else 'no'}{gap} |"
        )
    return rows


PAGE = "arith-world.md"
FOLDER = "arith-world"


def _write_csv(path: Path, header: list[str], rows) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for row in rows:
            writer.writerow([f"{v:.4f}" if isinstance(v, float) else v for v in row])
    tmp.replace(path)


def _reliability_png(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for ax, which, title in zip(
        axes, ("last_step_calibration", "step_calibration"),
        ("last step vs correct answer", "every step vs on-path check"), strict=True,
    ):  # fmt: skip
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
        for split, block in summary["splits"].items():
            if which not in block:
                continue
            bins = block[which]["bins"]
            ax.plot([b[2] for b in bins], [b[3] for b in bins], marker="o",
                    label=f"{split} (ECE {block[which]['ece']:.3f})")  # fmt: skip
        ax.set_xlabel("raw PRM score (bin mean)")
        ax.set_ylabel("observed rate")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(path)


def _ci(pair) -> str:
    return f"[{pair[0]:.3f}, {pair[1]:.3f}]"


def write_page(summary: dict, data: dict, out: Path, command: str) -> None:
    """CSVs + PNG under ``out/arith-world/``, the page ``out/arith-world.md`` (atomically)."""
    folder = out / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    splits = summary["splits"]
    _write_csv(
        folder / "curves.csv", ["split", "curve", "n", "mean", "ci_low", "ci_high"],
        [(s, *row) for s, block in splits.items() for row in block["curves"]],
    )  # fmt: skip
    _write_csv(
        folder / "errors.csv", ["split", "first_error_kind", "share_of_wrong_draws"],
        [(s, k, block["first_error_kinds"][k]) for s, block in splits.items() for k in KINDS],
    )  # fmt: skip
    _write_csv(
        folder / "targets.csv", ["target", "measured", "ci_low", "ci_high", "met", "gap"],
        [(t["target"], t["measured"], t["ci"][0], t["ci"][1], t["met"], t["gap"])
         for t in summary["targets"]],
    )  # fmt: skip
    _write_csv(
        folder / "per_question.csv", ["split", "question_id", "level", "solve_rate"],
        [(s, r["question_id"], r["level"], sum(r["correct"]) / len(r["correct"]))
         for s, block in data.items() for r in block["records"]],
    )  # fmt: skip
    rel_rows = []
    for s, block in splits.items():
        for which in ("last_step_calibration", "step_calibration"):
            for b in block.get(which, {}).get("bins", []):
                rel_rows.append((s, which.removesuffix("_calibration"), *b))
    _write_csv(
        folder / "reliability.csv", ["split", "scores", "bin", "count", "mean_score", "rate"],
        rel_rows,
    )  # fmt: skip
    if any("last_step_calibration" in b for b in splits.values()):
        _reliability_png(summary, folder / "reliability.png")
    (folder / "summary.json").write_text(
        json.dumps({k: v for k, v in summary.items()}, indent=1) + "\n", encoding="utf-8"
    )
    page = out / PAGE
    tmp = page.with_suffix(".md.tmp")
    tmp.write_text(render(summary, command), encoding="utf-8")
    tmp.replace(page)


def render(summary: dict, command: str) -> str:
    splits = summary["splits"]
    idd, ood = splits["id"], splits["ood"]
    n = summary["samples_per_question"]
    lines = [
        "# The arithmetic world: generator and PRM, measured",
        "",
        f"Regenerate: `{command}` (CPU; {summary.get('wall_s', 0):.0f} s wall when written).",
        "",
        "Generated by tools/world_stats.py on the shipped models "
        "(`src/dprm/llm/worlds/arith/{generator,prm}`, trained by tools/train_world.py). "
        f"Each packaged test question gets {n} draws at temperature 1; intervals are 95 % "
        f"paired bootstrap intervals over questions ({1000} resamples).",
        "",
        "## Sizes",
        "",
        "| split | questions | draws | questions with right and wrong draws | operations |",
        "|---|---|---|---|---|",
    ]
    for name, s in splits.items():
        levels = ", ".join(f"{k}: {v}" for k, v in s["levels"].items())
        lines.append(
            f"| {name} | {s['questions']} | {s['draws']} | "
            f"{s.get('questions_with_both_classes', '-')} | {levels} |"
        )
    lines += ["", "## Targets", "", "| target | measured | 95 % interval | met | gap, and what "
              "would close it |", "|---|---|---|---|---|"]  # fmt: skip
    for t in summary["targets"]:
        closer = CLOSERS.get(t["target"], t["to_close"])
        gap = "" if t["met"] else f"missed by {t['gap']:.3f}: {closer}"
        lines.append(
            f"| {t['target']} | {t['measured']:.3f} | {_ci(t['ci'])} | {verdict(t)} | {gap} |"
        )
    lines += ["", "Sizes against the targets (the world's own test splits above; the calibration sets "
              "of the recipes that run this world, read from their files now):", "",
              "| target | measured | met |", "|---|---|---|",
              *size_target_rows(splits, recipe_rollouts(RECIPES))]  # fmt: skip
    lines += ["", "## Curves (mean over questions, 95 % interval)", "",
              "| split | curve | " + " | ".join(f"n={k}" for k in (1, 4, 16, 64)) + " |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for name, s in splits.items():
        for curve in ("pass@k", "majority@n", "prm-best-of-n"):
            cells = [
                f"{m:.3f} {_ci((lo, hi))}"
                for c, k, m, lo, hi in s["curves"]
                if c == curve and k in (1, 4, 16, 64)
            ]
            lines.append(f"| {name} | {curve} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "pass@k: the unbiased estimator; majority@n and PRM best-of-n (the highest last-step "
        "score picks the answer): expected accuracy over random n-subsets of the draws. All "
        "points: curves.csv.",
        "",
        "## The generator",
        "",
        "| | ID | OOD |",
        "|---|---|---|",
        f"| pass@1 | {idd['pass@1']:.3f} {_ci(idd['pass@1_ci'])} | "
        f"{ood['pass@1']:.3f} {_ci(ood['pass@1_ci'])} |",
        f"| majority@64 | {idd['majority@n@64']:.3f} | {ood['majority@n@64']:.3f} |",
        f"| correct answers on the true path | {idd['genuine_share_of_correct']:.3f} | "
        f"{ood['genuine_share_of_correct']:.3f} |",
        f"| questions solved < 10 % / > 90 % of the time | {idd['share_rate_below_0.1']:.2f} / "
        f"{idd['share_rate_above_0.9']:.2f} | {ood['share_rate_below_0.1']:.2f} / "
        f"{ood['share_rate_above_0.9']:.2f} |",
        "| pass@1 by number of operations | "
        + ", ".join(f"{k}: {v:.2f}" for k, v in idd["pass@1_by_level"].items())
        + " | "
        + ", ".join(f"{k}: {v:.2f}" for k, v in ood["pass@1_by_level"].items())
        + " |",
        "",
        "First error of the wrong draws (share of wrong draws; errors.csv):",
        "",
        "| kind | ID | OOD |",
        "|---|---|---|",
    ]
    for k in KINDS:
        lines.append(
            f"| {k} | {idd['first_error_kinds'][k]:.3f} | {ood['first_error_kinds'][k]:.3f} |"
        )
    if "within_question_auroc" in idd:
        lines += [
            "",
            "## The PRM",
            "",
            "Raw scores (no calibration). Last step: the last step's score against a correct "
            "final answer. Every step: each step's score against the exact on-path check.",
            "",
            "| | ID | OOD |",
            "|---|---|---|",
            f"| within-question AUROC (mean over questions with both classes) | "
            f"{idd['within_question_auroc']:.3f} {_ci(idd['within_question_auroc_ci'])} | "
            f"{ood.get('within_question_auroc', float('nan')):.3f} "
            f"{_ci(ood.get('within_question_auroc_ci', (float('nan'),) * 2))} |",
            f"| pooled AUROC | {idd['pooled_auroc']:.3f} | {ood['pooled_auroc']:.3f} |",
        ]
        for which, label in (("last_step_calibration", "last step"), ("step_calibration",
                                                                       "every step")):  # fmt: skip
            a, b = idd[which], ood[which]
            lines += [
                f"| ECE, {label} (10 bins) | {a['ece']:.3f} | {b['ece']:.3f} |",
                f"| Brier, {label} (base rate p(1-p)) | {a['brier']:.3f} "
                f"({a['brier_base_rate']:.3f}) | {b['brier']:.3f} ({b['brier_base_rate']:.3f}) |",
                f"| mean score / mean label, {label} | {a['mean_score']:.3f} / "
                f"{a['mean_label']:.3f} | {b['mean_score']:.3f} / {b['mean_label']:.3f} |",
            ]
        lines += [
            f"| best-of-64 minus majority@64 | {idd['prm-best-of-n@64'] - idd['majority@n@64']:+.3f}"
            f" {_ci(idd['bon@64_minus_majority@64_ci'])} | "
            f"{ood['prm-best-of-n@64'] - ood['majority@n@64']:+.3f} "
            f"{_ci(ood['bon@64_minus_majority@64_ci'])} |",
            "",
            "First-error kind of the draw the PRM ranks first, per question (ID): "
            + ", ".join(f"{k} {v}" for k, v in idd["kind_of_prm_top_draw"].items())
            + ".",
            "",
            "Reliability diagram of the raw PRM: ![reliability](arith-world/reliability.png) "
            "(reliability.csv).",
        ]
    check = summary.get("generator_check")
    lines += ["", "## Code paths", ""]
    lines.append(
        "Draws: tools/world_sampler.py, a KV-cached sampler over the generator's own "
        "transformers modules (dprm's transformers generator, `dprm.llm.generate`, runs at "
        "tens of sequences a second on a CPU, too slow for "
        f"{idd['draws'] + ood['draws']} draws here). PRM scores: dprm's `QwenPRM` "
        "(`dprm.llm.prm.load_prm(...).score_steps`, the code path of `dprm embed`)."
    )
    if check:
        lines.append(
            f"Check: the first {check['questions']} ID questions drawn {check['samples']} times "
            f"through `dprm.llm.generate` give pass@1 {check['dprm_pass@1']:.3f} against the "
            f"sampler's {check['sampler_pass@1']:.3f} on the same questions (difference "
            f"sampler - dprm, 95 % interval {_ci(check['difference_ci'])})."
        )
    lines.append(
        "`dprm run` at this size (600 questions x 64 draws, Monte Carlo rollouts and every "
        "calibrator) is too slow for 2 CPU cores; `make demo` runs the real pipeline on a "
        "subset and its report says what that subset can show."
    )
    return "\n".join(lines) + "\n"
