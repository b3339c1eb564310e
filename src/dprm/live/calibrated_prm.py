"""``CalibratedPRM``: a PRM wrapper plus a trained calibrator, queried on live trajectories.

For a question and its reasoning steps it returns, per step, the quantile function at the
requested levels, the mean success probability and the IAS budget for a target C. Budgets come
from :mod:`dprm.ias` through the very function ``dprm ias`` uses
(:func:`dprm.ias.estimate_from_model`: mixture rule over the 100 mid-point levels for
distribution calibrators, the point rule at Q(beta) for fixed-level ones, the point rule at
p_hat for point ones), so a live budget and an offline ``dprm ias`` budget on the same state
are the same number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dprm.ias import DEFAULT_BETA, M_LEVELS, N_MAX, estimate_from_model
from dprm.io import DataError
from dprm.metrics import LEVELS_11


@dataclass
class StepAssessment:
    """The calibrated view of one reasoning step (or of the question alone, ``step`` 0).

    Attributes:
        step: number of steps in the prefix (1-based; 0 = question only).
        prm_score: the uncalibrated PRM score r in [0, 1].
        levels: quantile levels [L].
        quantiles: Q(level | h) [L], float64.
        mean: the calibrated point estimate p_hat (docs/design.md §3).
        budget: the IAS budget N(C) by the calibrator's rule, or None when no C was given.
        truncated: the trajectory was cut at the PRM's token limit (later steps got no state).
    """

    step: int
    prm_score: float
    levels: tuple[float, ...]
    quantiles: np.ndarray
    mean: float
    budget: int | None = None
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (quantiles as a list)."""
        return {
            "step": self.step,
            "prm_score": self.prm_score,
            "levels": list(self.levels),
            "quantiles": [float(v) for v in self.quantiles],
            "mean": self.mean,
            "budget": self.budget,
            "truncated": self.truncated,
        }


@dataclass
class States:
    """PRM states of several prefixes: ``scores`` [B] (float32) and ``hidden`` [B, D] (float32)."""

    scores: np.ndarray
    hidden: np.ndarray
    truncated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __len__(self) -> int:
        return len(self.scores)


class _StateTable:
    """The two fields of a BoN set that :func:`dprm.ias.estimate_from_model` reads."""

    def __init__(self, scores: np.ndarray, hidden: np.ndarray):
        self.questions = pd.DataFrame({"prm_score": np.asarray(scores, dtype=np.float32)})
        self.hidden = np.asarray(hidden, dtype=np.float32)


