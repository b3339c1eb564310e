"""``park-qr``: Park et al.'s calibrated adapters as a calibrator (kind ``levels``).

Park et al. calibrate the PRM itself: a LoRA adapter with a 3-output quantile head, trained on
the pinball loss at tau = 0.1, 0.5, 0.9 (``young-j-park/Qwen2.5-Math-PRM-7B-calibrated-{policy}``;
see :mod:`dprm.llm.park_adapter`). Its quantiles depend on the whole input, not on the frozen
hidden state the other calibrators read, so they are computed when the set is embedded
(``dprm embed --prm ... --adapter DIR_OR_ID`` writes ``park_q10`` / ``park_q50`` / ``park_q90``
next to ``prm_score``) and this calibrator only reads them: nothing is fitted here, the adapter
was trained by its authors. That puts Park's own QR beside the paper's ``qr`` (a linear head on
frozen states), ``ot`` and the rest in ``evaluate``, ``ias`` and the report.

How the columns reach it: a calibrator that declares ``record_columns`` gets, in place of the
score vector [N], the matrix [N, 1 + 3] = (``prm_score``, ``park_q10``, ``park_q50``,
``park_q90``); :func:`score_input` builds it from a records frame for any calibrator (the plain
score for the others). Quantiles may cross (Park's head has no monotonicity constraint); they
are reported as they are.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from dprm.io import DataError
from dprm.models.interface import Calibrator, FixedLevels
from dprm.models.registry import register

#: the adapters' levels and the calibration-set columns that hold their quantiles
PARK_LEVELS = (0.1, 0.5, 0.9)
PARK_COLUMNS = ("park_q10", "park_q50", "park_q90")


def score_input(model: Calibrator, records: pd.DataFrame) -> np.ndarray:
    """What ``model`` takes as ``prm_score`` for ``records``: the scores [N] (float32), or
    [N, 1 + K] = (``prm_score``, its ``record_columns``) for a calibrator that reads columns.

    Raises:
        DataError: a declared column is missing (the set was embedded without ``--adapter``).
    """
    columns = tuple(getattr(model, "record_columns", ()))
    if not columns:
        return records["prm_score"].to_numpy(np.float32)
    missing = [c for c in columns if c not in records.columns]
    if missing:
        raise DataError(
            None,
            f"calibrator {model.method!r} reads columns {list(columns)}; the set lacks {missing} "
            "(embed it with `dprm embed --prm ... --adapter DIR_OR_ID`)",
        )
    return records[["prm_score", *columns]].to_numpy(np.float32)


@register("park-qr")
class ParkQRCalibrator(Calibrator):
    """Reads Park et al.'s adapter quantiles from the set; the point estimate is Q(0.5)."""

    kind = "levels"
    uses_hidden = False
    #: the columns :func:`score_input` passes after ``prm_score``
    record_columns: ClassVar[tuple[str, ...]] = PARK_COLUMNS

    def __init__(self, hidden_dim: int, config: dict[str, Any] | None = None):
        super().__init__(hidden_dim, config)
        self.register_buffer("levels", torch.tensor(PARK_LEVELS, dtype=torch.float32))

    @property
    def fixed_levels(self) -> np.ndarray:
        return self.levels.numpy().astype(np.float64)

    def forward(self, hidden: Tensor | None, prm_score: Tensor | None = None) -> FixedLevels:
        """Quantiles [n, 3] = the ``park_q*`` columns of ``prm_score`` [n, 4].

        Raises:
            DataError: ``prm_score`` is the plain score vector (no Park columns passed).
        """
        if prm_score is None or prm_score.dim() != 2 or prm_score.shape[1] != 1 + len(PARK_LEVELS):
            raise DataError(
                None,
                "park-qr reads the park_q10/park_q50/park_q90 columns of an adapter-embedded set "
                "(`dprm embed --adapter`); pass score_input(model, records), not the score alone",
            )
        return FixedLevels(prm_score[:, 1:].float().clamp(0.0, 1.0), self.levels)

    @classmethod
    def fit_model(cls, train, val, config, seed: int, progress: bool):
        """Nothing to fit (the adapter was trained by Park et al.); checks the columns exist."""
        missing = [c for c in PARK_COLUMNS if c not in train.records.columns]
        if missing:
            raise DataError(
                train.path,
                f"park-qr needs columns {list(PARK_COLUMNS)} (missing {missing}): embed the set "
                "with `dprm embed --prm ... --adapter DIR_OR_ID`",
            )
        model = cls(train.hidden_dim, {})
        model.info = {"adapter": (train.meta or {}).get("prm_adapter")}
        return model, []
