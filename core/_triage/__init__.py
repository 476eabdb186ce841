"""Triage without GPU time: the first-parent commits of a range, ranked by suspicion, under the
rules of :mod:`core._config.triage_rules` (the areas, dependency files, gates and model paths,
built-in for SGLang's and vLLM's layouts, and the ``[triage]`` section that extends them).

- :mod:`~core._triage.diff`: unified diffs parsed into files and hunks, and files read at a commit;
- :mod:`~core._triage.pins`: the dependency pins a hunk moves;
- :mod:`~core._triage.gates`: feature gates, their state under a mode's arguments, and code a
  gate switches off;
- :mod:`~core._triage.models`: which model files a mode's model and draft use;
- :mod:`~core._triage.rank`: the ranking itself (:func:`~core._triage.rank.triage`).
"""
