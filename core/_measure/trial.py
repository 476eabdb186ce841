"""One trial on a host: launch an engine, wait until ready, warm up, measure, stop.

The engine runs in its own process group (:class:`core._hosts.process.EngineProcess`) and is
stopped by group whatever happens: success, an error, Ctrl-C or cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
import os
import socket
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from core._config import EngineConfig, HostConfig, WorkloadConfig
from core._env.window import WindowMonitor
from core._errors import ConfigError, EngineError, EngineExitedError
from core._hosts import EngineHandle, Host, LocalHost
from core._hosts import container as _container
from core._measure.client import RequestRecord, Sample, run_alternating, run_workload
from core._measure.engines import EngineAdapter, EngineFigures, adapter_for
from core._measure.host_client import run_on_host

_LIMITS = httpx.Limits(keepalive_expiry=2.0)  # below the engines' servers' 5 s keep-alive (ready_engine)


@dataclass
class TrialResult:
    """One engine launch and its measured window.

    ``ready_s``: launch to ready, seconds. ``pgid``: the engine's process group.
    ``sample``: the client's measurement (``sample.measured_by``: where the client ran);
    ``engine``: what the engine reported.
    ``window``: what the window monitor saw on the host during the measured requests
    (``core/_env/window.py``; ``{"error": ...}`` if it failed).
    ``length_method``: how the output length was held fixed (core._measure.client.LENGTH_METHODS).
    """

    engine_name: str
    mode: str
    workload_name: str
    argv: list[str]
    pgid: int
    log_path: str
    started_at: str
    ready_s: float
    sample: Sample
    engine: EngineFigures
    length_method: str = "ignore_eos"
    window: dict | None = None

    def to_dict(self) -> dict:
        """Plain JSON-ready dict: summary figures plus every request record."""
        return {
            "engine_name": self.engine_name,
            "mode": self.mode,
            "workload_name": self.workload_name,
            "argv": self.argv,
            "pgid": self.pgid,
            "log_path": self.log_path,
            "started_at": self.started_at,
            "ready_s": self.ready_s,
            "length_method": self.length_method,
            "client": self.sample.summary(),
            "measured_by": self.sample.measured_by,
            "engine": dataclasses.asdict(self.engine),
            "window": self.window,
            "requests": [
                {**dataclasses.asdict(r), "e2e_ms": r.e2e_ms, "tpot_ms": r.tpot_ms}
                for r in self.sample.requests
            ],
        }


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The TLS context of every trial's engine client, made once: each ``httpx.AsyncClient``
    would otherwise load the CA bundle again (about 25 ms of CPU per trial)."""
    return httpx.create_ssl_context()


def _who(listeners: list[dict]) -> str:
    return "; ".join(f"pid {p['pid']} ({p['user']}: {p['cmdline'][:80]})" for p in listeners) or "an unknown process"


@dataclass
class _Ready:
    """A launched engine that answered its readiness check (inside :func:`ready_engine`)."""

    process: EngineHandle
    adapter: EngineAdapter  # its length_method found by the readiness check
    client: httpx.AsyncClient
    base_url: str
    argv: list[str]
    log_path: str
    started_at: dt.datetime
    ready_s: float
    container_pgids: list[int]  # a container engine's processes (outside the launched group)


