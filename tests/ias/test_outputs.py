"""``dprm.ias.outputs``: the files of an IAS run, and the readers that accept the column names
earlier versions wrote (``sweep`` in the IAS rows, ``kind`` in ``pays.csv``), plus
``tools/rename_result_columns.py`` that rewrites such a header in place."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dprm.ias.constants import BUDGET_COLUMNS, SUMMARY_COLUMNS
from dprm.ias.outputs import read_ias_budgets, read_ias_rows, write_ias_outputs

ROOT = Path(__file__).resolve().parents[2]


def _summary() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "method": "base",
            "allocation": ["C", "tau", "greedy"],
            "C": [0.9, 0.99, 0.9],
            "level": [np.nan, 0.5, np.nan],
            "cost": [0.1, 0.2, 0.1],
            "accuracy": [0.5, 0.6, 0.4],
            "accuracy_mc": np.nan,
            "rule": "highest-last",
            "target_cost": np.nan,
        }
    )


def _budgets() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "question_id": ["a", "b", "a"],
            "method": "base",
            "allocation": ["C", "C", "tau"],
            "C": [0.9, 0.9, 0.99],
            "level": [np.nan, np.nan, 0.5],
            "n": np.array([3, 5, 7], np.int32),
        }
    )


def test_written_files_name_the_allocation(tmp_path):
    write_ias_outputs(tmp_path, _summary(), _budgets())
    header = (tmp_path / "ias.csv").read_text().splitlines()[0].split(",")
    assert header == SUMMARY_COLUMNS and "allocation" in header and "sweep" not in header
    assert read_ias_budgets(tmp_path / "budgets.parquet").columns.tolist() == BUDGET_COLUMNS


def test_files_with_the_old_column_name_still_read(tmp_path):
    old = _summary().rename(columns={"allocation": "sweep"})
    old.to_csv(tmp_path / "ias_full.csv", index=False)
    rows = read_ias_rows(tmp_path / "ias_full.csv")
    assert rows.columns.tolist() == _summary().columns.tolist()
    assert rows["allocation"].tolist() == ["C", "tau", "greedy"]
    _budgets().rename(columns={"allocation": "sweep"}).to_parquet(tmp_path / "old.parquet")
    _budgets().to_parquet(tmp_path / "new.parquet")
    for name in ("old.parquet", "new.parquet"):
        c_rows = read_ias_budgets(tmp_path / name, "C")
        assert c_rows["n"].tolist() == [3, 5] and (c_rows["allocation"] == "C").all()


def test_pays_summary_reads_a_pays_csv_with_the_old_column():
    from dprm.report.pays import pays_summary

    new = pd.DataFrame(
        {
            "rule": "highest-last",
            "method": ["uniform", "oracle", "base"],
            "allocation": ["uniform", "oracle", "auto"],
            "cost": 0.1,
            "accuracy": [0.4, 0.6, 0.5],
            "headroom": 0.2,
            "gain": [0.0, 0.2, 0.1],
        }  # fmt: skip
    )
    got = pays_summary(new.rename(columns={"allocation": "kind"}))
    pd.testing.assert_frame_equal(got, pays_summary(new))
    assert "kind" not in got.columns


@pytest.fixture(scope="module")
def rename_tool():
    spec = importlib.util.spec_from_file_location(
        "rename_result_columns", ROOT / "tools" / "rename_result_columns.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rename_tool_changes_the_header_only(rename_tool, tmp_path):
    path = tmp_path / "pays.csv"
    body = "highest-last,base,auto,0.1,0.512345678901234\r\n"
    path.write_bytes(b"rule,method,kind,cost,accuracy\r\n" + body.encode())
    assert rename_tool.main(["--pays", str(path)]) == 0
    assert path.read_bytes() == b"rule,method,allocation,cost,accuracy\r\n" + body.encode()
    assert rename_tool.main(["--pays", str(path)]) == 0  # already renamed: unchanged
    assert path.read_bytes().startswith(b"rule,method,allocation,")
    ias = tmp_path / "ias.csv"
    ias.write_text("method,sweep,C\nbase,C,0.9\n")
    assert rename_tool.main(["--ias", str(ias)]) == 0
    assert ias.read_text() == "method,allocation,C\nbase,C,0.9\n"
    curves = tmp_path / "peer_curves.csv"
    curves.write_text("rule,method,level,draws\nmajority,auto-seq[none],3.2,3.2\n")
    assert rename_tool.main(["--peer-curves", str(curves)]) == 0
    assert curves.read_text() == "rule,method,knob,draws\nmajority,auto-seq[none],3.2,3.2\n"


def test_rename_tool_refuses_a_header_that_would_repeat_a_column(rename_tool, tmp_path, capsys):
    path = tmp_path / "pays.csv"
    path.write_text("kind,allocation\nauto,auto\n")
    assert rename_tool.main(["--pays", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0]
    assert path.read_text() == "kind,allocation\nauto,auto\n"
