"""The paper's experiments end to end: Table 1, figures, ``report.md`` (``dprm reproduce``).

* :mod:`dprm.report.tables` -- Table 1 for any grid and set of methods (Markdown, LaTeX, CSV);
* :mod:`dprm.report.figures` -- the figures (matplotlib, an optional extra, imported lazily);
* :mod:`dprm.report.grid` -- the grids (demo, paper) and the resolved, validated run configuration;
* :mod:`dprm.report.stages` -- builds the units of each stage (synth, train, evaluate, ias);
* :mod:`dprm.report.document` -- tables, figures, results.json and report.md from the units' outputs;
* :mod:`dprm.report.paper` -- the paper's tables next to ours, with a generated reading;
* :mod:`dprm.report.reproduce` -- ``dprm reproduce``: the stages in order, then the document.
"""

from dprm.report.tables import CalibrationTable, build_table, to_latex, to_markdown, write_tables

__all__ = ["CalibrationTable", "build_table", "to_latex", "to_markdown", "write_tables"]
