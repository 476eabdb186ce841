"""Hosts: the machine an engine runs on, local or over SSH (asyncssh), behind one interface.

A :class:`Host` runs commands with a timeout, starts long-running processes, reads and
writes files, stops process groups, forwards the engine's port, and holds the host lock.
Everything is an argv list: over SSH the words (exec prefix first) are joined with
:func:`shlex.join`, so no user text reaches the remote shell unquoted.

Over SSH:

- one connection per host, opened on first use and reused; at most 10 session channels at
  once (OpenSSH's default ``MaxSessions``); keepalives every 5 s, so a dead link is noticed
  within about 15 s;
- host keys are checked against ``known_hosts`` (a changed key is refused with a message
  that says so); key or agent authentication; a jump host through asyncssh's ``tunnel``;
- a command's timeout is enforced on the host by coreutils ``timeout``, which stops the
  command's whole process group (asyncssh's own timeout would leave it running);
- an engine runs under a supervisor (:mod:`core._host_agent`) tied to the SSH channel: when
  the channel closes (the connection dropped, specperf died) the supervisor stops the engine's
  group, and ``timeout`` kills it at the host's ``trial_deadline_s`` whatever happens.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from core import _host_agent
from core._config import HostConfig
from core._errors import CommandTimeout, EngineError, HostBusyError, HostError
from core._process import EngineProcess, launched

AGENT_SOURCE = Path(_host_agent.__file__).read_text()
_MAX_SESSIONS = 10  # OpenSSH's default MaxSessions per connection


@dataclass
class CommandResult:
    """A finished command: ``returncode`` (127: program not found), decoded output."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


class Spawned(ABC):
    """A long-running process on a host with line-oriented pipes."""

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


class Host(ABC):
    """A machine that runs engines; see the module docstring. Use as ``async with``."""

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
                    env: dict[str, str] | None = None) -> Spawned:
        """Start ``argv`` with pipes and leave it running. Raises :class:`HostError`."""

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
        """Run one mode of :mod:`core._host_agent` on the host with its ``python``.

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

    async def write_file(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` on the host with ``data``.

        Raises:
            HostError: it could not be written.
        """
        result = await self.run(["dd", f"of={path}", "status=none"], input=data)
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
        """The last ``lines`` lines of the engine log ("" if it cannot be read)."""
        try:
            size = await self.log_size()
            text = await self.read_log(max(0, size - (256 << 10)))
        except (OSError, HostError):
            return ""
        return "\n".join(text.splitlines()[-lines:]).rstrip()

    @abstractmethod
    async def holds_port(self, port: int) -> bool | None:
        """Whether a process of this group listens on ``port``; ``None`` when unknown."""


class _LocalEngine(EngineHandle):
    def __init__(self, process: EngineProcess) -> None:
        self.process = process
        self.argv = process.argv
        self.pgid = process.pgid
        self.log_path = str(process.log_path)

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def log_size(self) -> int:
        return self.process.log_size()

    async def read_log(self, offset: int = 0) -> str:
        return self.process.read_log(offset)

    async def holds_port(self, port: int) -> bool | None:
        return self.process.holds_port(port)


class _LocalSpawned(Spawned):
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def readline(self) -> str:
        return (await self.proc.stdout.readline()).decode(errors="replace")

    def write(self, text: str) -> None:
        if not self.proc.stdin.is_closing():
            self.proc.stdin.write(text.encode())

    def close(self) -> None:
        if not self.proc.stdin.is_closing():
            self.proc.stdin.close()

    async def wait(self) -> int | None:
        return await self.proc.wait()


def _merged_env(env: dict[str, str] | None) -> dict[str, str] | None:
    return {**os.environ, **env} if env else None


