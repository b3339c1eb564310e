"""The calibration sections of ``report.md``: Table 1 per protocol and PRM, the paper's
published numbers beside this run's, and the distance to the truth."""

from __future__ import annotations

from dprm.report.sections.names import RunNames
from dprm.report.tables import caption, display, subset, to_markdown

TWIN_NOTE = (
    "What the twin is and isn't: each synthetic world is fitted to the paper's *Base* statistics "
    "(Brier, PosBrier and ECE of the raw PRM score per generator, PRM and dataset), which depend "
    "only on the world, never on a calibrator. The OT and QR numbers are not fitted: they come "
    "out of training. So agreement with the paper on OT / QR is evidence, not proof, that a "
    "method behaves as it would on real PRM hidden states; disagreement can come from the world "
    "(how much of the success signal a synthetic hidden state carries) as well as from the method."
)


def comparison_lines(comparison: dict, names: RunNames | None = None) -> list[str]:
    """The "paper vs dprm" section: reading, improvement rows, then every covered cell."""
    from dprm.report.paper import cells_markdown, improvements_markdown

    names = names or RunNames()
    cells, improvements = comparison["cells"], comparison["improvements"]
    if names.real:
        head = [
            "## Park et al.'s published numbers next to this run (in-sample protocol)",
            "",
            "The paper's Table 1 cells whose generator and PRM names this run shares, next to "
            f"this run's numbers on its own data (paper ID `math500` ↔ the train sets "
            f"{names.set_text('train')}, training questions included; paper OOD `aime24-25` ↔ "
            f"{names.set_text('ood')}); ours are seed means. This run covers {len(cells)} of the "
            "paper's table cells. Equal names do not make equal data: compare with care.",
            "",
        ]
    else:
        head = [
            "## Paper vs dprm (paper protocol)",
            "",
            "The paper's published numbers next to ours, evaluated as the paper did (ID = `math500` "
            "= our training split, training questions included; OOD = `aime24-25` = our held-out "
            f"OOD split); ours are seed means. This run covers {len(cells)} of the paper's table "
            "cells.",
            "",
            TWIN_NOTE,
            "",
        ]
    lines = [
        *head,
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


def table_lines(protocol: str, word: str, by_prm: dict, names: RunNames) -> list[str]:
    """One protocol's calibration tables, a subsection per PRM."""
    stem = "calibration" if protocol == "held-out" else "calibration_paper_protocol"
    if names.real:
        heading = f"## Calibration, {word} protocol"
        note = {
            "held-out": "ID and OOD: questions no calibrator trained or early-stopped on.",
            "paper": f"ID = the train sets ({names.set_text('train')}), training questions "
            "included (the protocol of Park et al.'s Table 1); optimistic for every calibrator. "
            "OOD is the same held-out set as above.",
        }.get(protocol, "")
    else:
        heading = f"## Calibration (Table 1), {protocol} protocol"
        note = {
            "held-out": "ID = questions no calibrator trained or early-stopped on; OOD held out as well.",
            "paper": "ID = the training split, training questions included (as the paper did for "
            "MATH); optimistic for every calibrator. OOD is the same held-out split as above.",
        }.get(protocol, "")
    lines = [heading, ""] + ([note, ""] if note else [])
    for prm, table in by_prm.items():
        lines += [f"### PRM {prm} ({word} protocol)", "", caption(table), ""]
        paper = [m for m in table.methods if m in ("base", "ot", "qr")]
        if not names.real and len(paper) < len(table.methods) and "base" in paper:
            head = (
                "Base / OT / QR as in the paper:"
                if paper == ["base", "ot", "qr"]
                else f"{' / '.join(display(m) for m in paper)} (the paper's methods that ran):"
            )
            lines += [head, "", to_markdown(subset(table, paper))]
            lines += [
                "<details><summary>All methods (the paper's first, then the calibrators beyond "
                "it)</summary>",
                "",
            ]
            lines += [to_markdown(table), "</details>", ""]
        else:
            lines += [to_markdown(table)]
        lines += [
            f"LaTeX: `tables/{stem}_{prm}.tex`, CSV: `tables/{stem}_{prm}.csv` (all methods).",
            "",
        ]
    return lines


def truth_lines(truth: dict[str, str] | None) -> list[str]:
    """The "Distance to the truth" section (synthetic worlds): a table per PRM."""
    if not truth:
        return []
    lines = [
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
    return lines
