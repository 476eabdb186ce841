"""The fake host: this machine's git and files, a fixed environment snapshot, no GPU holders,
and each engine launch an in-process :class:`~core.testing.fake_engine.ExactRateServer` whose speed
a function of the launch decides (the way httpx ships ``MockTransport(handler)``), so the
compare and bisect logic runs in about a second with real worktrees, the real benchmark
client and the real statistics. Public as :mod:`core.testing`; nothing else in ``core``,
``storage`` or ``bot`` imports it."""

from __future__ import annotations

import asyncio
import json
import os
import posixpath
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from core._config import EngineConfig, HostConfig
from core._env.probe_script import SCHEMA
from core._hosts.base import CommandResult, EngineHandle
from core._hosts.local import LocalHost
from core.testing.fake_engine import ExactRateServer


@dataclass(frozen=True)
class FakeLaunch:
    """One engine launch on a :class:`FakeHost`: the commit SHA whose worktree it runs in
    (``None`` outside ``<workdir>/worktrees/``), the launch argv (mode arguments included) and
    its number on this host (from 1)."""

    sha: str | None
    argv: list[str]
    number: int

    def option(self, name: str, default: float) -> float:
        """The float after ``name`` in the argv (a mode argument such as ``--itl-scale``), else ``default``."""
        return float(self.argv[self.argv.index(name) + 1]) if name in self.argv else default


class _FakeEngine(EngineHandle):
    """A launch on a :class:`FakeHost`: a server in this process, or one that exited at start."""

    def __init__(self, argv: list[str], pgid: int, log_path: str, log: str, exited: int | None) -> None:
        self.argv, self.pgid, self.log_path = argv, pgid, log_path
        self._log = log.encode()
        self._exited = exited
        self.url: str | None = None

    @property
    def returncode(self) -> int | None:
        return self._exited

    async def log_size(self) -> int:
        return len(self._log)

    async def read_log(self, offset: int = 0) -> str:
        return self._log[offset:].decode()

    async def holds_port(self, port: int) -> bool | None:
        return self._exited is None