class LocalHost(Host):
    """The machine specperf runs on."""

    @property
    def is_local(self) -> bool:
        return True

    async def run(self, argv, *, timeout_s=300.0, cwd=None, env=None, input=None) -> CommandResult:
        self.commands_run += 1
        if cwd and not os.path.isdir(cwd):
            return CommandResult(argv, 127, "", f"{cwd} (working directory): not found")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", AGENT_SOURCE, "run", f"{timeout_s:g}", *argv,
            stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=cwd, env=_merged_env(env),
            start_new_session=True)
        try:
            stdout, stderr = await proc.communicate(input)
        except asyncio.CancelledError:
            proc.terminate()  # the helper stops the command's group
            await proc.wait()
            raise
        return self._result(argv, proc.returncode, stdout, stderr, timeout_s)

    async def spawn(self, argv, *, cwd=None, env=None) -> Spawned:
        self.commands_run += 1
        try:  # its own session: a Ctrl-C at the terminal must not end a lock holder early
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, cwd=cwd, env=_merged_env(env), start_new_session=True)
        except OSError as exc:
            raise HostError(f"cannot start {argv[0]} on host {self.name}: {exc.strerror}") from None
        return _LocalSpawned(proc)

    @asynccontextmanager
    async def forward(self, port: int) -> AsyncIterator[str]:
        yield f"http://{self.config.engine_address}:{port}"

    @asynccontextmanager
    async def launch(self, name, argv, env, log_path, cwd, grace_s) -> AsyncIterator[EngineHandle]:
        with launched(name, argv, env, Path(log_path), cwd, grace_s) as process:
            yield _LocalEngine(process)

    # The helper's modes run in this process: the same functions, no interpreter start-up.
    async def listeners(self, port: int) -> list[dict]:
        pids = await asyncio.to_thread(_host_agent.listening_pids, port)
        return [info for info in map(_host_agent._describe, sorted(pids)) if info]

    async def holders(self) -> list[dict]:
        return await asyncio.to_thread(_host_agent.device_holders, f"{self.workdir}/logs", self.config.device_paths)

    async def describe(self, pids: list[int]) -> list[dict]:
        return [info for info in (_host_agent.describe(f"{self.workdir}/logs", pid) for pid in pids) if info]

    async def stop_recorded_group(self, pgid: int, log_path: str, grace_s: float = 15.0) -> bool:
        return await asyncio.to_thread(_host_agent.stop_recorded_group, pgid, log_path, grace_s)

    async def stop_pid(self, pid: int, start: int | None, grace_s: float = 15.0) -> bool:
        return await asyncio.to_thread(_host_agent.stop_pid, pid, grace_s, start)


class _SshSpawned(Spawned):
    def __init__(self, process, sessions: asyncio.Semaphore) -> None:
        self.process = process
        self._sessions = sessions
        self._released = False

    async def readline(self) -> str:
        try:
            return await self.process.stdout.readline()
        except Exception:  # noqa: BLE001 - asyncssh raises its own errors on a broken channel
            return ""

    def write(self, text: str) -> None:
        try:
            self.process.stdin.write(text)
        except Exception:  # noqa: BLE001 - a closed channel: the supervisor stops by itself
            pass

    def close(self) -> None:
        try:
            self.process.stdin.write_eof()
        except Exception:  # noqa: BLE001
            pass
        self.process.close()
        if not self._released:
            self._released = True
            self._sessions.release()

    async def wait(self) -> int | None:
        try:
            completed = await self.process.wait(check=False)
        except Exception:  # noqa: BLE001 - the link is gone: status unknown
            return None
        finally:
            if not self._released:
                self._released = True
                self._sessions.release()
        return completed.exit_status


class _SshEngine(EngineHandle):
    """An engine under the host agent's supervisor; its output lines give pgid and exit."""

    def __init__(self, host: SshHost, supervisor: _SshSpawned, argv: list[str], pgid: int, log_path: str) -> None:
        self.host = host
        self.argv = argv
        self.supervisor = supervisor
        self.pgid = pgid
        self.log_path = log_path
        self._exit: int | None = None
        self._stopped = asyncio.Event()
        self._lost = False
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            line = await self.supervisor.readline()
            if not line:
                if not self._stopped.is_set():
                    self._lost = True
                self._stopped.set()
                return
            doc = json.loads(line)
            if "exit" in doc and doc["exit"] is not None:
                self._exit = doc["exit"]
            if doc.get("stopped") is not None:
                self._stopped.set()

    @property
    def returncode(self) -> int | None:
        if self._lost:
            raise HostError(f"the connection to host {self.host.name} was lost; the engine (process group "
                            f"{self.pgid}) is stopped there by its supervisor")
        return self._exit

    async def log_size(self) -> int:
        return await self.host.file_size(self.log_path)

    async def read_log(self, offset: int = 0) -> str:
        return await self.host.read_text(self.log_path, offset)

    async def holds_port(self, port: int) -> bool | None:
        found = await self.host.listeners(port)
        if not found:
            return None
        return any(info["pgid"] == self.pgid for info in found)

    async def stop(self, grace_s: float) -> None:
        self.supervisor.write("stop\n")
        try:
            await asyncio.wait_for(self._stopped.wait(), grace_s + 15)
        except asyncio.TimeoutError:
            pass  # closing the channel below makes the supervisor stop the group by itself
        finally:
            self.supervisor.close()
            self._reader.cancel()


