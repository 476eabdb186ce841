"""One trial: launch an engine for a mode, wait until it is ready, run a workload, read its figures.

- :mod:`~core._measure.trial`: the trial itself (:func:`~core._measure.trial.measure`), and a
  pair of trials side by side;
- :mod:`~core._measure.engines`: engine adapters (vLLM, SGLang, any command), with
  :mod:`~core._measure.prometheus` (``/metrics``) and :mod:`~core._measure.sglang_log`
  (SGLang's decode log lines) for what the engine says about speculative decoding;
- :mod:`~core._measure.worktree_engine`: an engine launched from a git worktree of one commit;
- :mod:`~core._measure.profiled`: one launch with the engine's torch profiler on, its traces
  copied here (a compare's profile round);
- :mod:`~core._measure.workload`: seeded prompt sets;
- :mod:`~core._measure.client`: the streaming benchmark client (TTFT, ITL, TPOT, tok/s), on
  :mod:`~core._measure.http_stream` (one keep-alive connection); :mod:`~core._measure.host_client`:
  the same client run on an SSH host beside the engine (``python -m core._measure.host_client``).
"""
