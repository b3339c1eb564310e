"""The paper's figures (matplotlib; PNG + PDF), each returning its files and a caption.

Every function takes tidy frames (one row per point), so it works for any grid and any set of
methods: Base / OT / QR keep the paper's colours (grey / blue / orange), further calibrators get
the next colours, and the synthetic truth oracle (if present) is a thin green dashed reference.

* :func:`flexibility_figure` -- one record: OT's Q(tau | h) at 100 levels vs QR's 11 points,
  crossings marked (paper Fig. 1).
* :func:`frontier_figure` -- IAS cost-accuracy frontiers from the C sweep, a panel per
  (generator, dataset) (paper Fig. 2, appendix grids).
* :func:`beta_figure` -- beta-threshold early stopping curves at C = 0.9 (paper Fig. 3).
* :func:`tau_figure` -- accuracy and cost against the quantile level tau at C = 0.99 (Fig. 4).
* :func:`budget_figure` -- how many candidates each question gets at one C, per method.
* :func:`training_figure` -- validation score and training loss against step, per seed.
* :func:`coverage_figure` -- quantile calibration curves P(y <= Q(tau | h)) against tau.
* :func:`reliability_figure` -- reliability diagram of the point estimates on the 12 ECE bins.

Modules: :mod:`~dprm.report.figures.style` (colours, panel grids, legend, saving),
:mod:`~dprm.report.figures.ias` (Fig. 2-4) and :mod:`~dprm.report.figures.calibration` (Fig. 1,
coverage, reliability). matplotlib is imported only when a figure is drawn.
"""

from dprm.report.figures.calibration import coverage_figure, flexibility_figure, reliability_figure
from dprm.report.figures.ias import beta_figure, budget_figure, frontier_figure, tau_figure
from dprm.report.figures.style import COLORS, EXTRA_COLORS, PAPER_METHODS, color, save
from dprm.report.figures.training import training_figure

__all__ = [
    "COLORS",
    "EXTRA_COLORS",
    "PAPER_METHODS",
    "beta_figure",
    "budget_figure",
    "color",
    "coverage_figure",
    "flexibility_figure",
    "frontier_figure",
    "reliability_figure",
    "save",
    "tau_figure",
    "training_figure",
]