@contextlib.asynccontextmanager
async def ready_engine(host: Host, engine_name: str, engine: EngineConfig, mode: str, log_dir: str,
                        cwd: str | None, on_launch: Callable[[EngineHandle], None] | None):
    """Launch ``engine`` in ``mode`` on ``host`` (its port checked free first), wait until it
    is ready and still holds its port; yield a :class:`_Ready`. The engine's group is stopped
    when the block ends, however it ends. Raises as :func:`measure`."""
    if mode not in engine.modes:
        raise ConfigError(
            f"engine {engine_name!r} has no mode {mode!r} (its modes: {', '.join(sorted(engine.modes))})"
        )
    adapter = adapter_for(engine)
    argv = adapter.launch_argv(mode)
    taken = await host.listeners(engine.port)
    if taken:
        raise EngineError(
            f"port {engine.port} on host {host.name} is already in use by {_who(taken)}; stop it or set a free "
            "engines.<name>.port in the config (specperf never stops what it did not start)"
        )
    started_at = dt.datetime.now(dt.UTC)
    log_path = f"{log_dir}/{engine_name}-{mode}-{started_at:%Y%m%dT%H%M%S%fZ}.log"
    box = engine.container
    name = _container.container_name(engine_name, mode, started_at) if box else ""
    if box:
        await _container.check_image(host, box, engine_name)
        argv = _container.run_argv(box, argv, name=name, workdir=host.workdir, env_names=sorted(engine.env), cwd=cwd,
                                   cpus=engine.cpus)
    async with contextlib.AsyncExitStack() as stack:
        process = await stack.enter_async_context(host.launch(engine_name, argv, engine.env, log_path, cwd,
                                                              engine.stop_grace_s))
        if box:  # stopped and removed by its name before the group of its `run` is stopped
            stack.push_async_callback(_container.remove, host, box, name, engine.stop_grace_s)
        base_url = await stack.enter_async_context(host.forward(engine.port))
        launched_at = time.monotonic()
        if on_launch:
            on_launch(process)
        # idle connections dropped after 2 s: uvicorn (vLLM's and SGLang's server) closes them after
        # 5 s, httpx's own default, so a /metrics read after a 5 s warm-up could reuse one the
        # server is closing ("Server disconnected without sending a response", seen in the suite)
        async with httpx.AsyncClient(base_url=base_url, verify=_tls_context(), limits=_LIMITS) as client:
            await adapter.wait_ready(client, engine.ready_timeout_s, lambda: process.returncode, process.log_tail)
            ready_s = time.monotonic() - launched_at
            pgids = await _container.container_pgids(host, box, name) if box else []
            if await _holds_port(host, process, engine.port, box is not None, pgids) is False:
                raise EngineError(
                    f"port {engine.port} on host {host.name} is answered by {_who(await host.listeners(engine.port))}, "
                    f"not by the engine specperf started (process group {process.pgid}"
                    f"{f' or container {name}' if box else ''}): another server took the port; stop it or choose "
                    "another port", await process.log_tail())
            yield _Ready(process, adapter, client, base_url, argv, log_path, started_at, ready_s, pgids)


async def _holds_port(host: Host, process: EngineHandle, port: int, container: bool, container_pgids: list[int]
                      ) -> bool | None:
    """Whether the launched group, or a container engine's processes (``container_pgids``),
    listen on ``port``; ``None`` when unknown (a container whose processes cannot be found)."""
    held = await process.holds_port(port)
    if held or not container:
        return held
    if not container_pgids:
        return None
    return any(listener["pgid"] in container_pgids for listener in await host.listeners(port))


def _monitor_python(host: Host, engine: EngineConfig) -> str:
    """The interpreter that runs the window monitor on ``host`` for ``engine``: the engine's
    own (it has ``pynvml`` where the engine reads GPUs), or the host's ``python`` for a
    container engine, whose interpreter is inside the image."""
    return host.config.python if engine.container else engine.python


async def _raise_if_exited(engine_name: str, process: EngineHandle) -> None:
    if process.returncode is not None:
        raise EngineExitedError(
            f"engine {engine_name!r} exited with status {process.returncode} during the "
            "measurement; nothing from this trial can be trusted",
            await process.log_tail(),
        )


