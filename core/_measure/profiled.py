"""One profiled launch: an engine started with its torch profiler on, profiled over a few
requests after the warm-up, its trace files found on the host and copied here.

The engine is launched as a trial launches it (:func:`core._measure.trial.ready_engine`: own
process group, port check, readiness), with the adapter's :class:`~core._measure.engines.ProfilerHook`
added: vLLM's ``--profiler-config``, SGLang's trace folder variable, or a command engine's
``profile_dir_env``. After the workload's warm-up, ``POST /start_profile``; then the profiled
requests; then ``POST /stop_profile``. The profiler writes when it stops, so the trace folder
is watched until its files stop growing. The files are copied into a folder on this machine
(through the host's command channel, base64 on the wire, so SSH and Slurm hosts work as the
local one does).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from core._config import EngineConfig, WorkloadConfig
from core._errors import EngineError, SpecperfError
from core._hosts import EngineHandle, Host
from core._measure.client import run_workload
from core._measure.engines import ProfilerHook, adapter_for
from core._measure.trial import ready_engine

TRACE_SUFFIXES = (".json", ".json.gz")
QUIET_S = 0.75  # seconds the trace folder must stay unchanged before its files are read
POLL_S = 0.25  # seconds between two listings of it


class NoProfilerError(SpecperfError):
    """The engine has no profiler endpoint specperf can drive."""


async def profile_launch(engine_name: str, engine: EngineConfig, mode: str, workload: WorkloadConfig, log_dir: str,
                         *, host: Host, cwd: str | None, trace_dir: str, local_dir: Path, steps: int,
                         version: str | None = None, on_launch: Callable[[EngineHandle], None] | None = None,
                         settle_timeout_s: float = 120.0) -> list[Path]:
    """Launch ``engine`` in ``mode`` with its profiler writing to ``trace_dir`` on ``host``,
    warm up and profile ``workload`` (its ``requests`` are the profiled ones), and return the
    trace files copied into ``local_dir``.

    Args:
        steps: at most this many engine steps profiled (where the engine takes a bound).
        version: the engine library's version, where known (vLLM's profiler settings moved).
        settle_timeout_s: how long to wait after ``/stop_profile`` for the traces to be written.

    Raises:
        NoProfilerError: the engine's kind has no profiler endpoint (a command engine without
            ``profile_dir_env``).
        EngineError: the profiler endpoints answered an error, or no trace was written.
        As :func:`core._measure.trial.measure` for the launch itself.
    """
    hook = adapter_for(engine).profiler(trace_dir, steps, version)
    if hook is None:
        raise NoProfilerError(f"engine {engine_name!r} has no profiler endpoint (kind = \"command\" without "
                              "profile_dir_env)")
    await host.makedirs(trace_dir)
    profiled = engine.model_copy(update={"args": [*engine.args, *hook.args], "env": {**engine.env, **hook.env}})
    async with ready_engine(host, engine_name, profiled, mode, log_dir, cwd, on_launch) as ready:
        async def start() -> None:
            await _post(ready.client, hook, hook.start_path, hook.start_body, engine_name, ready.process)

        sample = await run_workload(ready.base_url, engine.request_model_name, workload, on_measure_start=start,
                                    length_method=ready.adapter.length_method)
        sample.raise_if_invalid()  # a profile of failed or truncated requests is not the arm's
        await _post(ready.client, hook, hook.stop_path, None, engine_name, ready.process)
        files = await _settled_traces(host, trace_dir, settle_timeout_s)
        if not files:
            raise EngineError(f"engine {engine_name!r} wrote no profiler trace into {trace_dir} on host {host.name} "
                              f"within {settle_timeout_s:g} s of /stop_profile", await ready.process.log_tail())
    return [await _copy(host, path, local_dir) for path in files]


async def _post(client: httpx.AsyncClient, hook: ProfilerHook, path: str, body: dict | None, engine_name: str,
                process: EngineHandle) -> None:
    try:
        response = await client.post(path, json=body, timeout=600.0)
    except httpx.HTTPError as exc:
        raise EngineError(f"engine {engine_name!r}: POST {path} failed: {exc!r}", await process.log_tail()) from exc
    if response.status_code >= 400:
        raise EngineError(f"engine {engine_name!r}: POST {path} answered HTTP {response.status_code}: "
                          f"{response.text[:300]}", await process.log_tail())


async def _listing(host: Host, trace_dir: str) -> dict[str, int]:
    """``{path: size in bytes}`` of the trace files under ``trace_dir`` on the host."""
    result = await host.run(["find", trace_dir, "-type", "f", "-printf", "%s %p\\n"], timeout_s=60)
    sizes = {}
    for line in result.stdout.splitlines():
        size, _, path = line.partition(" ")
        if path.endswith(TRACE_SUFFIXES) and size.isdigit():
            sizes[path] = int(size)
    return sizes


async def _settled_traces(host: Host, trace_dir: str, timeout_s: float, quiet_s: float = QUIET_S) -> list[str]:
    """The trace files once the folder's listing (path and size of each) has stayed the same for
    ``quiet_s`` seconds, read every :data:`POLL_S`, at the latest after ``timeout_s``; sorted by
    path. (vLLM's ``/stop_profile`` answers after every rank stopped its profiler, which writes
    the rank's file; the quiet period covers a file still being flushed or a rank's file that
    appears a moment later.)"""
    deadline = time.monotonic() + timeout_s
    before, quiet_since = await _listing(host, trace_dir), time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
        now = await _listing(host, trace_dir)
        if now != before or not now or not all(now.values()):
            before, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            break
    return sorted(before)


async def _copy(host: Host, path: str, local_dir: Path) -> Path:
    """``path`` on the host copied to ``local_dir`` under its own name (a local host's file is
    copied too, so the run keeps its traces when the host's work folder is cleaned)."""
    local_dir.mkdir(parents=True, exist_ok=True)
    result = await host.run(["base64", "-w", "0", "--", path], timeout_s=600)
    if result.returncode != 0:
        raise EngineError(f"cannot read the profiler trace {path} on host {host.name}: {result.stderr.strip()[:300]}")
    try:
        data = base64.b64decode(result.stdout.strip(), validate=True)
    except binascii.Error as exc:
        raise EngineError(f"the profiler trace {path} on host {host.name} came back damaged ({exc}): "
                          "the connection dropped mid-copy? profile again") from exc
    target = local_dir / Path(path).name
    target.write_bytes(data)
    return target
