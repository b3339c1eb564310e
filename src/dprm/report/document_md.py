"""The Markdown text of ``report.md`` (figures embedded by relative path, tables inlined)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dprm.report.grid import REAL_DATA
from dprm.report.tables import DATASET_LABELS, caption, display, subset, to_markdown


def _rel(path: str, out: Path) -> str:
    """``path`` relative to the report's directory ``out`` (so the link renders wherever OUT is)."""
    return Path(os.path.relpath(Path(path).absolute(), Path(out).absolute())).as_posix()


def _check_lines(checks: dict[str, Any]) -> list[str]:
    lines = []
    if checks["frontier"]:
        lines += [
            "| world | dataset | OT cost range | Base cost range | wider | OT accuracy (C=0.5 → 0.999) | largest drop | rises | OT − same-n-for-all at equal cost |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in checks["frontier"]:
            lines.append(
                f"| {r['world']} | {DATASET_LABELS.get(r['dataset'], r['dataset'])} | "
                f"{r['cost_range'][0]:.3f}–{r['cost_range'][1]:.3f} | {r['base_cost_range'][0]:.3f}–{r['base_cost_range'][1]:.3f} | "
                f"{'yes' if r['wider_than_base'] else 'NO'} | {r['accuracy_range'][0]:.3f} → {r['accuracy_range'][1]:.3f} | "
                f"{r['largest_drop']:.4f} | {'yes' if r['rises'] else 'NO'} | {r.get('minus_uniform', float('nan')):+.4f} |"
            )
        lines += [
            "",
            "Last column: mean over the C points of OT's accuracy minus that of giving every question the "
            "same n at the same mean cost (interpolated); negative means adaptive allocation did not beat "
            "uniform allocation on this world.",
            "",
        ]
    if checks.get("greedy"):
        lines += [
            "Cost-aware allocation (beyond the paper): at each C, the C rule's total budget spent on the "
            "largest marginal gains of the same success curves (`dprm.ias.budget_greedy`, sweep "
            "`greedy`). Mean over the C points, accuracy differences at equal cost:",
            "",
            "| world | dataset | method | greedy − C rule | C rule − same-n-for-all | greedy − same-n-for-all |",
            "|---|---|---|---:|---:|---:|",
        ]
        for r in checks["greedy"]:
            lines.append(
                f"| {r['world']} | {DATASET_LABELS.get(r['dataset'], r['dataset'])} | {display(r['method'])} | "
                f"{r['greedy_minus_rule']:+.4f} | {r['rule_minus_uniform']:+.4f} | {r['greedy_minus_uniform']:+.4f} |"
            )
        lines.append("")
    if checks["tables"]:
        lines += [
            "| PRM | dataset | Brier OT / Base | ECE OT / Base | OT ahead on both (generator mean) | ahead for every generator (Brier, ECE) |",
            "|---|---|---|---|---|---|",
        ]
        for r in checks["tables"]:
            lines.append(
                f"| {r['prm']} | {DATASET_LABELS.get(r['dataset'], r['dataset'])} | {r['brier']:.4f} / {r['base_brier']:.4f} | "
                f"{r['ece']:.4f} / {r['base_ece']:.4f} | {'yes' if r['ahead_on_brier_and_ece'] else 'NO'} | "
                f"{'yes' if r['ahead_on_brier_every_generator'] else 'no'}, {'yes' if r['ahead_on_ece_every_generator'] else 'no'} |"
            )
        lines.append("")
    return lines


TWIN_NOTE = (
    "What the twin is and isn't: each synthetic world is fitted to the paper's *Base* statistics "
    "(Brier, PosBrier and ECE of the raw PRM score per generator, PRM and dataset), which depend "
    "only on the world, never on a calibrator. The OT and QR numbers are not fitted: they come "
    "out of training. So agreement with the paper on OT / QR is evidence, not proof, that a "
    "method behaves as it would on real PRM hidden states; disagreement can come from the world "
    "(how much of the success signal a synthetic hidden state carries) as well as from the method."
)


def _comparison_lines(comparison: dict) -> list[str]:
    """The "paper vs dprm" section: reading, improvement rows, then every covered cell."""
    from dprm.report.paper import cells_markdown, improvements_markdown

    cells, improvements = comparison["cells"], comparison["improvements"]
    lines = [
        "## Paper vs dprm (paper protocol)",
        "",
        "The paper's published numbers next to ours, evaluated as the paper did (ID = `math500` = "
        "our training split, training questions included; OOD = `aime24-25` = our held-out OOD "
        f"split); ours are seed means. This run covers {len(cells)} of the paper's table cells.",
        "",
        TWIN_NOTE,
        "",
        "Reading (generated from the numbers below):",
        "",
        *comparison["reading"],
        "",
    ]
    if not improvements.empty:
        lines += [
            "### 'Avg. % improv.' rows",
            "",
            "Mean over generators of the per-generator relative improvement over Base (WQL: over "
            "QR); `n_generators` = how many of the paper's 6 generators this run averages.",
            "",
            improvements_markdown(improvements),
        ]
    if not cells.empty:
        lines += [
            "<details><summary>Every table cell: paper, dprm, difference</summary>",
            "",
            cells_markdown(cells),
            "</details>",
            "",
        ]
    lines += [
        "Standalone: `tables/paper_vs_dprm_cells.{md,csv}`, "
        "`tables/paper_vs_dprm_improvements.{md,csv}`.",
        "",
    ]
    return lines


def render_report(
    cfg,
    run: dict,
    tables: dict,
    figs: list[dict],
    checks: dict,
    out: Path,
    failures: list[dict] | None = None,
    truth: dict[str, str] | None = None,
    comparison: dict | None = None,
) -> str:
    """The report: grid, seeds, versions and timing; checks; Table 1 per PRM and protocol;
    paper vs dprm; figures; appendix.

    Args:
        tables: ``{protocol: {prm: CalibrationTable}}`` (protocols of
            :data:`dprm.report.tables.PROTOCOLS`), or ``{prm: table}`` for one unlabelled set.
        comparison: :func:`dprm.report.paper.write_comparison`'s result, if any.
    """
    if tables and not all(isinstance(t, dict) for t in tables.values()):
        tables = {"held-out": tables}
    v = run["versions"]
    intro = (
        "Real data from a recipe (`dprm run`): generated or released labels embedded with the "
        "recipe's PRMs (`train` = the calibration question set, `ID` and `OOD` = the recipe's "
        "test sets); every number below is listed in `results.json` (per-question budgets in "
        "`ias/**/budgets.parquet`)."
        if cfg.size == REAL_DATA
        else "Synthetic worlds with a known truth stand in for the paper's data (MATH500 → `ID`, "
        "AIME24-25 → `OOD`); every number below is recomputed by `dprm reproduce` and listed in "
        "`results.json` (per-question budgets in `ias/**/budgets.parquet`)."
    )
    lines = [
        f"# dprm reproduction: grid `{cfg.grid}`",
        "",
        intro,
        "",
        "## Run",
        "",
        f"- Grid: generators {', '.join(cfg.generators)} × PRMs {', '.join(cfg.prms)} × datasets ID, OOD "
        f"(world size `{cfg.size}`).",
        f"- Methods: Base (raw PRM score) + {', '.join(display(m) for m in cfg.methods)}; training seeds {cfg.seeds}; "
        "calibrators are trained and early-stopped on the world's `train` split only (MATH-train-like, "
        "80/20 question split inside, seed 42). Two evaluation protocols, each labelled: **held out** "
        "(the headline) = ID metrics on the `id` split (MATH500-like; no calibrator trained or "
        "early-stopped on its questions) and OOD on the `ood` split (AIME-like); **paper protocol** "
        "= ID metrics on the `train` split (training questions included, as the paper evaluated "
        "MATH; for the side-by-side with its tables) and the same OOD split. IAS runs on the held-out "
        "`id` and `ood` BoN sets. See docs/report.md.",
        f"- IAS: N_max = 64, QR at β = {cfg.beta}, mixture over 100 mid-point levels, accuracy exact "
        f"(Monte Carlo with {cfg.mc_trials} trials as a cross-check in `results.json`).",
        f"- Training overrides: {cfg.overrides if cfg.overrides else 'none (each method’s defaults)'}.",
        f"- Versions: dprm {v['dprm']}, torch {v['torch']}, numpy {v['numpy']}, pandas {v['pandas']}, "
        f"python {v['python']}"
        + (f", matplotlib {v['matplotlib']}" if "matplotlib" in v else "")
        + ".",
        f"- Wall time of this invocation: {run['wall_time_s']:.1f} s"
        + (" (resumed: finished units were skipped)" if run["resumed"] else "")
        + f"; total time of all units so far: {run['unit_seconds_total']:.1f} s.",
        "",
        "| stage | seconds (this invocation) | units run | units skipped | unit seconds (all invocations) |",
        "|---|---:|---:|---:|---:|",
    ]
    by_stage = run.get("unit_seconds_by_stage", {})
    for stage, t in run["stage_timing"].items():
        total = by_stage.get(stage)
        cell = f"{total:.1f}" if total is not None else "--"
        lines.append(f"| {stage} | {t['seconds']:.1f} | {t['units']} | {t['skipped']} | {cell} |")
    if failures:
        lines += [
            "",
            "## Failures",
            "",
            "These units failed in this invocation; their methods are missing from the results "
            "below (a rerun of the same command retries them):",
            "",
        ]
        lines += [f"- `{f['unit']}`: {f['error'].splitlines()[0][:300]}" for f in failures]
    reused = run.get("reused_units", [])
    if reused:
        lines += [
            "",
            f"Reused from an earlier invocation ({len(reused)} units whose recorded input "
            "fingerprint — settings, world recipe, content hash of the model read — was unchanged):",
            "",
            "<details><summary>Reused units</summary>",
            "",
        ]
        lines += [f"- `{key}`" for key in reused] + ["", "</details>"]
    lines += [
        "",
        "## Checks",
        "",
        "OT against Base on the IAS frontier (C sweep) and in the calibration tables:",
        "",
    ]
    lines += _check_lines(checks)
    headings = {
        "held-out": "## Calibration (Table 1), held-out protocol",
        "paper": "## Calibration (Table 1), paper protocol",
    }
    notes = {
        "held-out": "ID = questions no calibrator trained or early-stopped on; OOD held out as well.",
        "paper": "ID = the training split, training questions included (as the paper did for "
        "MATH); optimistic for every calibrator. OOD is the same held-out split as above.",
    }
    for protocol, by_prm in tables.items():
        stem = "calibration" if protocol == "held-out" else "calibration_paper_protocol"
        lines += [headings.get(protocol, f"## Calibration (Table 1), {protocol}"), ""]
        lines += [notes.get(protocol, ""), ""]
        for prm, table in by_prm.items():
            lines += [f"### PRM {prm} ({protocol} protocol)", "", caption(table), ""]
            paper = [m for m in table.methods if m in ("base", "ot", "qr")]
            if len(paper) < len(table.methods) and "base" in paper:
                lines += ["Base / OT / QR as in the paper:", "", to_markdown(subset(table, paper))]
                lines += [
                    "<details><summary>All methods (Base / OT / QR first, then the calibrators beyond the paper)</summary>",
                    "",
                ]
                lines += [to_markdown(table), "</details>", ""]
            else:
                lines += [to_markdown(table)]
            lines += [
                f"LaTeX: `tables/{stem}_{prm}.tex`, CSV: `tables/{stem}_{prm}.csv` (all methods).",
                "",
            ]
    if comparison is not None:
        lines += _comparison_lines(comparison)
    if truth:
        lines += [
            "## Distance to the truth",
            "",
            "Held-out protocol. Mean absolute error, over 100 mid-point levels and all records, between each "
            "calibrator's quantiles and the true conditional quantile function of the latent "
            "success probability p (known in the synthetic worlds); lower is better, seed mean "
            "± std. ot, mono and qr fit the label y = k/n (p blurred by binomial noise), "
            "binomial fits p itself; point calibrators count as a point mass at their estimate.",
            "",
        ]
        for prm, text in truth.items():
            lines += [f"### PRM {prm}", "", text]
    sections = (
        ("main", "## Instance-adaptive best-of-N and flexibility"),
        ("calibration", "## Calibration figures"),
        ("appendix", "## Appendix: τ sweeps for the other generators"),
    )
    for section, heading in sections:
        chosen = [f for f in figs if f["section"] == section]
        if not chosen:
            continue
        lines += [heading, ""]
        for f in chosen:
            png = next(p for p in f["files"] if p.endswith(".png"))
            lines += [f"![{f['name']}]({_rel(png, out)})", "", f"*{f['caption']}*", ""]
    return "\n".join(lines) + "\n"