class FakeHost(LocalHost):
    """A host whose engines are in-process :class:`ExactRateServer` instances (see the module doc).

    Args:
        workdir: where worktrees and builds go (on this machine).
        itl_ms: the inter-token latency in ms of each launch, from its :class:`FakeLaunch`;
            ``None`` makes that launch exit with status 1 before it is ready (its log says
            ``fake engine: CUDA error: an illegal memory access was encountered``).
        ttft_ms: time to first token of every request, ms.
        name: the host's name in reports.

    ``launches`` lists every launch so far. Commands other than the engine's interpreter
    (git, file tests) run on this machine, directly (no helper process); the engine's
    interpreter (:attr:`PYTHON`) answers the environment probe with a fixed snapshot and the
    import check with "not importable", so use engines with no ``source_package``.
    Process group ids are above any real pid (``2**30 + n``): nothing can signal a real process.
    """

    PYTHON = "/fake-engine/bin/python"
    PGID_BASE = 1 << 30

    def __init__(self, workdir: str | Path, itl_ms: Callable[[FakeLaunch], float | None], *,
                 ttft_ms: float = 1.0, name: str = "fake") -> None:
        super().__init__(name, HostConfig(), str(workdir))
        self.itl_ms = itl_ms
        self.ttft_ms = ttft_ms
        self.launches: list[FakeLaunch] = []
        self._serving: _FakeEngine | None = None

    async def run(self, argv, *, timeout_s=300.0, cwd=None, env=None, input=None) -> CommandResult:
        if argv and argv[0] == self.PYTHON:
            self.commands_run += 1
            if argv[1:2] == ["-"]:  # the probe, always fed on standard input
                return CommandResult(list(argv), 0, json.dumps(self.snapshot("--cheap" in argv)), "")
            return CommandResult(list(argv), 1, "", "fake engine: nothing to import\n")
        # directly, without the helper that ties a command to its timeout (one interpreter
        # start-up less per git command)
        self.commands_run += 1
        if cwd and not os.path.isdir(cwd):
            return CommandResult(list(argv), 127, "", f"{cwd} (working directory): not found")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=cwd,
                env={**os.environ, **env} if env else None)
        except FileNotFoundError:
            return CommandResult(list(argv), 127, "", f"{argv[0]}: not found")
        async with asyncio.timeout(timeout_s):
            stdout, stderr = await proc.communicate(input)
        return CommandResult(list(argv), proc.returncode or 0, stdout.decode(errors="replace"),
                             stderr.decode(errors="replace"))

    def snapshot(self, cheap: bool) -> dict:
        """The fixed environment snapshot the probe answers here (same every time: no drift)."""
        return {"schema": SCHEMA, "kind": "cheap" if cheap else "full", "gpu": {"available": False,
                "reason": f"fake host {self.name}", "devices": []}, "software": {}, "system": {"hostname": self.name}}

    @asynccontextmanager
    async def launch(self, name, argv, env, log_path, cwd, grace_s) -> AsyncIterator[EngineHandle]:
        sha = posixpath.basename(cwd) if cwd and posixpath.dirname(cwd).endswith("/worktrees") else None
        launch = FakeLaunch(sha, list(argv), len(self.launches) + 1)
        self.launches.append(launch)
        itl_ms = self.itl_ms(launch)
        pgid = self.PGID_BASE + launch.number
        if itl_ms is None:
            log = "fake engine: CUDA error: an illegal memory access was encountered\n"
            yield _FakeEngine(list(argv), pgid, log_path, log, exited=1)
            return
        server = ExactRateServer(ttft_ms=self.ttft_ms, itl_ms=itl_ms, profile_dir=env.get(PROFILE_DIR_ENV))
        connections: set[asyncio.Task] = set()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None  # a connection is served in a task of its own
            connections.add(task)
            try:
                await server.handle(reader, writer)
            except asyncio.CancelledError:
                writer.close()
            finally:
                connections.discard(task)

        listener = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        handle = _FakeEngine(list(argv), pgid, log_path, f"fake engine: {itl_ms:g} ms per token on port {port}\n",
                             exited=None)
        handle.url = f"http://127.0.0.1:{port}"
        self._serving = handle
        try:
            yield handle
        finally:
            self._serving = None
            listener.close()
            for task in list(connections):  # idle keep-alive connections of the client
                task.cancel()
            await asyncio.gather(*connections, return_exceptions=True)
            await listener.wait_closed()

    @asynccontextmanager
    async def forward(self, port: int) -> AsyncIterator[str]:
        # the engine's configured port is not used: each fake engine listens on a free one
        yield self._serving.url if self._serving and self._serving.url else f"http://127.0.0.1:{port}"

    async def listeners(self, port: int) -> list[dict]:
        return []

    async def holders(self) -> list[dict]:
        return []

    async def describe(self, pids: list[int]) -> list[dict]:
        return []

    async def stop_recorded_group(self, pgid: int, log_path: str, grace_s: float = 15.0) -> bool:
        return False

    async def stop_pid(self, pid: int, start: int | None, grace_s: float = 15.0) -> bool:
        return False


PROFILE_DIR_ENV = "FAKE_ENGINE_PROFILE_DIR"  # a fake engine launched with it set answers the profiler endpoints


def fake_engine_config(repo: str | Path, modes: dict[str, list[str]] | None = None,
                       profiler: bool = False) -> EngineConfig:
    """An engine for a :class:`FakeHost`: kind ``command`` launched from worktrees of ``repo``
    (any git repository), modes ``baseline`` (no arguments) and ``eagle3`` (``--itl-scale 0.5``,
    read by the host's ``itl_ms`` through :meth:`FakeLaunch.option`) unless ``modes`` says;
    ``profiler``: it has vLLM's profiler endpoints (``profile_dir_env``, :class:`ExactRateServer`)."""
    return EngineConfig(
        kind="command", repo=str(repo), python=FakeHost.PYTHON,
        command=["{python}", "-m", "fake_engine", "--port", "{port}"], port=8000, ready_timeout_s=10, stop_grace_s=1,
        modes=modes if modes is not None else {"baseline": [], "eagle3": ["--itl-scale", "0.5"]},
        profile_dir_env=PROFILE_DIR_ENV if profiler else None,
    )
