"""Where inside the step the time went: torch profiler traces of both arms, read and diffed.

- :mod:`~core._profile.traces`: a torch profiler trace (Chrome trace JSON, gzip or not) read
  into self time and calls per op or kernel, and the engine steps it covers;
- :mod:`~core._profile.categories`: the label of an op (communication, attention, GEMM,
  sampling, draft model, the step's own Python);
- :mod:`~core._profile.diff`: two arms' profiles per step, ops ranked by the change of their
  time per step.
"""