class SshHost(Host):
    """A host reached over SSH (asyncssh); see the module docstring."""

    def __init__(self, name: str, config: HostConfig, workdir: str) -> None:
        super().__init__(name, config, workdir)
        user, _, address = config.ssh.rpartition("@")
        self.user = user or None
        self.address = address
        self._conn = None
        self._connecting = asyncio.Lock()
        self._sessions = asyncio.Semaphore(_MAX_SESSIONS)

    @property
    def is_local(self) -> bool:
        return False

    @property
    def where(self) -> str:
        prefix = f" in {shlex.join(self.config.exec_prefix)}" if self.config.exec_prefix else ""
        return f"ssh {self.config.ssh}:{self.config.port}{prefix}"

    async def connection(self):
        """The host's one SSH connection, opened on first use and reused.

        Raises:
            HostError: unreachable, refused, a host key that does not match known_hosts, or
                failed authentication; each with what to do.
        """
        import asyncssh

        async with self._connecting:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            if self._conn is not None and self._locks_held:
                raise HostError(f"the connection to host {self.name} was lost, and with it the host lock this "
                                "experiment held; stopping here rather than run beside another experiment")
            cfg = self.config
            known_hosts = cfg.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
            if not os.path.isfile(known_hosts):
                raise HostError(f"hosts.{self.name}.known_hosts: {known_hosts} does not exist; add the host's key "
                                f"(ssh-keyscan -p {cfg.port} {self.address} >> {known_hosts}, after checking its "
                                "fingerprint) or point known_hosts at a file that has it")
            options = dict(port=cfg.port, connect_timeout=cfg.connect_timeout_s, keepalive_interval=5,
                           keepalive_count_max=3, known_hosts=known_hosts)
            if self.user:
                options["username"] = self.user
            if cfg.identity_file:
                try:
                    options["client_keys"] = [asyncssh.read_private_key(cfg.identity_file)]
                except (OSError, asyncssh.KeyImportError) as exc:
                    raise HostError(f"hosts.{self.name}.identity_file: cannot use {cfg.identity_file} as an SSH "
                                    f"private key ({_why(exc)}); give an unencrypted key, or leave identity_file "
                                    "out and load the key into ssh-agent") from None
            if cfg.jump:
                options["tunnel"] = cfg.jump
            try:
                self._conn = await asyncssh.connect(self.address, **options)
            except asyncssh.HostKeyNotVerifiable as exc:
                if not _knows(known_hosts, self.address, cfg.port):
                    raise HostError(
                        f"{known_hosts} has no key for {self.address}:{cfg.port} (host {self.name}); add it "
                        f"(ssh-keyscan -p {cfg.port} {self.address} >> {known_hosts}, after checking its "
                        "fingerprint); specperf never skips the check") from None
                raise HostError(
                    f"host key of {self.address}:{cfg.port} (host {self.name}) is not the one in "
                    f"{known_hosts}: it changed or this is another machine ({exc}). "
                    "If the change is expected, remove the old key (ssh-keygen -R) and add the new one; "
                    "specperf never skips the check") from None
            except asyncssh.PermissionDenied:
                raise HostError(f"SSH authentication to {cfg.ssh} (host {self.name}) failed: set "
                                "identity_file or load the key into ssh-agent") from None
            except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
                via = f" through the jump host {cfg.jump}" if cfg.jump else ""
                raise HostError(f"cannot reach host {self.name} ({cfg.ssh}:{cfg.port}){via}: "
                                f"{_why(exc)}; check the address, port and network") from None
            return self._conn

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            await self._conn.wait_closed()
            self._conn = None

    def _command(self, argv: list[str], cwd: str | None, env: dict[str, str] | None,
                 timeout_s: float | None = None) -> str:
        words = list(self.config.exec_prefix)
        if timeout_s is not None:  # tied to the channel and the timeout by the helper
            words += [self.config.python, "-c", AGENT_SOURCE, "run", f"{timeout_s:g}"]
        if cwd or env:
            words += ["env", *(["-C", cwd] if cwd else []), *(f"{k}={v}" for k, v in (env or {}).items())]
        return shlex.join(words + list(argv))

    async def run(self, argv, *, timeout_s=300.0, cwd=None, env=None, input=None) -> CommandResult:
        import asyncssh

        conn = await self.connection()
        command = self._command(argv, cwd, env, timeout_s)
        self.commands_run += 1
        async with self._sessions:
            try:
                process = await conn.create_process(command, encoding=None)
            except (OSError, asyncssh.Error) as exc:
                raise HostError(f"cannot run {argv[0]} on host {self.name}: {_why(exc)}") from None
            try:
                stdout, stderr = await asyncio.wait_for(process.communicate(input), timeout_s + 15)
                status = (await process.wait(check=False)).exit_status
            except asyncio.TimeoutError:
                raise CommandTimeout(f"{shlex.join(argv)[:200]} did not answer within {timeout_s:g} s on "
                                     f"host {self.name}") from None
            except (OSError, asyncssh.Error) as exc:
                raise HostError(f"the connection to host {self.name} was lost while running "
                                f"{argv[0]}: {_why(exc)}") from None
            finally:
                process.close()  # on cancellation too: the helper then stops the command's group
        if status is None:
            raise HostError(f"{argv[0]} on host {self.name} ended without a status: the connection to the host "
                            "was lost (the command's process group is stopped there)")
        return self._result(argv, status, stdout or b"", stderr or b"", timeout_s)

    async def spawn(self, argv, *, cwd=None, env=None) -> Spawned:
        import asyncssh

        conn = await self.connection()
        self.commands_run += 1
        await self._sessions.acquire()
        try:
            process = await conn.create_process(self._command(argv, cwd, env), stderr=asyncssh.DEVNULL)
        except (OSError, asyncssh.Error) as exc:
            self._sessions.release()
            raise HostError(f"cannot start {argv[0]} on host {self.name}: {exc}") from None
        return _SshSpawned(process, self._sessions)

    @asynccontextmanager
    async def forward(self, port: int) -> AsyncIterator[str]:
        conn = await self.connection()
        listener = await conn.forward_local_port("127.0.0.1", 0, self.config.engine_address, port)
        try:
            yield f"http://127.0.0.1:{listener.get_port()}"
        finally:
            listener.close()

    @asynccontextmanager
    async def launch(self, name, argv, env, log_path, cwd, grace_s) -> AsyncIterator[EngineHandle]:
        spec = {"argv": argv, "env": env, "cwd": cwd, "log_path": log_path, "grace_s": grace_s,
                "deadline_s": self.config.trial_deadline_s}
        supervisor = await self.spawn([self.config.python, "-c", AGENT_SOURCE, "supervise", json.dumps(spec)])
        try:
            first = await supervisor.readline()
            doc = json.loads(first) if first.strip() else {"error": "the helper printed nothing"}
            if "pgid" not in doc:
                raise EngineError(f"cannot start engine {name!r} on host {self.name}: {doc.get('error')}")
        except BaseException:
            supervisor.close()
            raise
        engine = _SshEngine(self, supervisor, argv, doc["pgid"], log_path)
        try:
            yield engine
        finally:
            await engine.stop(grace_s)


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _knows(known_hosts: str, address: str, port: int) -> bool:
    """Whether ``known_hosts`` has any line for ``address`` (``[address]:port`` off port 22;
    hashed entries count as known)."""
    name = address if port == 22 else f"[{address}]:{port}"
    with open(known_hosts) as fh:
        for line in fh:
            hosts = line.split(" ", 1)[0].split(",")
            if name in hosts or any(h.startswith("|1|") for h in hosts):
                return True
    return False


def open_host(name: str, config: HostConfig, local_workdir: Path) -> Host:
    """The :class:`Host` for ``[hosts.<name>]``: SSH when ``ssh`` is set, else local.

    ``local_workdir`` (the data directory) is the local host's default work directory; an
    SSH host's default is ``/var/tmp/specperf``. Nothing connects until first use.
    """
    if config.ssh:
        return SshHost(name, config, config.workdir or "/var/tmp/specperf")
    return LocalHost(name, config, config.workdir or str(local_workdir))

