"""The on-disk layout of a run directory (:class:`Layout` is the only place that knows its paths).

::

    state.json  run.json  report.md  results.json
    worlds/{gen}__{prm}/{train,id,ood}/{calib,bon}        (synth; deleted after use for ``paper``)
    models/{gen}__{prm}/{method}/seed{s}/                 (calibrator directories)
    eval/{gen}__{prm}/{method}/seed{s}.json               (metrics + curves per split)
    ias/{gen}__{prm}/{split}/{method}/seed{s}/            (``dprm ias`` outputs: ias_full.csv, ...)
    tables/  figures/
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: the calibration split calibrators are trained and early-stopped on (80/20 by question inside):
#: ``train`` (MATH-train-like), disjoint in questions from ``id`` and ``ood``
TRAIN_SPLIT = "train"
#: calibration splits every calibrator is evaluated on: ``train`` = ID under the paper's protocol
#: (training questions included, as the paper did), ``id`` = ID held out (MATH500-like, no
#: calibrator trained or early-stopped on it), ``ood`` = AIME-like, held out in both protocols
EVAL_SPLITS = ("train", "id", "ood")
#: BoN splits of the IAS sweeps (both held out)
IAS_SPLITS = ("id", "ood")
#: the sets synth writes for a world: (split, kind); a world is present only when all are
WORLD_SETS = tuple((s, k) for s in (TRAIN_SPLIT, *IAS_SPLITS) for k in ("calib", "bon"))
#: the reference "method" of the IAS stage (Base and the synthetic truth, plus plain best-of-n)
REFERENCE = "_reference"


@dataclass(frozen=True)
class Layout:
    """The on-disk layout of a run directory (see the module docstring)."""

    out: Path

    def world_dir(self, world: str) -> Path:
        return self.out / "worlds" / world

    def model_dir(self, world: str, method: str, seed: int) -> Path:
        return self.out / "models" / world / method / f"seed{seed}"

    def eval_path(self, world: str, method: str, seed: int) -> Path:
        return self.out / "eval" / world / method / f"seed{seed}.json"

    def ias_dir(self, world: str, split: str, method: str, seed: int) -> Path:
        return self.out / "ias" / world / split / method / f"seed{seed}"

    @property
    def state(self) -> Path:
        return self.out / "state.json"

    @property
    def run_record(self) -> Path:
        return self.out / "run.json"

    @property
    def report(self) -> Path:
        return self.out / "report.md"

    @property
    def results(self) -> Path:
        return self.out / "results.json"

    @property
    def tables(self) -> Path:
        return self.out / "tables"

    @property
    def figures(self) -> Path:
        return self.out / "figures"
