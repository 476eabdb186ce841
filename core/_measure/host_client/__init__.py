"""specperf's benchmark client on an SSH host, beside the engine (``[hosts.<name>] client = "host"``).

With ``client = "here"`` (the default) the client runs in specperf's process and reaches the
engine through the SSH tunnel, so the tunnel's latency and jitter sit inside TTFT, ITL and the
measured window. With ``client = "host"`` a trial's measured requests are sent from the host
itself: :func:`run_on_host` starts this client there (``client_python -m
core._measure.host_client``, inside the exec prefix where there is one), under
the host helper's ``run`` mode (``core/_hosts/agent.py``), which stops it when the SSH channel
closes (a dropped connection, a cancelled or killed specperf) or at the host's
``trial_deadline_s``. Readiness, the engine's ``/metrics`` and the window monitor still go
through the tunnel and the control channel: only the measured path moves.

The client there is the same code as here (:func:`core._measure.client.run_workload`), so its records
are the same :class:`~core._measure.client.RequestRecord` objects; their times are the host's
``time.monotonic()`` seconds (only differences of them are ever used).

The protocol, one JSON object per line, each with exactly one key:

standard input (from specperf)
    1. the spec: ``{"protocol": 1, "base_url": "http://127.0.0.1:8199", "model": str,
       "workload": {WorkloadConfig fields}, "length_method": "ignore_eos", "avoid_cpus": [int] | null,
       "prompts": {"measured": [PROMPT], "warmup": [PROMPT]}}``
       (``avoid_cpus``: the engine's pinned CPUs, which the client moves off when the host has others;
       ``prompts``: the launch's prompts, each every field of a :class:`~core._prompts.Prompt`, since
       the workload's prompt-set file is where specperf runs, not on the host);
    2. the line ``go`` once specperf has snapshotted the engine's counters and started the
       window monitor; end of input before it makes the client exit with status 3.

standard output (to specperf)
    - ``{"hello": {"protocol", "pid", "ppid", "hostname", "python"}}`` at start;
    - ``{"warm": {"requests": N}}`` when the warm-up requests are done (it then waits for ``go``);
    - ``{"done": RECORD}`` for each finished measured request, RECORD being every field of its
      :class:`~core._measure.client.RequestRecord` (``index``, ``start_s``, ``end_s`` in seconds,
      ``ttft_ms``, ``itl_ms`` in ms, ``output_tokens``, ...);
    - ``{"sample": {"window_start_s", "window_end_s", "requests": N}}`` last: the measured
      window and the number of records, which are those of the ``done`` lines (each is sent
      once); exit status 0;
    - ``{"invalid_warmup": {"requests": [RECORD, ...]}}``: a warm-up request failed or was
      truncated (the same :class:`~core._measure.client.InvalidSampleError` as a local warm-up);
      exit status 1;
    - ``{"error": "message"}``: it cannot run (another protocol version, a bad spec or URL);
      exit status 2.

Anything else on standard output is garbage: specperf stops the client and raises a
:class:`~core._errors.HostError` that names the host and quotes the last lines of its output
and standard error, as it does when the client dies.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict

from core._config import WorkloadConfig, client_python_missing
from core._errors import ConfigError, HostError
from core._hosts.agent import move_off_cpus
from core._hosts.base import AGENT_SOURCE, Host, Spawned
from core._measure.client import InvalidSampleError, RequestRecord, Sample, run_workload, workload_prompts
from core._prompts import Prompt

PROTOCOL = 2
MODULE = "core._measure.host_client"  # the entry module run on the host
_START_S = 120.0  # from spawn to hello: an interpreter importing specperf on a busy host
_SLACK_S = 60.0  # beyond request_timeout_s, the longest silence between two lines of a working client


# --- on the host ------------------------------------------------------------------------------


def _record_doc(record: RequestRecord) -> dict:
    return asdict(record)


async def serve(read_line: Callable[[], Awaitable[str]], write_line: Callable[[str], None]) -> int:
    """Run the host side of the protocol (module docstring): read the spec with ``read_line``
    (``""`` at end of input), answer with ``write_line`` (one JSON line, newline included).

    Returns:
        The exit status: 0 with a sample sent, 1 for an invalid warm-up, 2 for an error line,
        3 when input ended before ``go``.
    """
    def send(key: str, value: object) -> None:
        write_line(json.dumps({key: value}) + "\n")

    send("hello", {"protocol": PROTOCOL, "pid": os.getpid(), "ppid": os.getppid(), "hostname": socket.gethostname(),
                   "python": sys.executable})
    try:
        spec = json.loads(await read_line() or "null")
        if not isinstance(spec, dict) or spec.get("protocol") != PROTOCOL:
            got = spec.get("protocol") if isinstance(spec, dict) else spec
            raise ValueError(f"this specperf speaks protocol {PROTOCOL}, the caller {got!r}: install the same specperf "
                             "version on both sides")
        workload = WorkloadConfig.model_validate(spec["workload"])
        base_url, model, length_method = spec["base_url"], spec["model"], spec.get("length_method", "ignore_eos")
        prompts = tuple([Prompt(**{**p, "messages": tuple(p["messages"]) if p.get("messages") else None})
                          for p in spec["prompts"][key]] for key in ("measured", "warmup"))
    except (ValueError, KeyError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        send("error", f"bad spec: {exc}")
        return 2
    move_off_cpus(spec.get("avoid_cpus"))

    class _Left(Exception):
        """Input ended before ``go``: whoever started the client is gone."""

    async def wait_for_go() -> None:
        send("warm", {"requests": workload.warmup_requests})
        line = await read_line()
        if line.strip() != "go":
            raise _Left

    try:
        sample = await run_workload(base_url, model, workload, on_measure_start=wait_for_go,
                                    on_request_done=lambda record: send("done", _record_doc(record)),
                                    length_method=length_method, prompts=prompts)  # type: ignore[arg-type]
    except InvalidSampleError as exc:
        send("invalid_warmup", {"requests": [_record_doc(r) for r in exc.sample.requests]})
        return 1
    except _Left:
        return 3
    except ValueError as exc:  # a base URL that is not http(s)
        send("error", str(exc))
        return 2
    send("sample", {"window_start_s": sample.window_start_s, "window_end_s": sample.window_end_s,
                    "requests": len(sample.requests)})
    return 0


async def _main() -> int:
    # Standard input is read by a thread of its own, with blocking reads: an event-loop reader
    # would make the descriptor non-blocking, and sshd may hand the same socket as standard
    # output, whose writes must then block rather than fail.
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str] = asyncio.Queue()

    def pump() -> None:
        while True:
            line = sys.stdin.readline()
            try:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            except RuntimeError:  # the loop is closed: the client is exiting
                return
            if not line:
                return

    threading.Thread(target=pump, name="stdin", daemon=True).start()

    def write_line(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    return await serve(lines.get, write_line)


def main() -> int:
    """Serve one trial on standard input and output (uvloop); the exit status (see :func:`serve`).
    Run on the host as ``python -m core._measure.host_client``."""
    import uvloop

    try:
        return uvloop.run(_main())
    except BrokenPipeError:  # the reader is gone: nobody to report to
        return 3


# --- here: the driver -------------------------------------------------------------------------


def client_python(host: Host) -> str:
    """The host's ``client_python``.

    Raises:
        ConfigError: it is not set (required with ``client = "host"``).
    """
    if not host.config.client_python:
        raise ConfigError(client_python_missing(host.name))
    return host.config.client_python


def _exit_text(status: int) -> str:
    if status > 128:
        try:
            return f"was killed by {signal.Signals(status - 128).name} (status {status})"
        except ValueError:
            pass
    return f"exited with status {status}"


class _Conversation:
    """The driver's reading side: one protocol line at a time from ``proc``, each within its
    timeout, with the last lines kept for error messages."""

    def __init__(self, host: Host, python: str, proc: Spawned, gap_s: float) -> None:
        self.host, self.python, self.proc, self.gap_s = host, python, proc, gap_s
        self.phase = "before it started"
        self.seen: deque[str] = deque(maxlen=5)

    def _who(self) -> str:
        return f"specperf's benchmark client on host {self.host.name} ({self.python} -m {MODULE})"

    def _output(self) -> str:
        parts = []
        if self.seen:
            parts.append("its last output lines:\n" + "\n".join(line[:300] for line in self.seen))
        err = self.proc.stderr_tail()
        parts.append(f"its standard error ends:\n{err}" if err else "nothing on its standard error")
        return "\n".join(parts)

    def _failed(self, what: str) -> HostError:
        return HostError(f"{self._who()} {what} {self.phase}; {self._output()}")

    async def next(self, keys: tuple[str, ...], timeout_s: float | None = None) -> tuple[str, object]:
        """The next line, one of ``keys`` (or an ``error`` / ``invalid_warmup`` line, raised).

        Raises:
            HostError: the client ended, went silent past the timeout, printed something else,
                or reported an error; or the connection to the host was lost.
            InvalidSampleError: its warm-up failed.
        """
        timeout_s = self.gap_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                line = await self.proc.readline()
        except TimeoutError:
            self.proc.close()
            raise self._failed(f"said nothing for {timeout_s:g} s (it is stopped)") from None
        if not line:
            try:
                async with asyncio.timeout(15):
                    status = await self.proc.wait()
            except TimeoutError:
                status = None
            if status is None:
                raise HostError(f"the connection to host {self.host.name} was lost {self.phase} (the benchmark "
                                "client there is stopped by the helper)")
            raise self._failed(_exit_text(status))
        self.seen.append(line.rstrip("\n"))
        try:
            doc = json.loads(line)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and len(doc) == 1:
            key, value = next(iter(doc.items()))
            if key in keys:
                return key, value
            if key == "invalid_warmup" and isinstance(value, dict):
                records = [RequestRecord(**r) for r in value.get("requests", [])]
                raise InvalidSampleError(Sample(records, 0.0, 0.0))
            if key == "error":
                raise self._failed(f"could not run: {value}")
        self.proc.close()
        raise self._failed(f"printed {line.strip()[:200]!r} where a line of {', '.join(keys)} was due (it is stopped)")


async def _hello(talk: _Conversation) -> dict:
    """The client's first message: its hello, checked to speak this specperf's protocol and to
    carry its pid and parent's pid (HostError otherwise)."""
    _, hello = await talk.next(("hello",), _START_S)
    if not isinstance(hello, dict) or hello.get("protocol") != PROTOCOL:
        hello = hello if isinstance(hello, dict) else {}
        raise talk._failed(f"speaks protocol {hello.get('protocol')!r}, this specperf {PROTOCOL}: install the "
                           "same specperf version there")
    if not (isinstance(hello.get("pid"), int) and isinstance(hello.get("ppid"), int)):
        raise talk._failed(f"said hello without its pid ({hello!r:.200})")
    return hello


