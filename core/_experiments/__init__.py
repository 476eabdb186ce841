"""Experiments over trials, and their verdicts.

- :mod:`~core._experiments.compare`: revert-and-measure, a commit against its base in
  interleaved (ABBA) launches, a verdict per mode;
- :mod:`~core._experiments.profiling`: the profile round after the verdicts, which names the
  ops whose time per step moved;
- :mod:`~core._experiments.stats`: the statistics that decide a verdict (paired changes,
  bootstrap intervals, the margin) and EAGLE-3's speedup;
- :mod:`~core._experiments.calibrate`: the launch-to-launch spread of a host from A/A
  launches, and the margin and launches that reach a given power;
- :mod:`~core._experiments.bisection`: find the commit of a regression in as few compares as
  a binary search allows;
- :mod:`~core._experiments.report`: a compare's report as data, and its chart.
"""
