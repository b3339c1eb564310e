"""The twin's fitted score cells: package data read at import, written back by tools/fit_twin.py."""

from importlib import resources

import pytest

from dprm.data.synth import GENERATORS, PRMS, SCORE_CELLS, ScoreCell
from dprm.data.synth.presets import SCORE_CELLS_FILE, read_score_cells, write_score_cells


def test_every_world_cell_is_shipped_as_package_data():
    text = resources.files("dprm.data.synth").joinpath(SCORE_CELLS_FILE).read_text("utf-8")
    cells = read_score_cells(text)
    assert cells == SCORE_CELLS
    assert set(cells) == {(g, p, k) for g in GENERATORS for p in PRMS for k in ("id", "ood")}
    # the writer is the reader's inverse, byte for byte on the shipped file
    assert write_score_cells(cells) == text


def test_a_cell_file_with_other_columns_fails_naming_the_file():
    bad = "generator,prm,kind,score_bias,score_gain\nx,y,id,1,2\n"
    with pytest.raises(ValueError, match=SCORE_CELLS_FILE):
        read_score_cells(bad)


def test_cells_round_trip_through_csv():
    cells = {("g", "p", "ood"): ScoreCell(-1.25, 0.5, 2.0, 0.35)}
    assert read_score_cells(write_score_cells(cells)) == cells
