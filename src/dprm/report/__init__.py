"""The rendering of a run's results: Table 1, figures, ``results.json``, ``report.md``.

The runs themselves (grids, the units of each stage, ``dprm reproduce``) are
:mod:`dprm.orchestrate`; this package only reads their outputs and writes documents.

* :mod:`dprm.report.tables` -- Table 1 for any grid and set of methods (Markdown, LaTeX, CSV);
* :mod:`dprm.report.figures` -- the figures (matplotlib, an optional extra, imported lazily);
* :mod:`dprm.report.document` -- tables, figures, results.json and report.md from the units' outputs;
* :mod:`dprm.report.paper` -- the paper's tables next to ours, with a generated reading;
* :mod:`dprm.report.pays` -- the "does it pay?" tables; :mod:`dprm.report.checks` -- the report's checks.
"""

from dprm.report.tables import CalibrationTable, build_table, to_latex, to_markdown, write_tables

__all__ = ["CalibrationTable", "build_table", "to_latex", "to_markdown", "write_tables"]
