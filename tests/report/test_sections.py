"""``dprm.report.sections``: each section of report.md on its own, and no empty headings."""

from __future__ import annotations

from types import SimpleNamespace

from dprm.report.sections.calibration import truth_lines
from dprm.report.sections.checks import checks_section
from dprm.report.sections.names import RunNames
from dprm.report.sections.run import data_lines, intro_lines, run_lines

CFG = SimpleNamespace(
    grid="demo", generators=["g"], prms=["p"], size="tiny", methods=["ot", "qr"], seeds=[0],
    beta=0.1, mc_trials=10, overrides={},
)  # fmt: skip
RUN = {
    "versions": {"dprm": "1", "torch": "2", "numpy": "3", "pandas": "4", "python": "5"},
    "wall_time_s": 2.0,
    "resumed": True,
    "unit_seconds_total": 5.0,
    "stage_timing": {"train": {"seconds": 1.5, "units": 2, "skipped": 1}},
    "unit_seconds_by_stage": {"train": 4.0},
    "reused_units": ["train/a"],
}


def test_sections_without_content_have_no_heading():
    assert checks_section({}) == []
    assert truth_lines(None) == [] and truth_lines({}) == []


def test_checks_section_names_what_it_checks():
    greedy = [{"world": "w", "dataset": "id", "method": "ot", "greedy_minus_rule": 0.01,
               "rule_minus_uniform": 0.02, "greedy_minus_uniform": 0.03}]  # fmt: skip
    lines = checks_section({"greedy": greedy})
    assert lines[:3] == ["## Checks", "", "The cost-aware allocation against the C rule:"]
    assert any("| w | ID" in line and "+0.0100 | +0.0200 | +0.0300 |" in line for line in lines)


def test_run_lines_list_the_stages_failures_and_reused_units():
    failures = [{"unit": "ias/x", "error": "boom\ntrace"}]
    lines = run_lines(CFG, RUN, failures)
    assert "| train | 1.5 | 2 | 1 | 4.0 |" in lines
    assert "## Failures" in lines and "- `ias/x`: boom" in lines
    assert "- `train/a`" in lines and lines[-1] == ""
    assert "## Failures" not in run_lines(CFG, RUN, None)


def test_intro_and_data_lines_say_what_the_data_is():
    synthetic = intro_lines(CFG, RunNames(), ias_ran=True)
    assert synthetic[0] == "# dprm reproduction: grid `demo`"
    recipe = {"run": {"name": "arith"}, "questions": {"train": ["a/b.jsonl"], "id": ["c"]}}
    real = RunNames(real=True, recipe=recipe)
    assert intro_lines(CFG, real, ias_ran=False)[0] == "# dprm run: recipe `arith`"
    lines = data_lines(CFG, real, {"ot": [0]}, ias_ran=False)
    assert "- Sets: train = b.jsonl; ID = c; OOD = ood." in lines
    assert any("requested but without results: QR" in line for line in lines)
