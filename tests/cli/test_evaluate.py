"""``dprm evaluate``'s do-no-harm and shift flags."""

from __future__ import annotations

import json

import pytest

from dprm.cli import main
from dprm.cli.evaluate import flag_lines

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_calibrator_worse_than_the_raw_score_is_flagged(world, exact_raw_set, tmp_path, capsys):
    bad = tmp_path / "bad"
    sets = ["--set", "max_steps=1", "--set", "eval_every=1", "--set", "init_marginal=false"]
    assert main(["train", "--method", "mono", *sets, "--data", str(world["train/calib"]),
                 "--out", str(bad), "--quiet"]) == 0  # fmt: skip
    out = tmp_path / "m.json"
    # scored where the raw score is the label itself: the untrained map is clearly worse
    args = ["evaluate", "--data", str(exact_raw_set), "--model", str(bad), "--out",
            str(out), "--train-data", str(world["train/calib"])]  # fmt: skip
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "WARNING: mono is worse than the raw PRM score here" in text
    results = json.loads(out.read_text())
    assert results["mono"]["worse_than_raw"] is True and results["base"]["worse_than_raw"] is False
    assert results["mono"]["brier_vs_raw"] > results["mono"]["brier_vs_raw_se"] > 0
    assert results["base"]["brier_vs_raw"] == 0.0
    assert results["mono"]["shifted"] is False  # the same hidden states as its training set


def test_flag_lines_name_the_shifted_split():
    results = {"base": {"worse_than_raw": False},
               "ot": {"worse_than_raw": False, "brier_vs_raw": -0.01, "brier_vs_raw_se": 0.002}}  # fmt: skip
    shift = {"shift_auc": 0.93, "shifted": True, "shift_reference": "W/train/calib"}
    lines = flag_lines(results, shift)
    assert len(lines) == 1 and "look shifted from the training data W/train/calib" in lines[0]
    assert flag_lines(results, shift | {"shifted": False}) == []
