"""The local host: the machine specperf runs on; commands run under the helper
(:mod:`core._hosts.agent`) as child processes, engines in their own session."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from core._errors import HostError
from core._hosts import agent as _host_agent
from core._hosts.base import AGENT_SOURCE, CommandResult, EngineHandle, Host, Spawned, StderrTail
from core._hosts.process import EngineProcess, launched


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
        self._stderr = StderrTail(proc.stderr.read) if proc.stderr is not None else None

    def stderr_tail(self) -> str:
        return self._stderr.text() if self._stderr else ""

    async def readline(self) -> str:
        return (await self.proc.stdout.readline()).decode(errors="replace")

    def write(self, text: str) -> None:
        if not self.proc.stdin.is_closing():
            self.proc.stdin.write(text.encode())

    def close(self) -> None:
        if not self.proc.stdin.is_closing():
            self.proc.stdin.close()

    async def wait(self) -> int | None:
        status = await self.proc.wait()
        if self._stderr:
            await self._stderr.finish()
        return status


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
            with contextlib.suppress(ProcessLookupError):  # it may have ended already: the cancel still stands
                proc.terminate()  # the helper stops the command's group
            await proc.wait()
            raise
        return self._result(argv, proc.returncode, stdout, stderr, timeout_s)

    async def spawn(self, argv, *, cwd=None, env=None, stderr=False) -> Spawned:
        self.commands_run += 1
        try:  # its own session: a Ctrl-C at the terminal must not end a lock holder early
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE if stderr else asyncio.subprocess.DEVNULL, cwd=cwd,
                env=_merged_env(env), start_new_session=True, limit=1 << 24)
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

    async def tree_groups(self, pid: int) -> list[int]:
        return await asyncio.to_thread(_host_agent.tree_groups, pid)

    async def stop_recorded_group(self, pgid: int, log_path: str, grace_s: float = 15.0) -> bool:
        return await asyncio.to_thread(_host_agent.stop_recorded_group, pgid, log_path, grace_s)

    async def stop_pid(self, pid: int, start: int | None, grace_s: float = 15.0) -> bool:
        return await asyncio.to_thread(_host_agent.stop_pid, pid, grace_s, start)
