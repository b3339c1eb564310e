"""What each method costs beyond its draws: labelled training samples and PRM passes.

The draws count candidates generated per test question. A method may also need:

* **labelled training samples**: the calibrator's calibration records (train and validation,
  each a prefix labelled by rollouts; ``model.info["n_train"] + ["n_val"]``, written by
  :func:`dprm.models.fit.fit`) and/or the training BoN pools' candidates labelled correct or
  wrong (what ``auto-seq`` learns its floor share, selection model and likelihoods on);
* **PRM passes**: one per candidate (or question, or record) whose PRM score or hidden state is
  read. At test time a rule that picks by score (``highest-*``, ``weighted-*``) needs a pass on
  every drawn candidate whatever the method; ``majority`` needs none, unless the method itself
  reads scores or calibrated estimates (the score peers, ``auto-seq`` with a prior); a prior
  read from the question's state (``auto-seq[calibrated | base]``) is one more pass per
  question. In training, every labelled calibration record and every training candidate whose
  score is read is one pass.

Training passes are spread over the test questions a deployment answers: PRM passes per test
question = test passes per question + training passes / test questions, reported at 500 and
5,000 test questions (:data:`AMORTISED_AT`). A pass on a prefix is counted like one on a full
candidate (a PRM reads a prefix in one forward pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: test-question counts the training passes are spread over
AMORTISED_AT = (500, 5000)


@dataclass(frozen=True)
class Reads:
    """What a method reads beyond the drawn candidates' final answers.

    Attributes:
        calibrator: the calibrator (fitted on labelled calibration records).
        train_labels: the training pools' correctness labels (and their scores or estimates).
        train_scores: the training candidates' scores without their labels.
        per_draw: a PRM pass on every drawn candidate, whatever the rule.
        per_question: a PRM pass on the question (its prior is read from the question's state).
    """

    calibrator: bool = False
    train_labels: bool = False
    train_scores: bool = False
    per_draw: bool = False
    per_question: bool = False


#: method -> what it reads (``auto-seq[<prior>]``: the prior in brackets)
READS: dict[str, Reads] = {
    "uniform": Reads(),
    "adaptive-consistency": Reads(),
    "esc-4": Reads(),
    "esc-8": Reads(),
    "vote-lead": Reads(),
    "score-raw": Reads(train_scores=True, per_draw=True),
    # fitted on the training pools' raw scores (no labels); read every drawn candidate's score
    "beacon": Reads(train_scores=True, per_draw=True),
    "pandora": Reads(train_scores=True, per_draw=True),
    "score-calibrated": Reads(calibrator=True, train_scores=True, per_draw=True),
    "auto-seq[calibrated]": Reads(
        calibrator=True, train_labels=True, per_draw=True, per_question=True
    ),
    "auto-seq[base]": Reads(train_labels=True, per_draw=True, per_question=True),
    "auto-seq[none]": Reads(train_labels=True),
    # the limit of a calibrator that knew p: costed as the calibrated policy it bounds
    "auto-seq[truth]": Reads(calibrator=True, train_labels=True, per_draw=True, per_question=True),
}


@dataclass(frozen=True)
class TrainingData:
    """The labelled data a run's methods can learn from.

    Attributes:
        calibration_records: the calibrator's labelled calibration records (train +
            validation); None where unknown (a calibrator saved without ``n_train``).
        train_candidates: the training BoN pools' candidates (each labelled correct / wrong).
    """

    calibration_records: int | None
    train_candidates: int

    @classmethod
    def of(cls, model, train_bon) -> TrainingData:
        """From a fitted calibrator (its ``info``) and the training BoN set."""
        info = getattr(model, "info", {}) or {}
        records = None
        if "n_train" in info:
            records = int(info["n_train"]) + int(info.get("n_val", 0))
        return cls(records, int(len(train_bon.responses)))


def reads_of(method: str) -> Reads:
    """What ``method`` reads.

    Raises:
        KeyError: a method with no entry in :data:`READS` (add one beside the method).
    """
    if method not in READS:
        raise KeyError(
            f"no cost entry for method {method!r}: add it to dprm.ias.curves.costs.READS"
        )
    return READS[method]


def rule_reads_scores(rule: str) -> bool:
    """Whether the selection rule needs every drawn candidate's PRM score."""
    return rule != "majority"


def method_costs(
    method: str,
    rule: str,
    draws: float,
    training: TrainingData,
    amortised_at: Sequence[int] = AMORTISED_AT,
) -> dict[str, float]:
    """One method's costs at ``draws`` mean draws per test question.

    Returns:
        ``labelled_samples`` (NaN where the calibrator's record count is unknown) and, per
        count N of :data:`AMORTISED_AT`, ``prm_passes_q<N>``: PRM passes per test question
        with the training passes spread over N test questions (NaN where ``draws`` is).
    """
    reads = reads_of(method)
    records = np.nan if training.calibration_records is None else training.calibration_records
    labelled = (records if reads.calibrator else 0) + (
        training.train_candidates if reads.train_labels else 0
    )
    train_passes = labelled + (
        training.train_candidates if reads.train_scores and not reads.train_labels else 0
    )
    per_draw = 1.0 if reads.per_draw or rule_reads_scores(rule) else 0.0
    test = draws * per_draw + (1.0 if reads.per_question else 0.0)
    out = {"labelled_samples": float(labelled)}
    for n in amortised_at:
        out[f"prm_passes_q{n}"] = float(test + train_passes / n)
    return out


def with_costs(
    table: pd.DataFrame,
    training: TrainingData,
    draws_column: str = "draws_to_u64",
    amortised_at: Sequence[int] = AMORTISED_AT,
) -> pd.DataFrame:
    """``table`` (one row per ``rule, method``, e.g. peers.csv) with every method's costs at
    its ``draws_column`` (the draws to reach uniform best-of-64's accuracy), columns of
    :func:`method_costs`."""
    rows = [
        method_costs(r.method, r.rule, float(getattr(r, draws_column)), training, amortised_at)
        for r in table[["rule", "method", draws_column]].itertuples(index=False)
    ]
    costs = pd.DataFrame(rows, index=table.index)
    return pd.concat([table.drop(columns=[c for c in costs.columns if c in table]), costs], axis=1)
