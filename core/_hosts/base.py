"""The host interface: what every host does (run commands, spawn processes, read and write
files, stop process groups, forward a port, hold the host lock), the command result and the
launched-engine handle. Local and SSH hosts implement it (:mod:`core._hosts.local`,
:mod:`core._hosts.ssh`); a Slurm host passes it on to one of them (:mod:`core._hosts.slurm`).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from core._config import HostConfig
from core._errors import CommandTimeout, HostBusyError, HostError
from core._hosts import agent as _host_agent
from core._hosts.engine_log import collapsed
from core._secret_rule import joined

AGENT_SOURCE = joined(Path(_host_agent.__file__).read_text())  # what runs on a host: the agent and its secret rule


@dataclass
class CommandResult:
    """A finished command: ``returncode`` (127: program not found), decoded output."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


# Where the benchmark client runs, as reports word it after "the benchmark client runs" (and
# as runs store it in settings["client"]; a local host's runs store "local").
CLIENT_HERE = "here"
CLIENT_TUNNEL = "here, through an SSH tunnel"
CLIENT_ON_HOST = "on the host, beside the engine"


class Spawned(ABC):
    """A long-running process on a host with line-oriented pipes."""

    def stderr_tail(self) -> str:
        """The last lines of standard error so far (spawned with ``stderr=True``; else "")."""
        return ""

    @abstractmethod
    async def readline(self) -> str:
        """The next line of standard output, ``""`` at end of file (process or link gone)."""

    @abstractmethod
    def write(self, text: str) -> None:
        """Write ``text`` to standard input (ignored once it is closed)."""

    @abstractmethod
    def close(self) -> None:
        """Close standard input and the channel; a supervised engine is then stopped."""

    @abstractmethod
    async def wait(self) -> int | None:
        """Wait for exit; the exit status (``None`` if unknown, as for a lost link)."""


class StderrTail:
    """The last ``lines`` lines of a process's standard error, read by a task of its own (so a
    chatty process never blocks on a full pipe) until the stream ends. ``read(n)`` returns
    ``str`` or ``bytes``, ``""``/``b""`` at the end (asyncio's and asyncssh's readers)."""

    def __init__(self, read: Callable[[int], Awaitable[str | bytes]], lines: int = 20) -> None:
        self._lines: deque[str] = deque(maxlen=lines)
        self._partial = ""
        self._task = asyncio.get_running_loop().create_task(self._read(read))

    async def _read(self, read: Callable[[int], Awaitable[str | bytes]]) -> None:
        while True:
            try:
                data = await read(65536)
            except Exception:  # noqa: BLE001 - a broken channel or pipe: the stream has ended
                data = ""
            if not data:
                if self._partial:
                    self._lines.append(self._partial)
                    self._partial = ""
                return
            text = self._partial + (data.decode(errors="replace") if isinstance(data, bytes) else data)
            *complete, self._partial = text.split("\n")
            self._lines.extend(line[:1000] for line in complete)
            self._partial = self._partial[-1000:]

    def text(self) -> str:
        """The kept lines, the unfinished last one included."""
        return "\n".join([*self._lines, *([self._partial] if self._partial else [])]).rstrip()

    async def finish(self, timeout_s: float = 2.0) -> None:
        """Wait (at most ``timeout_s``) for the rest of the stream, once the process has ended."""
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self._task)
        except TimeoutError:
            pass

    def cancel(self) -> None:
        self._task.cancel()


