"""What a host is, and whether it stayed quiet: the environment side of a measurement.

- :mod:`~core._env.probe_script`: the probe itself, a self-contained script run with the
  engine's Python (GPUs through NVML, software, system); :mod:`~core._env.probe` runs it and
  reads its JSON;
- :mod:`~core._env.checks`: PASS/WARN/FAIL health checks over one snapshot;
- :mod:`~core._env.fingerprint`: the diff of two snapshots, likeliest throughput mover first;
- :mod:`~core._env.hygiene`: who holds the host's GPUs, and what to do about each;
- :mod:`~core._env.window`: the window monitor of one trial (run on the host by the helper);
  :mod:`~core._env.disturbance`: whether that window was disturbed, by what.
"""