async def measure(
    engine_name: str,
    engine: EngineConfig,
    mode: str,
    workload_name: str,
    workload: WorkloadConfig,
    log_dir: str,
    *,
    host: Host | None = None,
    cwd: str | None = None,
    on_launch: Callable[[EngineHandle], None] | None = None,
    on_ready: Callable[[float], None] | None = None,
    on_request_done: Callable[[RequestRecord], None] | None = None,
) -> TrialResult:
    """Run one trial of ``engine`` in ``mode`` with ``workload`` on ``host`` (default: this machine).

    The engine runs on the host in ``cwd`` (default: the host's default) and logs to
    ``log_dir/<engine>-<mode>-<UTC time>.log`` there; readiness, the engine's metrics and the
    window monitor reach it through ``host.forward`` (an SSH tunnel for a remote host). The
    benchmark client runs here through the same forward, or, on an SSH host with
    ``client = "host"``, on the host itself (core/_measure/host_client/__init__.py), sending the measured
    requests to ``http://{engine_address}:{port}`` there; ``sample.measured_by`` says which.
    ``on_launch`` gets the started engine (its ``pgid``) before anything else happens, so a
    caller can record it.

    Returns:
        The :class:`TrialResult`; its sample is valid (else an error is raised).

    Raises:
        ConfigError: ``mode`` is not one of the engine's modes.
        HostError: the host cannot be reached, or the connection was lost (the engine is
            stopped on the host by its supervisor); with ``client = "host"``, also the client
            there died, went silent or printed garbage (with its last output lines).
        EngineError: the port is taken, the program is missing, or the engine never got
            ready; EngineExitedError if it died (before ready or while measured). The
            message carries the engine log's tail.
        InvalidSampleError: a request was truncated or failed (carries the sample).
    """
    host = host or LocalHost("local", HostConfig(), str(log_dir))
    async with ready_engine(host, engine_name, engine, mode, log_dir, cwd, on_launch) as ready:
        if on_ready:
            on_ready(ready.ready_s)
        window = _Window(ready)
        sample, seen = await _run_client(host, engine_name, engine, ready, workload, window, on_request_done)
        return await window.trial(engine_name, mode, workload_name, sample, seen)


class _Window:
    """The measured window of one ready engine: where its log stood and what its adapter read
    when the measured requests began (:meth:`begin`), turned into the trial at the end."""

    def __init__(self, ready: _Ready) -> None:
        self.ready = ready
        self.log_offset = 0
        self.start: object = None  # the adapter's reading at the start (its counters)

    async def begin(self) -> None:
        self.log_offset = await self.ready.process.log_size()
        self.start = await self.ready.adapter.begin_window(self.ready.client)

    async def trial(self, engine_name: str, mode: str, workload_name: str, sample: Sample, seen: dict | None
                    ) -> TrialResult:
        """The trial of this window: ``sample`` checked (InvalidSampleError), the engine's
        figures over the window (its counters, and its log since :meth:`begin` where the
        adapter reads it), ``seen`` the window monitor's document."""
        sample.raise_if_invalid()
        ready, adapter = self.ready, self.ready.adapter
        log_text = await ready.process.read_log(self.log_offset) if adapter.reads_log else ""
        figures = await adapter.end_window(ready.client, self.start, sample, log_text, mode)
        return TrialResult(
            engine_name=engine_name, mode=mode, workload_name=workload_name, argv=ready.argv,
            pgid=ready.process.pgid, log_path=ready.log_path, started_at=ready.started_at.isoformat(),
            ready_s=ready.ready_s, sample=sample, engine=figures, window=seen, length_method=adapter.length_method,
        )


async def _run_client(host: Host, engine_name: str, engine: EngineConfig, ready: _Ready, workload: WorkloadConfig,
                      window: _Window, on_request_done: Callable[[RequestRecord], None] | None
                      ) -> tuple[Sample, dict | None]:
    """The workload against the ready engine, here or (``client = "host"``) on the host beside
    it, with the window monitor open around it and started with the measured requests.
    Returns (the sample, the monitor's document); raises as :func:`measure`, and
    EngineExitedError when the engine died meanwhile."""
    monitors: list[WindowMonitor] = []  # the one monitor, once open (on the host: after the client's hello)

    async def open_monitor(own_pids: list[int] | None = None) -> None:
        # the configured CPUs where the engine is pinned: its group's own affinity also
        # counts the helper that supervises it on an SSH host, which may run anywhere
        monitors.append(WindowMonitor(host, _monitor_python(host, engine), ready.process.pgid, engine.cpus,
                                      own_pids=own_pids, peer_pgids=ready.container_pgids))
        await monitors[0].open()

    async def begin() -> None:
        await window.begin()
        await monitors[0].start()

    try:
        if host.config.client == "host":  # from the host itself, beside the engine
            address = host.config.engine_address
            sample = await run_on_host(
                host, f"http://{f'[{address}]' if ':' in address else address}:{engine.port}",
                engine.request_model_name,
                workload, length_method=ready.adapter.length_method, avoid_cpus=engine.cpus,
                on_started=lambda hello: open_monitor([hello["pid"], hello["ppid"]]),
                on_measure_start=begin, on_request_done=on_request_done,
            )
        else:
            await open_monitor()
            sample = await run_workload(
                ready.base_url, engine.request_model_name, workload,
                on_request_done=on_request_done, on_measure_start=begin, length_method=ready.adapter.length_method,
            )
            sample.measured_by = _here()
        seen = await monitors[0].stop()
    finally:
        for monitor in monitors:
            await monitor.aclose()
        await _raise_if_exited(engine_name, ready.process)
    return sample, seen


