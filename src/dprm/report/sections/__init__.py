"""The sections of ``report.md``, one module per area; :mod:`dprm.report.document_md` puts them
in order.

* :mod:`dprm.report.sections.names` -- :class:`RunNames`: what the report calls the run's data;
* :mod:`dprm.report.sections.run` -- the title, the data and calibrators, versions and timing;
* :mod:`dprm.report.sections.checks` -- the checks against Base and the C rule;
* :mod:`dprm.report.sections.pays` -- "Does adaptive compute pay?";
* :mod:`dprm.report.sections.calibration` -- the calibration tables, the paper's numbers beside
  them and the distance to the truth.
"""
