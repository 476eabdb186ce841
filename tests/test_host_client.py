"""The benchmark client on the engine's host (``[hosts.<name>] client = "host"``, core/_measure/host_client/__init__.py).

Fast tier: the config rules, the JSON-line protocol of the host side (:func:`serve`) against
an in-process exact-rate server, the driver (:func:`run_on_host`) talking to that same host
side in-process, and the driver's errors from scripted output. SSH tier (the real loopback
sshd): a compare whose measured requests are sent from the host, and a client killed there
mid-trial."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path

import pytest

import core
import storage
from core._experiments.compare import CompareRequest, compare, resolve_refs
from core._experiments.stats import INCONCLUSIVE, REGRESSION
from core._hosts import SshHost, open_host
from core._hosts.base import Spawned
from core._measure.client import RequestRecord, run_workload, workload_prompts
from core._measure.host_client import PROTOCOL, run_on_host, serve
from core._measure.trial import measure
from core.testing import ExactRateServer
from tests.conftest import ROOT, group_members
from tests.fake_engine_repo import fake_engine, make_repo
from tests.test_hosts import wait_until

WORKLOAD = core.WorkloadConfig(output_len=16, concurrency=2, requests=6, warmup_requests=2)
SSH = 'ssh = "root@gpu-a"\n'


# --- configuration ----------------------------------------------------------------------------


def test_client_host_needs_client_python_and_an_ssh_host(monkeypatch):
    with pytest.raises(core.ConfigError, match=r"hosts\.gpu\.client_python is required with client = \"host\""):
        core.parse_config(f'[hosts.gpu]\n{SSH}client = "host"\n', "specperf.toml")
    with pytest.raises(core.ConfigError, match='client = "host" is for SSH hosts: on a local host'):
        core.parse_config('[hosts.box]\nclient = "host"\nclient_python = "/usr/bin/python3"\n')
    with pytest.raises(core.ConfigError, match='client = "host" is for SSH hosts: on a slurm host .* on the Slurm node'):
        core.parse_config('[hosts.c]\nkind = "slurm"\nworkdir = "/s"\nclient = "host"\nclient_python = "/p"\n')
    with pytest.raises(core.ConfigError, match=r"hosts\.gpu\.client"):
        core.parse_config(f'[hosts.gpu]\n{SSH}client = "there"\n')
    monkeypatch.setenv("VENV", "/opt/specperf")
    config = core.parse_config(f'[hosts.gpu]\n{SSH}client = "host"\nclient_python = "${{VENV}}/bin/python"\n'
                               '[hosts.tunnel]\nssh = "root@gpu-b"\n', "specperf.toml")
    assert config.hosts["gpu"].client_python == "/opt/specperf/bin/python"
    assert config.hosts["tunnel"].client == "here"  # the default, as before
    gpu = open_host("gpu", config.hosts["gpu"], Path("/tmp"))
    assert gpu.client_where == "on the host, beside the engine"
    assert open_host("tunnel", config.hosts["tunnel"], Path("/tmp")).client_where == "here, through an SSH tunnel"
    assert open_host("local", config.hosts["local"], Path("/tmp")).client_where == "here"


def test_the_run_and_its_reports_say_the_client_ran_on_the_host(tmp_path):
    from rich.console import Console

    from bot._slack.blocks import verdict_blocks
    from bot.cli.tables import print_report

    config = core.HostConfig(ssh="root@gpu-a", client="host", client_python="/opt/specperf/bin/python")
    request = CompareRequest(
        engine_name="e", engine=core.EngineConfig(kind="command", command=["serve"]), workload_name="w",
        workload=WORKLOAD, head_ref="abc", base_ref="base", modes=["baseline"], settings=core.CompareConfig(),
        host=open_host("gpu", config, tmp_path))
    db = storage.open_database(f"sqlite:///{tmp_path}/db.sqlite")
    stored = storage.load_run(db, storage.RunStore(db).create(request, "1" * 40, "2" * 40))
    assert stored.run.settings["client"] == "on the host, beside the engine"
    report = {"modes": {}, "speedups": {}, "client": stored.run.settings["client"]}
    context = str(verdict_blocks(stored, report)[-1])
    assert "benchmark client on the host, beside the engine" in context
    console = Console(record=True, width=200)
    print_report(console, report, "run 1")
    assert "benchmark client: on the host, beside the engine" in console.export_text()


# --- the protocol, in process -----------------------------------------------------------------


@asynccontextmanager
async def exact_rate(**options):
    """An in-process exact-rate server: (server, base URL)."""
    server = ExactRateServer(**{"ttft_ms": 2.0, "itl_ms": 1.0, **options})
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    try:
        yield server, f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    finally:
        listener.close()


def spec(base_url: str, workload: core.WorkloadConfig = WORKLOAD, **extra) -> str:
    measured, warm = workload_prompts(workload)
    prompts = {"measured": [asdict(p) for p in measured], "warmup": [asdict(p) for p in warm]}
    return json.dumps({"protocol": PROTOCOL, "base_url": base_url, "model": "m", "workload": workload.model_dump(),
                       "length_method": "ignore_eos", "avoid_cpus": None, "prompts": prompts, **extra}) + "\n"


class InProcess(Spawned):
    """The host side (:func:`serve`) in this process, behind the :class:`Spawned` interface."""

    def __init__(self) -> None:
        self.stdin: asyncio.Queue[str] = asyncio.Queue()
        self.stdout: asyncio.Queue[str] = asyncio.Queue()
        self.written: list[str] = []
        self.closed = False
        self.task = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> int:
        try:
            return await serve(self.stdin.get, self.stdout.put_nowait)
        finally:
            self.stdout.put_nowait("")

    async def readline(self) -> str:
        return await self.stdout.get()

    def write(self, text: str) -> None:
        self.written.append(text)
        for line in text.splitlines(keepends=True):
            self.stdin.put_nowait(line)

    def close(self) -> None:
        self.closed = True
        self.stdin.put_nowait("")

    async def wait(self) -> int | None:
        return await self.task


class Scripted(Spawned):
    """A client that prints ``lines``, then ends with ``status`` (``None``: the link was lost)."""

    def __init__(self, lines: list[str], status: int | None, stderr: str = "") -> None:
        self.lines, self.status, self.err = list(lines), status, stderr
        self.closed = False

    async def readline(self) -> str:
        return self.lines.pop(0) + "\n" if self.lines else ""

    def write(self, text: str) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    async def wait(self) -> int | None:
        return self.status

    def stderr_tail(self) -> str:
        return self.err


class Box:
    """Just enough of an SSH host with ``client = "host"`` for the driver: ``spawn`` hands out
    ``make()`` and records the argv."""

    def __init__(self, make, client_python: str | None = "/opt/specperf/bin/python") -> None:
        self.name = "box"
        self.config = core.HostConfig(ssh="root@box", client="host", client_python=client_python)
        self.make, self.spawned, self.argv = make, [], None

    async def spawn(self, argv, *, cwd=None, env=None, stderr=False):
        assert stderr  # the driver always keeps the client's standard error for its messages
        self.argv = argv
        self.spawned.append(self.make())
        return self.spawned[-1]


async def test_the_host_side_speaks_the_protocol_line_by_line():
    async with exact_rate() as (server, url):
        proc = InProcess()
        proc.write(spec(url))
        lines = []
        while (line := await proc.readline()) != "":
            doc = json.loads(line)
            assert len(doc) == 1
            lines.append(doc)
            if "warm" in doc:
                assert len(server.records) == WORKLOAD.warmup_requests  # the warm-up is done, nothing measured yet
                proc.write("go\n")
        assert await proc.wait() == 0
    keys = [next(iter(doc)) for doc in lines]
    assert keys == ["hello", "warm"] + ["done"] * WORKLOAD.requests + ["sample"]
    hello = lines[0]["hello"]
    assert hello["protocol"] == PROTOCOL and hello["pid"] == os.getpid() and hello["python"] == sys.executable
    records = [RequestRecord(**doc["done"]) for doc in lines if "done" in doc]
    assert sorted(r.index for r in records) == list(range(WORKLOAD.requests))
    assert all(r.output_tokens == 16 and len(r.itl_ms) == 15 and r.invalid_reason is None for r in records)
    window = lines[-1]["sample"]
    assert window["requests"] == WORKLOAD.requests
    assert window["window_start_s"] == min(r.start_s for r in records)
    assert window["window_end_s"] == max(r.end_s for r in records)


async def test_the_host_side_refuses_a_bad_spec_and_leaves_when_its_caller_does():
    proc = InProcess()
    proc.write(json.dumps({"protocol": PROTOCOL + 1}) + "\n")
    assert "hello" in json.loads(await proc.readline())
    assert "protocol" in json.loads(await proc.readline())["error"]
    assert await proc.wait() == 2
    proc = InProcess()
    proc.write(spec("http://127.0.0.1:1", workload=WORKLOAD.model_copy(update={"concurrency": 0})))
    await proc.readline()
    assert "concurrency" in json.loads(await proc.readline())["error"]
    assert await proc.wait() == 2
    async with exact_rate() as (_, url):
        proc = InProcess()
        proc.write(spec(url))
        await proc.readline()
        assert "warm" in json.loads(await proc.readline())
        proc.close()  # standard input ends before "go": specperf is gone
        assert await proc.wait() == 3


async def test_the_driver_measures_through_the_host_side():
    events: list[str] = []
    done: list[RequestRecord] = []
    async with exact_rate() as (server, url):
        box = Box(InProcess)

        async def started(hello: dict) -> None:
            events.append(f"started {hello['pid']}")

        async def begin() -> None:
            events.append(f"begin after {len(server.records)} requests")
            server.records.clear()

        sample = await run_on_host(box, url, "m", WORKLOAD, on_started=started, on_measure_start=begin,
                                   on_request_done=done.append)
        truth = list(server.records)
    assert events == [f"started {os.getpid()}", f"begin after {WORKLOAD.warmup_requests} requests"]
    # the host helper runs the client, tied to the channel and the host's trial deadline
    assert box.argv[:2] == ["python3", "-c"] and box.argv[3:] == [
        "run", "7200", "/opt/specperf/bin/python", "-m", "core._measure.host_client"]
    assert box.spawned[0].closed and await box.spawned[0].wait() == 0
    assert sample.valid and [r.index for r in sample.requests] == list(range(WORKLOAD.requests))
    assert sorted(r.index for r in done) == list(range(WORKLOAD.requests))
    assert sample.measured_by == {"where": "host", "host": "box", "hostname": socket.gethostname(), "pid": os.getpid(),
                                  "python": sys.executable}
    assert sample.output_tokens == sum(t["tokens"] for t in truth) == 16 * WORKLOAD.requests


async def test_a_failed_warm_up_on_the_host_is_the_invalid_sample_error_of_a_local_one():
    async with exact_rate(truncate_at=4) as (_, url):
        with pytest.raises(core.InvalidSampleError) as local:
            await run_workload(url, "m", WORKLOAD)
        with pytest.raises(core.InvalidSampleError) as remote:
            await run_on_host(Box(InProcess), url, "m", WORKLOAD)
    assert str(remote.value) == str(local.value)
    assert "returned 4 of 16 tokens" in str(remote.value)
    assert len(remote.value.sample.requests) == WORKLOAD.warmup_requests


async def test_a_truncated_measured_request_comes_back_as_an_invalid_sample():
    async with exact_rate(truncate_at=4) as (_, url):
        sample = await run_on_host(Box(InProcess), url, "m", WORKLOAD.model_copy(update={"warmup_requests": 0}))
    assert not sample.valid and len(sample.invalid_reasons) == WORKLOAD.requests
    with pytest.raises(core.InvalidSampleError, match="returned 4 of 16 tokens"):
        sample.raise_if_invalid()


HELLO = json.dumps({"hello": {"protocol": PROTOCOL, "pid": 4242, "ppid": 4241, "hostname": "box", "python": "/p"}})
WARM = json.dumps({"warm": {"requests": 2}})
DONE = json.dumps({"done": {"index": 0, "start_s": 1.0, "end_s": 2.0, "ttft_ms": 5.0, "itl_ms": [1.0],
                            "output_tokens": 2, "expected_tokens": 2}})


@pytest.mark.parametrize(("lines", "status", "message"), [
    ([HELLO, WARM, DONE], 137, r"(?s)benchmark client on host box \(/opt/specperf/bin/python -m core._measure.host_client\) was "
                               r"killed by SIGKILL \(status 137\) during the measured requests; its last output lines:\n"
                               r".*\"index\": 0.*its standard error ends:\nTraceback \(most recent call last\)"),
    ([HELLO, "Welcome to gpu-a!"], 0, r"printed 'Welcome to gpu-a!' where a line of warm was due \(it is stopped\)"),
    ([HELLO, WARM, '{"done": 3, "extra": 1}'], 0, r"printed .* where a line of done, sample was due"),
    ([HELLO, WARM, DONE, json.dumps({"sample": {"window_start_s": 1, "window_end_s": 2, "requests": 2}})], 0,
     r"reported 2 requests but sent 1"),
    ([], 1, r"exited with status 1 before it started; its standard error ends:\nTraceback"),
    ([json.dumps({"hello": {"protocol": 99}})], 0, rf"speaks protocol 99, this specperf {PROTOCOL}"),
    ([HELLO, json.dumps({"error": "bad spec: workload.concurrency"})], 2, r"could not run: bad spec: workload"),
    ([HELLO, WARM], None, r"^the connection to host box was lost during the measured requests"),
])
async def test_a_client_that_dies_or_prints_garbage_is_one_clear_host_error(lines, status, message):
    box = Box(lambda: Scripted(lines, status, "Traceback (most recent call last):\n  ...\nMemoryError"))
    with pytest.raises(core.HostError, match=message):
        await run_on_host(box, "http://127.0.0.1:1", "m", WORKLOAD)
    assert box.spawned[0].closed  # the channel is closed: the helper stops whatever is left of the client


async def test_a_host_without_client_python_is_a_config_error():
    with pytest.raises(core.ConfigError, match=r"hosts\.box\.client_python is required"):
        await run_on_host(Box(InProcess, client_python=None), "http://127.0.0.1:1", "m", WORKLOAD)


# --- over the real loopback sshd --------------------------------------------------------------


def host_client_host(sshd, tmp_path: Path, **extra) -> SshHost:
    config = sshd.host_config(workdir=str(tmp_path / "remote"), client="host", client_python=sys.executable, **extra)
    return open_host("loopback", config, tmp_path)


def recorder(tmp_path: Path) -> tuple[list[str], Path]:
    """An exec prefix that records each command it runs (one JSON line) and then runs it."""
    log = tmp_path / "prefix.log"
    script = tmp_path / "record_and_exec.py"
    script.write_text("import json, os, sys\n"
                      f"with open({str(log)!r}, 'a') as fh:\n"
                      "    fh.write(json.dumps(sys.argv[2:]) + '\\n')\n"
                      "os.execvp(sys.argv[2], sys.argv[2:])\n")
    return [sys.executable, str(script), "--"], log


async def test_a_compare_with_the_client_on_the_host_reaches_a_verdict(sshd, tmp_path, unused_tcp_port):
    make_repo(tmp_path / "repo")
    prefix, log = recorder(tmp_path)
    db = storage.open_database(f"sqlite:///{tmp_path}/db.sqlite")
    async with host_client_host(sshd, tmp_path, exec_prefix=prefix) as host:
        request = CompareRequest(
            engine_name="fake", engine=fake_engine(tmp_path / "repo", unused_tcp_port, ROOT), workload_name="w",
            workload=WORKLOAD, head_ref="slow", base_ref=None, modes=["baseline"],
            settings=core.CompareConfig(min_trials=2, max_trials=2, cooldown_s=0, on_disturbed="keep"), host=host)
        shas = await resolve_refs(request)
        store = storage.RunStore(db)
        run_id = store.create(request, *shas)
        result = await compare(request, store, shas=shas)
    assert result.status == "done", result.reason
    assert result.verdicts["baseline"].verdict in (REGRESSION, INCONCLUSIVE)
    trials = [t for arm in result.trials["baseline"].values() for t in arm]
    assert len(trials) == 4
    pids = set()
    for trial in trials:
        by = trial.sample.measured_by
        # measured by a process of its own on the host, not by this one
        assert by["where"] == "host" and by["host"] == "loopback" and by["pid"] != os.getpid()
        pids.add(by["pid"])
        assert trial.to_dict()["measured_by"] == by and len(trial.to_dict()["requests"]) == WORKLOAD.requests
        # the window monitor counted that process as specperf's own, not as a foreign one
        assert by["pid"] not in {p["pid"] for p in trial.window["foreign_processes"]}, trial.window
    assert len(pids) == 4  # one client per trial
    # each started on the host, through the host's command path (the exec prefix), with client_python
    started = [argv for argv in map(json.loads, log.read_text().splitlines()) if "core._measure.host_client" in argv]
    assert len(started) == 4 and all(argv[-3:] == [sys.executable, "-m", "core._measure.host_client"] for argv in started)
    stored = storage.load_run(db, run_id)
    assert stored.run.settings["client"] == "on the host, beside the engine"
    assert all(t.status == "ok" and len(t.requests) == WORKLOAD.requests for t in stored.trials)
    assert all(group_members(t.pgid, t.log_path) == [] for t in stored.trials)


def client_processes() -> list:
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] != psutil.STATUS_ZOMBIE and cmdline == [sys.executable, "-m", "core._measure.host_client"]:
            found.append(proc)
    return found


def exact_engine(port: int) -> core.EngineConfig:
    """The exact-rate server as the engine (2 ms per token)."""
    return core.EngineConfig(kind="command", port=port, python=sys.executable, stop_grace_s=3, ready_timeout_s=20,
                             env={"PYTHONPATH": str(ROOT)},
                             command=["{python}", "-m", "tests.exact_rate_server", "--port", "{port}", "--ttft-ms", "5",
                                      "--itl-ms", "2"])


LONG = core.WorkloadConfig(output_len=200, concurrency=2, requests=40, warmup_requests=1)


async def test_a_client_killed_on_the_host_mid_trial_is_one_clear_error_and_leaves_no_engine(
        sshd, tmp_path, unused_tcp_port):
    engine = exact_engine(unused_tcp_port)
    launched, killed = [], []

    def kill_the_client(record: RequestRecord) -> None:
        if not killed:
            victims = client_processes()
            assert len(victims) == 1, victims
            killed.append(victims[0].pid)
            os.kill(victims[0].pid, signal.SIGKILL)

    async with host_client_host(sshd, tmp_path) as host:
        with pytest.raises(core.HostError) as failed:
            await measure("exact", engine, "baseline", "w", LONG, f"{host.workdir}/logs", host=host,
                               on_launch=launched.append, on_request_done=kill_the_client)
        message = str(failed.value)
        assert message.startswith(f"specperf's benchmark client on host loopback ({sys.executable} -m "
                                  "core._measure.host_client) was killed by SIGKILL (status 137) during the measured requests")
        assert '"index"' in message  # its last output lines: the requests it had finished
        assert len(killed) == 1 and len(launched) == 1
        assert group_members(launched[0].pgid) == []  # the engine was stopped
        assert client_processes() == []
        assert (await host.run(["true"])).returncode == 0  # the host is usable as before


async def test_a_connection_dropped_mid_trial_stops_the_client_on_the_host(sshd, tmp_path, unused_tcp_port):
    launched, dropped = [], []

    def drop(record: RequestRecord) -> None:
        if not dropped:
            dropped.append(sshd.drop_connections())

    async with host_client_host(sshd, tmp_path) as host:
        with pytest.raises(core.HostError, match="connection to host loopback was lost"):
            await measure("exact", exact_engine(unused_tcp_port), "baseline", "w", LONG, f"{host.workdir}/logs",
                               host=host, on_launch=launched.append, on_request_done=drop)
        assert dropped[0] >= 1
        # the helper saw its channel close and stopped the client; the supervisor, the engine
        assert await wait_until(lambda: client_processes() == [], 15), client_processes()
        assert await wait_until(lambda: group_members(launched[0].pgid) == [], 20)
