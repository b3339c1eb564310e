"""What determines a search: the methods, objectives and selection scores, the files of a
search directory and :class:`TuneSettings` (stored in each study; a rerun must match it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: the gradient-trained calibrators a search covers by default (each gets the same trials)
TUNED_METHODS = ("ot", "qr", "mono", "binomial")
#: the validation scores ``dprm train --method best-tuned`` can choose by (lower is better)
SELECT_METRICS = ("wql", "brier", "calibration_area")
DEFAULT_SELECT = "wql"
#: what a trial is scored by on the validation questions (lower is better). ``checkpoint``: the
#: trainer's own checkpoint score at its best eligible checkpoint (each method's
#: ``select_metric``); ``wql``: the validation WQL at the 11 levels (``M.LEVELS_11``) of the
#: model the trainer returns, one score for every method (the calibration area cannot tell a
#: calibrated but near-marginal map from a sharp one; WQL can). ``wql`` is the default: on the
#: development worlds the ``checkpoint`` search made ``ot`` worse than its defaults
#: (docs/decisions/tuning-objective-wql.md).
OBJECTIVES = ("checkpoint", "wql")
DEFAULT_OBJECTIVE = "wql"
#: measured seconds per default fit at D = 3584 (30k records, 1 thread): the heaviest searches
#: start first when methods run in parallel (binomial + qr and ot + mono balance two workers)
FIT_SECONDS = {"binomial": 16.5, "ot": 13.0, "mono": 10.2, "qr": 8.3}
STUDY_FILE, BEST_FILE, TRIALS_FILE = "study.db", "best.json", "trials.csv"
#: finished trials: they count towards the budget; failed (killed, crashed) ones do not
FINISHED = ("COMPLETE", "PRUNED")


@dataclass
class TuneSettings:
    """What determines a search (stored in each study; a rerun must match it to resume).

    Attributes:
        trials: finished trials (complete + pruned) per method; the same for every method.
        seed: training seed of every trial and of the tuned model; the samplers are seeded
            from it and the method name.
        max_steps: step cap of every trial and of the tuned model (0: the method's default).
        prune_startup: trials run to the end before the pruner may stop one.
        objective: what a trial is scored by (:data:`OBJECTIVES`), the same for every method.
    """

    trials: int = 50
    seed: int = 0
    max_steps: int = 0
    prune_startup: int = 5
    objective: str = DEFAULT_OBJECTIVE

    def fixed(self) -> dict[str, Any]:
        """Config overrides every trial of every method shares."""
        return {"max_steps": self.max_steps} if self.max_steps > 0 else {}
