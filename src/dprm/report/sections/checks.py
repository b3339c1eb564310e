"""The "Checks" section of ``report.md``: the calibrator against Base on the IAS frontier and
in the calibration tables, and the cost-aware allocation against the C rule."""

from __future__ import annotations

from typing import Any

from dprm.report.tables import dataset_label, display


def check_lines(checks: dict[str, Any]) -> list[str]:
    """The rows of the checks' tables (empty when there are no checks)."""
    lines = []
    if checks.get("frontier"):
        m = display(checks["frontier"][0]["method"])
        lines += [
            f"| world | dataset | {m} cost range | Base cost range | wider | {m} accuracy (C=0.5 → 0.999) | largest drop | rises | {m} − same-n-for-all at equal cost |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in checks["frontier"]:
            lines.append(
                f"| {r['world']} | {dataset_label(r['dataset'])} | "
                f"{r['cost_range'][0]:.3f}–{r['cost_range'][1]:.3f} | {r['base_cost_range'][0]:.3f}–{r['base_cost_range'][1]:.3f} | "
                f"{'yes' if r['wider_than_base'] else 'NO'} | {r['accuracy_range'][0]:.3f} → {r['accuracy_range'][1]:.3f} | "
                f"{r['largest_drop']:.4f} | {'yes' if r['rises'] else 'NO'} | {r.get('minus_uniform', float('nan')):+.4f} |"
            )
        lines += [
            "",
            f"Last column: mean over the C points of {m}'s accuracy minus that of giving every question the "
            "same n at the same mean cost (interpolated); negative means adaptive allocation did not beat "
            "uniform allocation on this world.",
            "",
        ]
    if checks.get("greedy"):
        lines += [
            "Cost-aware allocation (beyond the paper): at each C, the C rule's total budget spent on the "
            "largest marginal gains of the same success curves (`dprm.ias.budget_greedy`, "
            "allocation `greedy`). Mean over the C points, accuracy differences at equal cost:",
            "",
            "| world | dataset | method | greedy − C rule | C rule − same-n-for-all | greedy − same-n-for-all |",
            "|---|---|---|---:|---:|---:|",
        ]
        for r in checks["greedy"]:
            lines.append(
                f"| {r['world']} | {dataset_label(r['dataset'])} | {display(r['method'])} | "
                f"{r['greedy_minus_rule']:+.4f} | {r['rule_minus_uniform']:+.4f} | {r['greedy_minus_uniform']:+.4f} |"
            )
        lines.append("")
    if checks.get("tables"):
        m = display(checks["tables"][0]["method"])
        lines += [
            f"| PRM | dataset | Brier {m} / Base | ECE {m} / Base | {m} ahead on both (generator mean) | ahead for every generator (Brier, ECE) |",
            "|---|---|---|---|---|---|",
        ]
        for r in checks["tables"]:
            lines.append(
                f"| {r['prm']} | {dataset_label(r['dataset'])} | {r['brier']:.4f} / {r['base_brier']:.4f} | "
                f"{r['ece']:.4f} / {r['base_ece']:.4f} | {'yes' if r['ahead_on_brier_and_ece'] else 'NO'} | "
                f"{'yes' if r['ahead_on_brier_every_generator'] else 'no'}, {'yes' if r['ahead_on_ece_every_generator'] else 'no'} |"
            )
        lines.append("")
    return lines


def checks_section(checks: dict[str, Any]) -> list[str]:
    """The "Checks" section: a sentence saying what is checked, then :func:`check_lines`
    (nothing when there are no checks)."""
    lines = check_lines(checks)
    if not lines:
        return []
    method = next(
        (r["method"] for key in ("frontier", "tables") for r in checks.get(key, [])), "ot"
    )
    where = [
        text
        for key, text in (
            ("frontier", "on the IAS frontier (C sweep)"),
            ("tables", "in the calibration tables"),
        )
        if checks.get(key)
    ]
    intro = f"{display(method)} against Base {' and '.join(where)}" if where else ""
    if checks.get("greedy"):
        intro += ("; " if intro else "") + "the cost-aware allocation against the C rule"
    return ["## Checks", "", intro[:1].upper() + intro[1:] + ":", "", *lines]