class Host(ABC):
    """A machine that runs engines; see the module docstring. Use as ``async with``.
    ``source``: the config file it was read from (set by :func:`core._hosts.open_host`)."""

    source = "the config file"

    def __init__(self, name: str, config: HostConfig, workdir: str) -> None:
        self.name = name
        self.config = config
        self.workdir = workdir.rstrip("/") or "/"
        self.commands_run = 0
        self._locks_held = 0  # while > 0, a lost SSH connection is not silently reopened

    @property
    @abstractmethod
    def is_local(self) -> bool:
        """Whether this is the machine specperf runs on."""

    @property
    def where(self) -> str:
        """How the host is reached, for reports (``local``, ``ssh root@gpu-a in pct exec 129 --``)."""
        return "local"

    @property
    def client_where(self) -> str:
        """Where a trial's benchmark client runs, worded for "the benchmark client runs ...":
        :data:`CLIENT_HERE` on the local host; over SSH :data:`CLIENT_TUNNEL` or, with
        ``client = "host"``, :data:`CLIENT_ON_HOST`."""
        return CLIENT_HERE

    async def __aenter__(self) -> Host:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self) -> None:
        """Release the connection (local: nothing)."""

    @abstractmethod
    async def run(self, argv: list[str], *, timeout_s: float = 300.0, cwd: str | None = None,
                  env: dict[str, str] | None = None, input: bytes | None = None) -> CommandResult:
        """Run ``argv`` to completion on the host.

        Args:
            timeout_s: seconds before the command's process group is stopped.
            cwd: working directory on the host; env: variables added to the host's environment.
            input: bytes fed to standard input (default: none, stdin closed).

        Raises:
            CommandTimeout: it ran past ``timeout_s`` (its process group is gone).
            HostError: the host cannot be reached or the connection was lost.
        """

    @abstractmethod
    async def spawn(self, argv: list[str], *, cwd: str | None = None,
                    env: dict[str, str] | None = None, stderr: bool = False) -> Spawned:
        """Start ``argv`` with pipes and leave it running. Standard error is discarded, or with
        ``stderr`` read as it comes and its last lines kept (:meth:`Spawned.stderr_tail`).
        Raises :class:`HostError`."""

    @abstractmethod
    def forward(self, port: int):
        """Async context manager yielding the base URL (``http://127.0.0.1:N``) at which this
        machine reaches TCP ``port`` of the engine on the host."""

    @abstractmethod
    def launch(self, name: str, argv: list[str], env: dict[str, str], log_path: str, cwd: str | None,
               grace_s: float):
        """Async context manager: start an engine in its own session and process group,
        yield its :class:`EngineHandle`, and stop the group (SIGTERM, ``grace_s``, SIGKILL)
        when the block ends, however it ends.

        Raises:
            EngineError: the program could not be started.
            HostError: the host cannot be reached.
        """

    def _result(self, argv: list[str], status: int, stdout: bytes, stderr: bytes, timeout_s: float) -> CommandResult:
        err = stderr.decode(errors="replace")
        if status == 124 and err.rstrip().endswith("specperf-agent: timed out"):
            raise CommandTimeout(f"{shlex.join(argv)[:200]} did not finish within {timeout_s:g} s on host "
                                 f"{self.name}; its process group was stopped")
        return CommandResult(argv, status, stdout.decode(errors="replace"), err)

    async def agent(self, *args: str, input: bytes | None = None, timeout_s: float = 60.0) -> CommandResult:
        """Run one mode of :mod:`core._hosts.agent` on the host with its ``python``.

        Raises:
            HostError: the helper failed (with its error output).
        """
        result = await self.run([self.config.python, "-c", AGENT_SOURCE, *args], input=input, timeout_s=timeout_s)
        if result.returncode != 0:
            raise HostError(f"specperf's helper ({args[0]}) failed on host {self.name} with status "
                            f"{result.returncode}: {result.stderr.strip()[-400:]}")
        return result

    async def listeners(self, port: int) -> list[dict]:
        """``[{"pid", "pgid", "user", "cmdline"}]`` of processes listening on ``port`` on the host."""
        return json.loads((await self.agent("listeners", str(port))).stdout)

    async def holders(self) -> list[dict]:
        """Processes holding the host's GPU device files (``device_paths``), each with
        ``pid``, ``pgid``, ``user``, ``cmdline``, ``devices`` and ``ours`` (an engine this tool
        started: its group leader writes into ``<workdir>/logs``)."""
        logs = f"{self.workdir}/logs"
        return json.loads((await self.agent("holders", logs, *self.config.device_paths)).stdout)

    async def describe(self, pids: list[int]) -> list[dict]:
        """``[{"pid", "pgid", "user", "cmdline", "start", "log", "ours"}]`` for those of ``pids``
        that exist on the host (``log``: where their group leader's output goes; ``ours``: that
        is in ``<workdir>/logs``)."""
        return json.loads((await self.agent("describe", f"{self.workdir}/logs", *map(str, pids))).stdout) if pids else []

    async def tree_groups(self, pid: int) -> list[int]:
        """The process group ids of ``pid`` and its descendants on the host (``[]``: it is gone)."""
        return json.loads((await self.agent("tree-groups", str(pid))).stdout)

    async def stop_recorded_group(self, pgid: int, log_path: str, grace_s: float = 15.0) -> bool:
        """Stop group ``pgid`` if its leader still writes to ``log_path`` (a group this tool
        started and recorded); whether it was stopped."""
        result = await self.agent("stop-recorded", str(pgid), log_path, f"{grace_s:g}", timeout_s=grace_s + 30)
        return json.loads(result.stdout)["stopped"]

    async def stop_pid(self, pid: int, start: int | None, grace_s: float = 15.0) -> bool:
        """SIGTERM ``pid`` on the host, wait ``grace_s``, SIGKILL (for ``--force-clean`` only);
        each signal only while the pid still belongs to the process that started at ``start``
        (clock ticks since boot, from :meth:`holders`)."""
        result = await self.agent("stop-pid", str(pid), "-" if start is None else str(start), f"{grace_s:g}",
                                  timeout_s=grace_s + 30)
        return json.loads(result.stdout)["stopped"]

    async def read_text(self, path: str, offset: int = 0, limit_bytes: int = 16 << 20) -> str:
        """The file's text from byte ``offset`` on, at most its last ``limit_bytes``."""
        result = await self.agent("read", path, str(offset), str(limit_bytes))
        return result.stdout

    async def file_size(self, path: str) -> int:
        """The file's size in bytes."""
        return json.loads((await self.agent("size", path)).stdout)

    async def write_file(self, path: str, data: bytes, *, private: bool = False) -> None:
        """Create or replace ``path`` on the host with ``data``; ``private``: readable and
        writable by the host's user only (mode 0600, also for a file that was there before;
        set before any byte is written).

        Raises:
            HostError: it could not be written.
        """
        argv = ["dd", f"of={path}", "status=none"]
        if private:  # the script is constant; the path is its one argument
            argv = ["sh", "-c", 'umask 077 && touch -- "$1" && chmod 600 -- "$1" && exec dd of="$1" status=none',
                    "sh", path]
        result = await self.run(argv, input=data)
        if result.returncode != 0:
            raise HostError(f"cannot write {path} on host {self.name}: {result.stderr.strip()}")

    async def makedirs(self, path: str) -> None:
        """``mkdir -p`` on the host. Raises :class:`HostError`."""
        result = await self.run(["mkdir", "-p", path])
        if result.returncode != 0:
            raise HostError(f"cannot create {path} on host {self.name}: {result.stderr.strip()}")

    @asynccontextmanager
    async def lock(self, owner: dict, *, wait: bool = True, on_wait: Callable[[str], None] | None = None,
                   poll_s: float = 2.0) -> AsyncIterator[None]:
        """Hold the host's experiment lock (one experiment per host at a time) for the block.

        The lock is ``flock`` on ``<workdir>/host.lock`` held by a process on the host that
        lives as long as its pipe: it is released when the block ends, when this process dies
        and when the connection drops, so a crash never leaves the host locked. ``owner``
        (who, what) is written beside it so a waiter can say who holds it.

        Args:
            wait: when the host is busy, wait (calling ``on_wait`` once with the holder) or,
                if false, raise at once.

        Raises:
            HostBusyError: busy and ``wait`` is false.
        """
        await self.makedirs(self.workdir)
        path = f"{self.workdir}/host.lock"
        told = False
        while True:
            proc = await self.spawn(["flock", "--nonblock", path, "sh", "-c", "echo specperf-locked; exec cat"])
            line = await proc.readline()
            while line and line.strip() != "specperf-locked":  # whatever a login shell printed first
                line = await proc.readline()
            if line:
                break
            proc.close()
            status = await proc.wait()
            if status != 1:  # flock's answer for "held by someone else"
                raise HostError(f"cannot take the lock of host {self.name}: flock {path} ended with status "
                                f"{status} (is util-linux's flock installed there, and {self.workdir} writable?)")
            holder = await self._lock_owner(path)
            message = f"host {self.name} is busy with another experiment ({holder})"
            if not wait:
                raise HostBusyError(f"{message}; try again later, or leave out --no-wait to wait for it")
            if not told and on_wait:
                on_wait(f"{message}; waiting for it to finish")
                told = True
            await asyncio.sleep(poll_s)
        self._locks_held += 1
        try:
            await self.write_file(f"{path}.owner", json.dumps({**owner, "since": time.time()}).encode())
            yield
        finally:
            self._locks_held -= 1
            proc.close()
            await proc.wait()

    async def _lock_owner(self, path: str) -> str:
        result = await self.run(["cat", f"{path}.owner"])
        try:
            owner = json.loads(result.stdout)
        except json.JSONDecodeError:
            return "holder unknown"
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(owner.pop("since", 0)))
        return ", ".join(f"{k} {v}" for k, v in owner.items()) + f", since {since}"


class EngineHandle(ABC):
    """A launched engine on a host: its argv, process group id and log path (on the host)."""

    argv: list[str]
    pgid: int
    log_path: str

    @property
    @abstractmethod
    def returncode(self) -> int | None:
        """The leader's exit status once it has exited, else ``None``.

        Raises:
            HostError: the connection to the host was lost (the engine was stopped there).
        """

    @abstractmethod
    async def log_size(self) -> int:
        """Bytes in the engine log so far."""

    @abstractmethod
    async def read_log(self, offset: int = 0) -> str:
        """The log text from byte ``offset`` on (at most its last 16 MiB)."""

    async def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the engine log ("" if it cannot be read), runs of lines
        that differ only in their digits collapsed (:func:`core._hosts.engine_log.collapsed`)."""
        try:
            size = await self.log_size()
            text = await self.read_log(max(0, size - (256 << 10)))
        except (OSError, HostError):
            return ""
        return "\n".join(collapsed(text).splitlines()[-lines:]).rstrip()

    @abstractmethod
    async def holds_port(self, port: int) -> bool | None:
        """Whether a process of this group listens on ``port``; ``None`` when unknown."""


