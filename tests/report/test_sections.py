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


def test_run_lines_list_refused_units_apart_from_failures():
    failures = [
        {"unit": "train/w/ot/seed0", "error": "CollapseError: ot collapsed", "refused": True}
    ]
    lines = run_lines(CFG, RUN, failures)
    assert "## Refused" in lines and "## Failures" not in lines
    assert "- `train/w/ot/seed0`: CollapseError: ot collapsed" in lines
    both = run_lines(CFG, RUN, [*failures, {"unit": "ias/x", "error": "boom"}])
    assert both.index("## Failures") < both.index("- `ias/x`: boom") < both.index("## Refused")


def test_intro_and_data_lines_say_what_the_data_is():
    synthetic = intro_lines(CFG, RunNames(), ias_ran=True)
    assert synthetic[0] == "# dprm reproduction: grid `demo`"
    recipe = {"run": {"name": "arith"}, "questions": {"train": ["a/b.jsonl"], "id": ["c"]}}
    real = RunNames(real=True, recipe=recipe)
    assert intro_lines(CFG, real, ias_ran=False)[0] == "# dprm run: recipe `arith`"
    lines = data_lines(CFG, real, {"ot": [0]}, ias_ran=False)
    assert "- Sets: train = b.jsonl; ID = c; OOD = ood." in lines
    assert any("requested but without results: QR" in line for line in lines)


def test_scope_section_reports_sizes_and_ranking_power_from_the_pools():
    import pandas as pd

    from dprm.report.sections.scope import pool_scope, scope_lines

    # q0: the PRM ranks the right candidate first; q1: reversed; q2: all wrong
    responses = pd.DataFrame(
        {
            "question_id": ["q0"] * 4 + ["q1"] * 4 + ["q2"] * 4,
            "prm_score": [0.9, 0.2, 0.1, 0.3, 0.1, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2],
            "correct": [True, False, False, False, True, False, False, False] + [False] * 4,
        }
    )
    s = pool_scope(responses)
    assert s["questions"] == 3 and s["candidates"] == 4 and s["mixed"] == 2
    assert s["auroc"] == 0.5  # 1.0 on q0, 0.0 on q1
    assert abs(s["any_correct"] - 2 / 3) < 1e-9
    assert abs(s["top"] - 1 / 3) < 1e-9  # only q0's top candidate is right
    text = "\n".join(scope_lines({"gen__prm": {"id": responses}}))
    assert "## What this run can show" in text
    assert "| gen__prm | id | 3 | 4 |" in text
    assert "only 2 questions have both right and wrong candidates" in text
    assert "with 3 questions" in text
    # enough mixed questions: the sentence judges the ranking, from the numbers
    many = pd.concat(
        [responses.iloc[:8].assign(question_id=lambda f, i=i: f["question_id"] + f"-{i}")
         for i in range(6)]
    )  # fmt: skip
    assert "barely ranks a question's candidates (AUROC 0.50 on 12" in "\n".join(
        scope_lines({"w": {"id": many}})
    )
    good = many.assign(prm_score=[0.9, 0.2, 0.1, 0.3, 0.9, 0.1, 0.2, 0.3] * 6)
    assert "ranks a question's candidates (AUROC 1.00 on 12" in "\n".join(
        scope_lines({"w": {"id": good}})
    )
    assert scope_lines({}) == []


def test_scope_section_states_the_noise_of_the_monte_carlo_reference(tmp_path):
    import pandas as pd

    from dprm.report.sections.scope import read_references, reference_noise, scope_lines

    # two prefixes by 4 rollouts (1 of 4 and 2 of 4 right), one graded exactly
    records = pd.DataFrame(
        {
            "success_prob": [0.25, 0.5, 1.0],
            "n_rollouts": [4, 4, 1],
            "label_source": ["rollouts", "rollouts", "complete"],
        }
    )
    r = reference_noise(records)
    # (0.25 * 0.75 / 3 + 0.5 * 0.5 / 3 + 0) / 3 prefixes = (0.0625 + 0.08333) / 3
    assert r["prefixes"] == 3 and r["sampled"] == 2 and r["rollouts"] == 4
    assert abs(r["floor"] - (0.0625 + 0.25 / 3) / 3) < 1e-12
    # a sampled prefix with a single rollout: its variance cannot be estimated
    single = records.assign(n_rollouts=[1, 4, 1])
    assert reference_noise(single)["floor"] != reference_noise(single)["floor"]  # NaN
    # without label_source every prefix counts as sampled
    assert reference_noise(records.drop(columns="label_source").iloc[:2])["sampled"] == 2

    # read from a world folder: Monte Carlo sets are read, sets with a known truth are not
    for world, extra in (("real", {}), ("synthetic", {"true_mu": 0.5, "true_sigma": 0.1})):
        folder = tmp_path / world / "id" / "calib"
        folder.mkdir(parents=True)
        records.assign(**extra).to_parquet(folder / "records.parquet")
    # a set without rollout counts (hidden states and scores only) has no reference to judge
    (tmp_path / "scores" / "id" / "calib").mkdir(parents=True)
    records[["success_prob"]].to_parquet(tmp_path / "scores" / "id" / "calib" / "records.parquet")
    refs = read_references({w: tmp_path / w for w in ("real", "synthetic", "scores")})
    assert set(refs) == {"real"} and refs["real"]["id"]["sampled"] == 2
    pools = {"real": {"id": pd.DataFrame(
        {"question_id": ["q"] * 2, "prm_score": [0.9, 0.1], "correct": [True, False]})}}  # fmt: skip
    text = "\n".join(scope_lines(pools, refs))
    assert "id 3 prefixes, 2 of them labelled by 4 rollouts, the rest graded (floor 0.049)" in text
