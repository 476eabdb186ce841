"""Fakes for testing code that uses specperf, and for specperf's own fast tests: a host whose
engines are in-process servers, so compare and bisect logic runs in a second with real git,
real statistics and the real benchmark client (the way httpx ships ``MockTransport``).

* :class:`ExactRateServer`: an OpenAI-compatible streaming server that emits tokens on an
  exact schedule (the benchmark client's ground truth).
* :class:`FakeHost`: this machine's git and files (real repositories and worktrees under its
  work directory), a fixed environment snapshot instead of the probe, no GPU holders, and
  each engine launch an in-process :class:`ExactRateServer` whose inter-token latency a
  function of the launch (commit SHA, argv, number) decides, or that fails to start.
* :func:`fake_engine_config`: an engine of kind ``command`` for a :class:`FakeHost`.

Example (the host-level compare is a building block, imported from its module)::

    from core._experiments.compare import CompareRequest, compare

    host = FakeHost(workdir, itl_ms=lambda launch: 2.2 if launch.sha == slow_sha else 2.0)
    result = await compare(CompareRequest(..., engine=fake_engine_config(repo), host=host))

Used by tests only; nothing in ``core``, ``storage`` or ``bot`` imports it.
"""

from core.testing.fake_engine import ExactRateServer
from core.testing.fake_host import FakeHost, FakeLaunch, fake_engine_config

__all__ = ["ExactRateServer", "FakeHost", "FakeLaunch", "fake_engine_config"]
