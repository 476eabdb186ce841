"""The SSH host (asyncssh): a machine reached over SSH, optionally inside a container through
an exec prefix. Every command is an argv whose words (exec prefix first) are joined with
:func:`shlex.join`, so no user text reaches the remote shell unquoted.

- one connection per host, opened on first use and reused; at most 10 session channels at
  once (OpenSSH's default ``MaxSessions``); keepalives every 5 s, so a dead link is noticed
  within about 15 s;
- host keys are checked against ``known_hosts`` (a changed key is refused with a message
  that says so); key or agent authentication; a jump host through asyncssh's ``tunnel``;
- a command's timeout is enforced on the host by coreutils ``timeout``, which stops the
  command's whole process group (asyncssh's own timeout would leave it running);
- an engine runs under a supervisor (:mod:`core._hosts.agent`) tied to the SSH channel: when
  the channel closes (the connection dropped, specperf died) the supervisor stops the engine's
  group, and ``timeout`` kills it at the host's ``trial_deadline_s`` whatever happens.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from core._config import HostConfig
from core._errors import CommandTimeout, EngineError, HostError
from core._hosts.base import (
    AGENT_SOURCE,
    CLIENT_ON_HOST,
    CLIENT_TUNNEL,
    CommandResult,
    EngineHandle,
    Host,
    Spawned,
    StderrTail,
)

_MAX_SESSIONS = 10  # OpenSSH's default MaxSessions per connection


def _asyncssh():
    """asyncssh, imported on first use without the CryptographyDeprecationWarnings its import
    raises for DSA keys it still supports (ten lines before every command that opened an SSH
    host, issue 43); a warning specperf itself causes later still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*(?:DSA|TripleDES|Blowfish|CAST5|SEED|IDEA).*")
        import asyncssh
    return asyncssh


class _SshSpawned(Spawned):
    def __init__(self, process, sessions: asyncio.Semaphore, stderr: bool = False) -> None:
        self.process = process
        self._sessions = sessions
        self._released = False
        self._stderr = StderrTail(process.stderr.read) if stderr else None

    def stderr_tail(self) -> str:
        return self._stderr.text() if self._stderr else ""

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
            if self._stderr:
                await self._stderr.finish()
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
            async with asyncio.timeout(grace_s + 15):
                await self._stopped.wait()
        except TimeoutError:
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
    def client_where(self) -> str:
        return CLIENT_ON_HOST if self.config.client == "host" else CLIENT_TUNNEL

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
        asyncssh = _asyncssh()

        async with self._connecting:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            if self._conn is not None and self._locks_held:
                raise HostError(f"the connection to host {self.name} was lost, and with it the host lock this "
                                "experiment held; stopping here rather than run beside another experiment")
            cfg = self.config
            known_hosts = cfg.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
            if not os.path.isfile(known_hosts):
                raise HostError(f"{self._known_hosts_key()}: {known_hosts} does not exist; {self._add_key(known_hosts)}")
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
                    raise HostError(f"{self._known_hosts_key()}: {known_hosts} has no key for {self.address}:{cfg.port} "
                                    f"(host {self.name}); "
                                    f"{self._add_key(known_hosts)}; specperf never skips the check") from None
                entry = self.address if cfg.port == 22 else f"[{self.address}]:{cfg.port}"
                raise HostError(
                    f"{self._known_hosts_key()}: the host key of {self.address}:{cfg.port} is not the one in "
                    f"{known_hosts}: it changed or this is another machine ({exc}). If the change is expected, "
                    f"remove the old key ({shlex.join(['ssh-keygen', '-R', entry, '-f', known_hosts])}) and "
                    f"{self._add_key(known_hosts)}; specperf never skips the check") from None
            except asyncssh.PermissionDenied:
                raise HostError(f"SSH authentication to {cfg.ssh} (host {self.name}) failed: set "
                                "identity_file or load the key into ssh-agent") from None
            except (TimeoutError, OSError, asyncssh.Error) as exc:
                via = f" through the jump host {cfg.jump}" if cfg.jump else ""
                raise HostError(f"cannot reach host {self.name} ({cfg.ssh}:{cfg.port}){via}: "
                                f"{_why(exc)}; check the address, port and network") from None
            return self._conn

    def _known_hosts_key(self) -> str:
        """Where the host-key file is set: the config file and key, for errors about it."""
        return f"{self.source}: hosts.{self.name}.known_hosts"

    def _add_key(self, known_hosts: str) -> str:
        """What to do when ``known_hosts`` lacks this host's key: the command to run, or the key
        to change."""
        scan = f"ssh-keyscan -p {self.config.port} {shlex.quote(self.address)} >> {shlex.quote(known_hosts)}"
        return (f"add the host's key ({scan}, after checking its fingerprint with ssh-keygen -lf), or set "
                f"hosts.{self.name}.known_hosts in {self.source} to a file that has it")

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
        asyncssh = _asyncssh()

        conn = await self.connection()
        command = self._command(argv, cwd, env, timeout_s)
        self.commands_run += 1
        async with self._sessions:
            try:
                process = await conn.create_process(command, encoding=None)
            except (OSError, asyncssh.Error) as exc:
                raise HostError(f"cannot run {argv[0]} on host {self.name}: {_why(exc)}") from None
            try:
                async with asyncio.timeout(timeout_s + 15):
                    stdout, stderr = await process.communicate(input)
                status = (await process.wait(check=False)).exit_status
            except TimeoutError:
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

    async def spawn(self, argv, *, cwd=None, env=None, stderr=False) -> Spawned:
        asyncssh = _asyncssh()

        conn = await self.connection()
        self.commands_run += 1
        await self._sessions.acquire()
        try:
            process = await conn.create_process(self._command(argv, cwd, env),
                                                stderr=asyncssh.PIPE if stderr else asyncssh.DEVNULL)
        except (OSError, asyncssh.Error) as exc:
            self._sessions.release()
            raise HostError(f"cannot start {argv[0]} on host {self.name}: {exc}") from None
        return _SshSpawned(process, self._sessions, stderr)

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
