"""The stored history, read back: what the runs of a period found and how each series moved.

- :mod:`~core._history.series`: one point per measured commit of one (engine, host, mode, workload);
- :mod:`~core._history.changepoints`: change points confirmed on the trials, and a trailing drift;
- :mod:`~core._history.findings`: the verdicts, bisects and failures of a period;
- :mod:`~core._history.summary`: the regression summary of a period and its trend chart;
- :mod:`~core._history.static_site`: the history pages (``specperf report --html DIR``);
- :mod:`~core._history.check`: was the good number real, today's launches against the stored ones.

Nothing here reads a database: ``storage`` builds these objects from its tables.
"""
