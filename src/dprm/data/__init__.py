"""Data: the on-disk contract (docs/design.md §2), synthetic worlds, imports and splits."""

from dprm.data.contract import (
    BonSet,
    CalibrationSet,
    SetWriter,
    read_bon_set,
    read_calibration_set,
    read_labels,
    write_bon_set,
    write_calibration_set,
    write_labels,
)

__all__ = [
    "BonSet",
    "CalibrationSet",
    "SetWriter",
    "read_bon_set",
    "read_calibration_set",
    "read_labels",
    "write_bon_set",
    "write_calibration_set",
    "write_labels",
]
