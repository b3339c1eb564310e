"""Read, write and validate calibration sets, best-of-N sets and labelled prefixes.

The formats are a contract (docs/design.md §2). Readers memory-map ``hidden_states.npy`` so
a 100k x 3584 set is never copied into RAM; writers fill a memory-mapped file chunk by chunk and
swap the finished directory in atomically. Every validation failure raises
:class:`dprm.io.DataError` naming the file, the column or row, and what was expected.

This module gathers the contract's public names in one place; each lives where its job is:

- :mod:`dprm.data.calibration_set`: :class:`CalibrationSet` and :func:`read_calibration_set`;
- :mod:`dprm.data.bon_set`: :class:`BonSet` and :func:`read_bon_set` (contract v1 and v2);
- :mod:`dprm.data.labels`: labelled text prefixes, :func:`read_labels` / :func:`write_labels`;
- :mod:`dprm.data.features`: :func:`read_features`, what a calibrator reads at inference;
- :mod:`dprm.data.set_writer`: :class:`SetWriter`, :func:`write_calibration_set`,
  :func:`write_bon_set`;
- :mod:`dprm.data.validation` and :mod:`dprm.data.columns`: the checks they all share.
"""

from __future__ import annotations

from dprm.data.bon_set import (
    BON_QUESTION_COLUMNS,
    BON_RESPONSE_COLUMNS,
    BON_RESPONSE_V2,
    BON_STEP_SCORES,
    BON_VERSION,
    RESPONSE_HIDDEN_FILE,
    BonSet,
    read_bon_set,
)
from dprm.data.calibration_set import (
    CALIBRATION_COLUMNS,
    CALIBRATION_OPTIONAL,
    CalibrationSet,
    read_calibration_set,
)
from dprm.data.features import FEATURE_COLUMNS, FeatureSet, read_features
from dprm.data.labels import LABEL_COLUMNS, read_labels, write_labels
from dprm.data.set_writer import SetWriter, write_bon_set, write_calibration_set
from dprm.data.validation import HIDDEN_FILE, UNIT_INTERVAL, check_hidden_finite

__all__ = [
    "BON_QUESTION_COLUMNS",
    "BON_RESPONSE_COLUMNS",
    "BON_RESPONSE_V2",
    "BON_STEP_SCORES",
    "BON_VERSION",
    "CALIBRATION_COLUMNS",
    "CALIBRATION_OPTIONAL",
    "FEATURE_COLUMNS",
    "HIDDEN_FILE",
    "LABEL_COLUMNS",
    "RESPONSE_HIDDEN_FILE",
    "UNIT_INTERVAL",
    "BonSet",
    "CalibrationSet",
    "FeatureSet",
    "SetWriter",
    "check_hidden_finite",
    "read_bon_set",
    "read_calibration_set",
    "read_features",
    "read_labels",
    "write_bon_set",
    "write_calibration_set",
    "write_labels",
]