def _first_error(grouped: BaseExceptionGroup) -> BaseException:
    """The error that ended a task group, not the cancellations it caused."""
    for exc in grouped.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first_error(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return grouped.exceptions[0]


def _here() -> dict:
    """``Sample.measured_by`` of a client that ran in this process."""
    return {"where": "here", "hostname": socket.gethostname(), "pid": os.getpid(), "python": sys.executable}


async def measure_pair(
    engine_name: str,
    engines: tuple[EngineConfig, EngineConfig],
    mode: str,
    workload_name: str,
    workload: WorkloadConfig,
    log_dir: str,
    *,
    host: Host,
    cwds: tuple[str | None, str | None],
    first: int = 0,
    on_launch: Callable[[int, EngineHandle], None] | None = None,
    on_request_done: Callable[[int, RequestRecord], None] | None = None,
) -> tuple[TrialResult, TrialResult]:
    """One trial of each of two engines (the two arms of a compare) launched at the same time
    on ``host`` and measured in turns (:func:`core._measure.client.run_alternating`, ``first``: the
    arm that takes the first turn), for ``[compare] pairing = "concurrent"``.

    The engines are launched together, each from its ``cwds`` entry, and must listen on
    different ports (the caller sets them); both must be ready before either is measured. One
    window monitor watches both (neither engine's group is foreign to the other); both trials
    carry the same window document. ``on_launch(arm, engine)`` and ``on_request_done(arm,
    record)`` as for :func:`measure`.

    Returns:
        (arm 0's trial, arm 1's trial), each with ``workload.requests`` measured requests.

    Raises:
        ConfigError: ``mode`` is missing, the two ports are equal, or the host's client runs on
            the host (``client = "host"``: not supported for concurrent pairing).
        As :func:`measure` otherwise; either engine failing fails both trials.
    """
    if engines[0].port == engines[1].port:
        raise ConfigError(f"both arms of engine {engine_name!r} would listen on port {engines[0].port}: concurrent "
                          "pairing needs a free second port (the commit's engine takes port + 1)")
    if host.config.client == "host":
        raise ConfigError(f"host {host.name}: [compare] pairing = \"concurrent\" needs the benchmark client here; "
                          "set pairing = \"sequential\" or remove client = \"host\"")
    async with contextlib.AsyncExitStack() as stack:
        async def up(arm: int) -> _Ready:
            return await stack.enter_async_context(ready_engine(
                host, engine_name, engines[arm], mode, log_dir, cwds[arm],
                (lambda process: on_launch(arm, process)) if on_launch else None))

        try:  # launched together; one that fails stops the other (a TaskGroup cancels its sibling)
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(up(arm)) for arm in (0, 1)]
        except BaseExceptionGroup as grouped:
            raise _first_error(grouped) from None
        readies = [task.result() for task in tasks]
        windows = [_Window(ready) for ready in readies]
        monitor = WindowMonitor(host, _monitor_python(host, engines[0]), readies[0].process.pgid, engines[0].cpus,
                                peer_pgids=[readies[1].process.pgid, *readies[0].container_pgids,
                                            *readies[1].container_pgids])

        async def begin() -> None:
            for window in windows:
                await window.begin()
            await monitor.start()

        try:
            await monitor.open()
            samples = await run_alternating(
                (readies[0].base_url, readies[1].base_url), engines[0].request_model_name, workload, first=first,
                on_request_done=on_request_done, on_measure_start=begin,
                length_methods=(readies[0].adapter.length_method, readies[1].adapter.length_method))
            seen = await monitor.stop()
        finally:
            await monitor.aclose()
            for ready in readies:
                await _raise_if_exited(engine_name, ready.process)
        trials = []
        for window, sample in zip(windows, samples):
            sample.measured_by = _here()
            trials.append(await window.trial(engine_name, mode, workload_name, sample, seen))
    return trials[0], trials[1]
