"""The Markdown text of ``report.md`` (figures embedded by relative path, tables inlined): the
sections of :mod:`dprm.report.sections` in order."""

from __future__ import annotations

import os
from pathlib import Path

from dprm.report.sections.calibration import comparison_lines, table_lines, truth_lines
from dprm.report.sections.checks import checks_section
from dprm.report.sections.names import RunNames, run_names
from dprm.report.sections.pays import pays_lines
from dprm.report.sections.run import data_lines, intro_lines, run_lines
from dprm.report.sections.scope import scope_lines

__all__ = ["RunNames", "render_report", "run_names"]


def _rel(path: str, out: Path) -> str:
    """``path`` relative to the report's directory ``out`` (so the link renders wherever OUT is)."""
    return Path(os.path.relpath(Path(path).absolute(), Path(out).absolute())).as_posix()


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
    *,
    names: RunNames | None = None,
    ran: dict[str, list[int]] | None = None,
    ias_ran: bool = True,
    pays=None,
    recommendation: list[str] | None = None,
    scope: dict | None = None,
    references: dict | None = None,
) -> str:
    """The report: data, calibrators, versions and timing; checks; Table 1 per PRM and protocol;
    paper vs dprm; figures; appendix. No heading is left without content.

    Args:
        tables: ``{protocol: {prm: CalibrationTable}}`` (protocols of
            :data:`dprm.report.tables.PROTOCOLS`), or ``{prm: table}`` for one unlabelled set.
        comparison: :func:`dprm.report.paper.write_comparison`'s result, if any.
        names: what the data is called (default: the synthetic grid's words).
        ran: the calibrators with results, ``{method: [seeds]}`` (default: all requested).
        ias_ran: whether any IAS result exists.
        pays: the "does it pay?" rows (:func:`dprm.report.pays.pays_rows` of every world and
            split), if any.
        recommendation: the "Which calibrator?" lines computed from the held-out tables
            (:func:`dprm.report.recommendation.recommendation_lines`), if any.
        scope: the run's best-of-N pools, ``{world: {split: responses}}``
            (:func:`dprm.report.sections.scope.read_pools`), for "What this run can show".
        references: the noise of the held-out calibration sets' Monte Carlo reference
            (:func:`dprm.report.sections.scope.read_references`), for the same section.
    """
    names = names or RunNames()
    ran = {m: list(cfg.seeds) for m in cfg.methods} if ran is None else ran
    if tables and not all(isinstance(t, dict) for t in tables.values()):
        tables = {"held-out": tables}
    lines = [*intro_lines(cfg, names, ias_ran), "", "## Run", ""]
    lines += data_lines(cfg, names, ran, ias_ran)
    lines += run_lines(cfg, run, failures)
    lines += scope_lines(scope or {}, references)
    lines += checks_section(checks)
    lines += recommendation or []
    if pays is not None and not pays.empty:
        lines += pays_lines(pays, cfg)
    for protocol, by_prm in tables.items():
        if not by_prm:
            continue
        word = names.protocol_word(protocol)
        lines += table_lines(protocol, word, by_prm, names)
    if comparison is not None and not (names.real and comparison["cells"].empty):
        lines += comparison_lines(comparison, names)
    lines += truth_lines(truth)
    sections = (
        ("main", "## Instance-adaptive best-of-N and flexibility"),
        ("calibration", "## Calibration figures"),
        ("training", "## Training curves"),
        ("appendix", "## Appendix: τ sweeps for the other generators"),
    )
    for section, heading in sections:
        chosen = [f for f in figs if f["section"] == section]
        if not chosen:
            continue
        if section == "main" and not any(f["name"].startswith("frontiers") for f in chosen):
            heading = "## Flexibility"
        lines += [heading, ""]
        for f in chosen:
            png = next(p for p in f["files"] if p.endswith(".png"))
            lines += [f"![{f['name']}]({_rel(png, out)})", "", f"*{f['caption']}*", ""]
    return "\n".join(lines) + "\n"