async def _measured(talk: _Conversation, on_request_done: Callable[[RequestRecord], None] | None
                    ) -> tuple[list[RequestRecord], dict]:
    """The measured requests' records as the client sends them (``on_request_done`` gets each),
    then its closing ``sample`` message; returns (the records in request order, that message).
    HostError when a message is not an object, a record does not parse, or the count is off."""
    records: list[RequestRecord] = []
    while True:
        key, value = await talk.next(("done", "sample"))
        if not isinstance(value, dict):
            raise talk._failed(f"sent {key} = {value!r:.100}, not an object")
        if key == "sample":
            break
        try:
            record = RequestRecord(**value)
        except TypeError as exc:
            raise talk._failed(f"sent a request record this specperf cannot read ({exc})") from None
        records.append(record)
        if on_request_done is not None:
            on_request_done(record)
    if value.get("requests") != len(records):
        raise talk._failed(f"reported {value.get('requests')} requests but sent {len(records)}")
    records.sort(key=lambda r: r.index)
    return records, value


async def run_on_host(
    host: Host,
    base_url: str,
    model: str,
    workload: WorkloadConfig,
    *,
    length_method: str = "ignore_eos",
    avoid_cpus: list[int] | None = None,
    on_started: Callable[[dict], Awaitable[None]] | None = None,
    on_measure_start: Callable[[], object] | None = None,
    on_request_done: Callable[[RequestRecord], None] | None = None,
) -> Sample:
    """Run ``workload`` against ``base_url`` (as the host reaches the engine) with specperf's
    client on ``host`` (:class:`core._hosts.Host`, its ``client_python``), as
    :func:`core._measure.client.run_workload` does here.

    ``on_started`` is awaited with the client's hello (``{"pid", "ppid", "hostname",
    "python", "protocol"}``) while it warms up (the window monitor opens then, so that it counts
    the client's process as specperf's own); ``on_measure_start`` between the warm-up and the
    measured requests (awaited if it returns an awaitable); ``on_request_done`` per measured
    request, as it finishes there.

    Returns:
        The :class:`Sample` (check ``valid``; it is returned even when invalid), with
        ``measured_by`` ``{"where": "host", "host", "hostname", "pid", "python"}``.

    Raises:
        ConfigError: the host has no ``client_python``.
        InvalidSampleError: a warm-up request failed or was truncated.
        HostError: the client could not start, died, went silent, printed garbage or reported
            an error (the message names the host and quotes its last output and standard
            error), or the connection was lost; the client is stopped on the host.
    """
    python = client_python(host)
    measured, warm = workload_prompts(workload)
    spec = {"protocol": PROTOCOL, "base_url": base_url, "model": model, "workload": workload.model_dump(),
            "length_method": length_method, "avoid_cpus": avoid_cpus,
            "prompts": {"measured": [asdict(p) for p in measured], "warmup": [asdict(p) for p in warm]}}
    argv = [host.config.python, "-c", AGENT_SOURCE, "run", f"{host.config.trial_deadline_s:g}", python, "-m", MODULE]
    proc = await host.spawn(argv, stderr=True)
    talk = _Conversation(host, python, proc, workload.request_timeout_s + _SLACK_S)
    try:
        proc.write(json.dumps(spec) + "\n")
        hello = await _hello(talk)
        talk.phase = "during the warm-up"
        if on_started is not None:
            await on_started(hello)
        rounds = -(-workload.warmup_requests // workload.concurrency)
        await talk.next(("warm",), rounds * workload.request_timeout_s + _SLACK_S)
        if on_measure_start is not None:
            result = on_measure_start()
            if asyncio.iscoroutine(result):
                await result
        proc.write("go\n")
        talk.phase = "during the measured requests"
        records, value = await _measured(talk, on_request_done)
        measured_by = {"where": "host", "host": host.name, "hostname": hello.get("hostname"), "pid": hello.get("pid"),
                       "python": hello.get("python")}
        return Sample(records, value["window_start_s"], value["window_end_s"], measured_by=measured_by)
    finally:
        proc.close()  # the helper stops the client if it is still there
        try:
            async with asyncio.timeout(15):
                await proc.wait()
        except TimeoutError:
            pass
