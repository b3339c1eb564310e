"""The paper's experiments end to end: Table 1, figures, ``report.md`` (``dprm reproduce``).

* :mod:`dprm.report.tables` -- Table 1 for any grid and set of methods (Markdown, LaTeX, CSV);
* :mod:`dprm.report.figures` -- the figures (matplotlib, an optional extra, imported lazily);
* :mod:`dprm.report.reproduce` -- the resumable pipeline; :mod:`~dprm.report.stages` its units;
* :mod:`dprm.report.document` -- results.json, run.json and report.md from the units' outputs.
"""

from dprm.report.tables import CalibrationTable, build_table, to_latex, to_markdown, write_tables

__all__ = ["CalibrationTable", "build_table", "to_latex", "to_markdown", "write_tables"]
