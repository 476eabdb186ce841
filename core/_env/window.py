"""The window monitor of one trial, driven from here: it runs on the engine's host as the host
helper's ``monitor`` mode (``core/_hosts/agent.py``, standard-library Python plus ``pynvml``
where the probe finds it), started once the engine is ready and told when the measured
requests start and end, so start-up and warm-up are outside the window.

The window document (:func:`core._hosts.agent.window_summary`)::

    {"window_s", "host_cpus", "engine_cpus": [cpu], "client_cpus": [cpu] | null,
     "cpu": {"host_busy_share", "host_foreign_share", "engine_cpus_busy_share",
             "engine_cpus_foreign_share", "engine_cpus_foreign_s", "engine_cpus_unattributed_s",
             "engine_cpus_steal_share", "engine_cpu_s", "engine_runqueue_wait_s",
             "client_cpus_foreign_share"},
     "foreign_processes": [{"pid", "user", "command" (redacted), "cpu_s", "engine_cpus_cpu_s"}],
     "memory": {"available_min_mib", "swap_in_mib", "swap_out_mib", "major_faults"},
     "gpu": {"available": false, "reason"} | {"available": true, "devices": [
         {"index", "violation_s": {policy: s}, "clock_event_s": {reason: s},
          "unsupported": {counter: why}, "sm_clock_mhz_min", "sm_clock_mhz_median",
          "sm_clock_samples", "foreign_processes": [...]}]}}

Shares are of CPU capacity over the window (1.0: every CPU counted was busy all the time).
A monitor that fails never fails the trial: its document is ``{"error": "..."}``.
"""

from __future__ import annotations

import asyncio
import json
import os

from core._env.probe import own_pynvml_dir
from core._errors import HostError
from core._hosts.base import AGENT_SOURCE, Host, Spawned

_ANSWER_S = 30.0  # the helper answers each line at once; this only bounds a broken link


class WindowMonitor:
    """The monitor of one trial on ``host`` for the engine's process group ``pgid`` (``-1``: no
    engine, as for ``specperf env --watch``), run with ``python`` (the engine's, which has
    ``pynvml`` when NVML can be read; on this machine specperf's own copy is the fallback, as
    for the probe). ``cpus``: the engine's CPUs (default: those its group may run on).
    ``own_pids``: specperf's own processes on the host, never counted as foreign (default:
    this process on the local host, where the benchmark client runs in it; the client's
    process on an SSH host with ``client = "host"``). ``peer_pgids``: the other engine's
    group when both arms run at once (never foreign). ``client_cpus``: the CPUs the benchmark
    client runs on (default: this process's on the local host, ``None`` elsewhere), watched
    for foreign load too (``client_cpus_foreign_share``).
    Use :meth:`open`, :meth:`start`, then :meth:`stop`."""

    def __init__(self, host: Host, python: str, pgid: int, cpus: list[int] | None = None,
                 interval_s: float = 0.5, own_pids: list[int] | None = None, peer_pgids: list[int] | None = None,
                 client_cpus: list[int] | None = None) -> None:
        self.host, self.python, self.pgid = host, python, pgid
        own = own_pids if own_pids is not None else [os.getpid()] if host.is_local else []
        if client_cpus is None and host.is_local and own_pids is None:
            client_cpus = sorted(os.sched_getaffinity(0))
        self.spec = {"pgid": pgid, "own_pids": own, "interval_s": interval_s, "cpus": cpus,
                     "pynvml_dir": own_pynvml_dir() if host.is_local else None,
                     "peer_pgids": list(peer_pgids or []), "client_cpus": client_cpus}
        self._proc: Spawned | None = None
        self.error: str | None = None

    async def _expect(self, key: str) -> dict:
        if self._proc is None:
            raise HostError(self.error or "the window monitor is not running")
        async with asyncio.timeout(_ANSWER_S):
            line = await self._proc.readline()
        doc = json.loads(line) if line.strip() else None
        if not isinstance(doc, dict) or key not in doc:
            raise HostError(f"the window monitor answered {line.strip()[:200]!r} instead of {key!r}")
        return doc

    async def open(self) -> None:
        """Start the helper on the host; it waits for :meth:`start`."""
        try:
            self._proc = await self.host.spawn([self.python, "-c", AGENT_SOURCE, "monitor", json.dumps(self.spec)])
            await self._expect("ready")
        except (TimeoutError, HostError, ValueError) as exc:
            self._fail(exc)

    async def start(self) -> None:
        """Take the window's first reading (the measured requests start next)."""
        if self._proc is None:
            return
        try:
            self._proc.write("start\n")
            await self._expect("started")
        except (TimeoutError, HostError, ValueError) as exc:
            self._fail(exc)

    async def stop(self) -> dict:
        """Take the last reading; the window document (``{"error": ...}`` if the monitor failed)."""
        if self._proc is None:
            return {"error": self.error or "the window monitor did not start"}
        try:
            self._proc.write("stop\n")
            return (await self._expect("window"))["window"]
        except (TimeoutError, HostError, ValueError) as exc:
            self._fail(exc)
            return {"error": self.error}
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """End the helper: it exits once its standard input closes."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.close()
            try:
                async with asyncio.timeout(_ANSWER_S):
                    await proc.wait()
            except TimeoutError:
                pass

    def _fail(self, exc: BaseException) -> None:
        self.error = f"window monitor on host {self.host.name} failed: {exc or type(exc).__name__}"
        if self._proc is not None:
            self._proc.close()