class CalibratedPRM:
    """A PRM wrapper (:class:`dprm.llm.prm_interface.PRM`) plus a calibrator (:mod:`dprm.models`).

    Args:
        prm: a loaded PRM wrapper (``score_steps``, ``question_state``, ``hidden_dim``).
        calibrator: a fitted :class:`dprm.models.interface.Calibrator` whose hidden states come from
            the same PRM layer.
        beta: the level of the point rule for fixed-level (QR) calibrators (``dprm ias --beta``).
        n_max: the largest budget N_max.
        m_levels: number of mid-point levels of the mixture rule (M = 100).

    Raises:
        DataError: the calibrator expects another hidden dimension than the PRM produces.
    """

    def __init__(
        self,
        prm: Any,
        calibrator: Any,
        *,
        beta: float = DEFAULT_BETA,
        n_max: int = N_MAX,
        m_levels: int = M_LEVELS,
        calibrator_path: str | None = None,
    ):
        if calibrator.uses_hidden and int(calibrator.hidden_dim) != int(prm.hidden_dim):
            raise DataError(
                calibrator_path,
                f"the calibrator expects hidden states of dimension {calibrator.hidden_dim}, but the "
                f"PRM {getattr(prm, 'name', '?')!r} produces {prm.hidden_dim}; calibrate on this PRM's states",
            )
        self.prm = prm
        self.calibrator = calibrator.eval()
        self.beta = float(beta)
        self.n_max = int(n_max)
        self.m_levels = int(m_levels)

    @classmethod
    def from_dirs(
        cls,
        prm: str,
        calibrator: str,
        device: str | None = None,
        dtype: Any = None,
        *,
        prm_kind: str | None = None,
        **options: Any,
    ) -> CalibratedPRM:
        """Load the PRM (local path or hub id) and the calibrator directory.

        Args:
            prm: PRM directory or hub id (:func:`dprm.llm.prm.load_prm`).
            calibrator: calibrator directory (``config.json`` + ``model.safetensors``).
            device: torch device of the PRM (default: cuda if available).
            dtype: PRM dtype (default: bf16 on GPU, fp32 on CPU).
            prm_kind: PRM wrapper kind when it cannot be inferred from the name.
            **options: ``beta``, ``n_max``, ``m_levels`` for :class:`CalibratedPRM`.
        """
        from dprm.llm.prm import load_prm
        from dprm.models import load

        model = load(calibrator)
        wrapper = load_prm(prm, kind=prm_kind, device=device, dtype=dtype)
        return cls(wrapper, model, calibrator_path=str(calibrator), **options)

    # -- properties ------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """The calibrator kind: ``distribution``, ``levels`` or ``point``."""
        return str(self.calibrator.kind)

    @property
    def default_levels(self) -> np.ndarray:
        """Trained levels of a fixed-level calibrator, else the 11 levels {0, 0.1, ..., 1}."""
        fixed = self.calibrator.fixed_levels
        return np.asarray(fixed if fixed is not None else LEVELS_11, dtype=np.float64)

    def provenance(self) -> dict[str, Any]:
        info = dict(self.prm.provenance()) if hasattr(self.prm, "provenance") else {}
        info.update(
            calibrator=self.calibrator.method,
            calibrator_kind=self.kind,
            beta=self.beta,
            n_max=self.n_max,
            m_levels=self.m_levels,
        )
        return info

    def check_levels(self, levels, what: str = "levels") -> None:
        """Fail fast if a fixed-level calibrator is asked for a level it was not trained at."""
        fixed = self.calibrator.fixed_levels
        if fixed is None:
            return
        bad = [float(t) for t in levels if np.min(np.abs(np.asarray(fixed) - float(t))) > 1e-6]
        if bad:
            raise DataError(
                None,
                f"{what}: the {self.calibrator.method} calibrator only has quantiles at its trained "
                f"levels {np.asarray(fixed).tolist()}; asked for {bad}",
            )

    # -- states -> distribution ------------------------------------------------------------
    def _hidden(self, hidden: np.ndarray) -> np.ndarray | None:
        return np.asarray(hidden, dtype=np.float32) if self.calibrator.uses_hidden else None

    def quantiles(self, states: States, levels) -> np.ndarray:
        """Q(level | h) [B, L] (float64) for each state."""
        scores = np.asarray(states.scores, dtype=np.float32)
        q = self.calibrator.quantiles(self._hidden(states.hidden), np.asarray(levels), scores)
        return q.astype(np.float64)

    def mean(self, states: States) -> np.ndarray:
        """Calibrated point estimates p_hat [B] (float64)."""
        scores = np.asarray(states.scores, dtype=np.float32)
        return self.calibrator.point_estimate(self._hidden(states.hidden), scores).astype(
            np.float64
        )

    def budgets(self, states: States, C: float) -> np.ndarray:
        """IAS budgets [B] (int64) for target ``C``, by exactly the rule ``dprm ias`` applies."""
        table = _StateTable(states.scores, states.hidden)
        est = estimate_from_model(self.calibrator, table, beta=self.beta, m=self.m_levels)
        return np.asarray(est.budgets(float(C), self.n_max), dtype=np.int64)

    # -- PRM passes --------------------------------------------------------------------------
    def question_states(self, questions: list[str]) -> States:
        """States of each question with an empty reasoning prefix (the BoN-set state)."""
        scores, hidden = self.prm.question_state(list(questions))
        scores = np.asarray(scores, dtype=np.float32).clip(0.0, 1.0)
        return States(
            scores, np.asarray(hidden, dtype=np.float32), np.zeros(len(scores), dtype=bool)
        )

    def path_states(self, question: str, steps_list: list[list[str]]) -> States:
        """The state after the last scored step of each trajectory (one PRM pass each).

        A trajectory cut at the PRM's token limit is read at its last scored step and marked
        in ``truncated``.
        """
        outs = self.prm.score_steps(question, [list(s) for s in steps_list])
        if not outs:
            return States(
                np.zeros(0, np.float32),
                np.zeros((0, self.prm.hidden_dim), np.float32),
                np.zeros(0, bool),
            )
        empty = [i for i, o in enumerate(outs) if len(o.scores) == 0]
        if empty:
            raise DataError(
                None, f"trajectory {empty[0]}: the question alone exceeds the PRM's token limit"
            )
        scores = np.array([o.scores[-1] for o in outs], dtype=np.float32).clip(0.0, 1.0)
        hidden = np.stack([np.asarray(o.hidden[-1], dtype=np.float32) for o in outs])
        return States(scores, hidden, np.array([bool(o.truncated) for o in outs]))

    def question_budget(self, questions: list[str], C: float) -> np.ndarray:
        """IAS budgets [Q] of questions from their question-only states."""
        return self.budgets(self.question_states(questions), C)

    def assess(
        self, question: str, steps: list[str], levels=None, C: float | None = None
    ) -> list[StepAssessment]:
        """Per-step calibrated assessment of one trajectory.

        Args:
            question: the problem text.
            steps: the reasoning steps so far (empty: assess the question alone, one entry).
            levels: quantile levels [L] (default: :attr:`default_levels`; a fixed-level
                calibrator accepts only its trained levels).
            C: target for the budget; None leaves ``budget`` None.

        Returns:
            One :class:`StepAssessment` per scored step, in order (steps beyond the PRM's token
            limit are not scored; the list is then shorter and ``truncated`` is set).
        """
        levels = self.default_levels if levels is None else np.asarray(levels, dtype=np.float64)
        if steps:
            out = self.prm.score_steps(question, [list(steps)])[0]
            first_step = 1
        else:
            scores, hidden = self.prm.question_state([question])
            out = type("Out", (), {"scores": scores, "hidden": hidden, "truncated": False})
            first_step = 0
        states = States(
            np.asarray(out.scores, dtype=np.float32).clip(0.0, 1.0),
            np.asarray(out.hidden, dtype=np.float32).reshape(len(out.scores), -1),
        )
        if len(states) == 0:
            return []
        q = self.quantiles(states, levels)
        mean = self.mean(states)
        budget = self.budgets(states, C) if C is not None else None
        return [
            StepAssessment(
                step=first_step + t,
                prm_score=float(states.scores[t]),
                levels=tuple(float(v) for v in levels),
                quantiles=q[t],
                mean=float(mean[t]),
                budget=None if budget is None else int(budget[t]),
                truncated=bool(out.truncated),
            )
            for t in range(len(states))
        ]
