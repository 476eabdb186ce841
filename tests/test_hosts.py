"""Hosts over a real OpenSSH server on loopback (tests/ssh_server.py): quoting, timeouts, host
keys, the exec prefix, a dropped connection mid-trial, the host lock, GPU hygiene, and a
whole compare run through SSH with the fast fake engine."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import psutil
import pytest

import core
import storage
from core._env.hygiene import clean_gpus, gpu_holders
from core._errors import CommandTimeout
from core._experiments.compare import CompareRequest, compare, resolve_refs
from core._experiments.stats import INCONCLUSIVE, REGRESSION
from core._hosts import Host, SshHost, open_host
from core._measure.engines import adapter_for
from tests.conftest import ROOT, SPECPERF, group_members, local_host
from tests.fake_engine_repo import fake_engine, make_repo

WORKLOAD = core.WorkloadConfig(output_len=32, concurrency=2, requests=8, warmup_requests=1)
SETTINGS = core.CompareConfig(min_trials=2, max_trials=2, cooldown_s=0, on_disturbed="keep")


def ssh_host(sshd, tmp_path: Path, **extra) -> SshHost:
    return open_host("loopback", sshd.host_config(workdir=str(tmp_path / "remote"), **extra), tmp_path)


def processes_with(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return found


async def wait_until(predicate, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.1)
    return predicate()


async def test_arguments_reach_the_host_literally(sshd, tmp_path):
    canary = tmp_path / "canary"
    text = f"x; touch {canary} $(touch {canary}) `touch {canary}` 'quoted' \"dq\" *"
    async with ssh_host(sshd, tmp_path) as host:
        result = await host.run(["printf", "%s", text])
        assert (result.returncode, result.stdout) == (0, text)
        assert not canary.exists()
        assert (await host.run(["sh", "-c", "exit 3"])).returncode == 3
        assert (await host.run(["no-such-program-xyz"])).returncode == 127


@pytest.mark.parametrize("kind", ["local", "ssh"])
async def test_a_hanging_command_hits_its_timeout_and_its_group_is_gone(sshd, tmp_path, kind):
    marker = f"hang-{uuid.uuid4().hex}"
    host = ssh_host(sshd, tmp_path) if kind == "ssh" else local_host(tmp_path)
    async with host:
        # the command starts a child of its own, as engines do: both must go
        sleeper = "python3 -c 'import time; time.sleep(600)'"
        argv = ["sh", "-c", f"{sleeper} {marker}-child & exec {sleeper} {marker}"]
        started = time.monotonic()
        with pytest.raises(CommandTimeout, match="did not finish within 2 s"):
            await host.run(argv, timeout_s=2)
        assert time.monotonic() - started < 15
    assert await wait_until(lambda: not processes_with(marker), 10), processes_with(marker)


async def test_a_changed_host_key_is_refused(sshd, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {' '.join(other.with_suffix('.pub').read_text().split()[:2])}\n")
    host = open_host("loopback", sshd.host_config(workdir=str(tmp_path)).model_copy(
        update={"known_hosts": str(known)}), tmp_path)
    with pytest.raises(core.HostError, match="host key of 127.0.0.1:.* is not the one in .*known_hosts: it changed"):
        await host.run(["true"])
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    host = open_host("loopback", sshd.host_config(workdir=str(tmp_path)).model_copy(
        update={"known_hosts": str(empty)}), tmp_path)
    with pytest.raises(core.HostError, match=r"has no key for 127.0.0.1:\d+ .*ssh-keyscan.*never skips the check"):
        await host.run(["true"])


async def test_a_key_file_that_is_no_key_is_one_clear_error(sshd, tmp_path):
    (tmp_path / "not_a_key").write_text("hello")
    host = open_host("loopback", sshd.host_config(workdir=str(tmp_path)).model_copy(
        update={"identity_file": str(tmp_path / "not_a_key")}), tmp_path)
    with pytest.raises(core.HostError, match=r"hosts.loopback.identity_file: cannot use .*not_a_key as an SSH private"):
        await host.run(["true"])


async def test_an_unreachable_host_is_one_clear_error(tmp_path):
    known = tmp_path / "known_hosts"
    config = core.HostConfig(ssh="127.0.0.1", port=1, connect_timeout_s=3, known_hosts=str(known))
    with pytest.raises(core.HostError, match=r"hosts.gone.known_hosts: .*known_hosts does not exist"):
        await open_host("gone", config, tmp_path).run(["true"])
    known.write_text("")
    with pytest.raises(core.HostError, match=r"cannot reach host gone \(127.0.0.1:1\): .*check the address"):
        await open_host("gone", config, tmp_path).run(["true"])


def recorder(tmp_path: Path) -> tuple[list[str], Path]:
    """An exec prefix that records each command it runs (one JSON line) and then runs it."""
    log = tmp_path / "prefix.log"
    script = tmp_path / "record_and_exec.py"
    script.write_text(
        "import json, os, sys\n"
        f"with open({str(log)!r}, 'a') as fh:\n"
        "    fh.write(json.dumps(sys.argv[2:]) + '\\n')\n"
        "os.execvp(sys.argv[2], sys.argv[2:])\n"
    )
    return [sys.executable, str(script), "--"], log


def request_for(repo: Path, port: int, host: Host, head: str = "slow") -> CompareRequest:
    return CompareRequest(
        engine_name="fake", engine=fake_engine(repo, port, ROOT), workload_name="w", workload=WORKLOAD,
        head_ref=head, base_ref=None, modes=["baseline"], settings=SETTINGS, host=host)


async def test_a_compare_over_ssh_runs_every_command_through_the_exec_prefix(sshd, tmp_path, unused_tcp_port):
    shas = make_repo(tmp_path / "repo")
    prefix, log = recorder(tmp_path)
    db = storage.open_database(f"sqlite:///{tmp_path}/db.sqlite")
    async with ssh_host(sshd, tmp_path, exec_prefix=prefix) as host:
        request = request_for(tmp_path / "repo", unused_tcp_port, host)
        shas_run = await resolve_refs(request)
        store = storage.RunStore(db)
        run_id = store.create(request, *shas_run)
        async with host.lock({"by": "test"}):
            result = await compare(request, store, shas=shas_run)
        commands = host.commands_run
    assert result.status == "done", result.reason
    assert shas_run == (shas["noop"], shas["slow"])
    assert result.verdicts["baseline"].verdict in (REGRESSION, INCONCLUSIVE)
    recorded = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(recorded) == commands  # every command specperf ran on the host went through the prefix
    words = {w for argv in recorded for w in argv}
    # git, the lock, file writes, the helper's tied runs, listener checks and supervisors: all of them
    assert {"git", "flock", "dd", "mkdir", "run", "listeners", "holders", "supervise"} <= words
    supervised = [a for a in recorded if "supervise" in a]
    assert len(supervised) == 4  # one supervisor per launch (2 pairs)
    stored = storage.load_run(db, run_id)
    assert stored.run.host == "loopback" and stored.run.settings["client"] == "here, through an SSH tunnel"
    assert all(t.status == "ok" and t.log_path.startswith(str(tmp_path / "remote/logs")) for t in stored.trials)
    assert all(group_members(t.pgid, t.log_path) == [] for t in stored.trials)


class _DropAfterLaunch(storage.RunStore):
    def __init__(self, db, sshd) -> None:
        super().__init__(db)
        self.sshd = sshd
        self.pgids: list[int] = []
        self.dropped = 0

    def trial_launched(self, arm, seq, process) -> None:
        super().trial_launched(arm, seq, process)
        self.pgids.append(process.pgid)
        asyncio.get_running_loop().call_later(4.0, self._drop)

    def _drop(self) -> None:
        self.dropped = self.sshd.drop_connections()


async def test_a_connection_dropped_mid_trial_leaves_no_engine_and_a_failed_run(sshd, tmp_path, unused_tcp_port):
    make_repo(tmp_path / "repo")
    long = core.WorkloadConfig(output_len=2000, concurrency=2, requests=50, warmup_requests=0)
    async with ssh_host(sshd, tmp_path) as host:
        request = request_for(tmp_path / "repo", unused_tcp_port, host)
        request.workload = long
        db = storage.open_database(f"sqlite:///{tmp_path}/db.sqlite")
        observer = _DropAfterLaunch(db, sshd)
        shas = await resolve_refs(request)
        run_id = observer.create(request, *shas)
        started = time.monotonic()
        result = await compare(request, observer, shas=shas)
        assert observer.dropped >= 1 and len(observer.pgids) == 1
        assert result.status == "failed"
        assert "connection to host loopback was lost" in result.reason
        assert time.monotonic() - started < 60
        stored = storage.load_run(db, run_id)  # the run says what happened, nothing is left 'running'
        assert stored.run.status == "failed" and "connection to host loopback was lost" in stored.run.reason
        assert [t.status for t in stored.trials] == ["failed"] and stored.trials[0].pgid == observer.pgids[0]
        # the supervisor saw its channel close and stopped the engine's group on the host
        assert await wait_until(lambda: group_members(observer.pgids[0]) == [], 20)
        # the host is usable again: the next command opens a new connection
        assert (await host.run(["true"])).returncode == 0


@pytest.mark.e2e
async def test_the_host_lock_makes_a_second_compare_wait_or_fail(tmp_path):
    repo = tmp_path / "repo"
    make_repo(repo)
    home = tmp_path / "home"
    config = tmp_path / "specperf.toml"
    config.write_text(
        f'[engines.fake]\nkind = "command"\nrepo = "{repo}"\nsource_dir = "src"\npython = "{sys.executable}"\n'
        'command = ["{python}", "-m", "fake_engine", "--port", "{port}"]\nport = 1\n'
        f'env = {{ PYTHONPATH = "{ROOT}" }}\n[engines.fake.modes]\nbaseline = []\n'
    )
    env = {**os.environ, "SPECPERF_HOME": str(home)}
    async with local_host(home / "work") as host, host.lock({"by": "a test", "doing": "holding the host"}):
        busy = subprocess.run([*SPECPERF, "--config", str(config), "compare", "slow", "--no-wait"],
                              env=env, capture_output=True, text=True, timeout=120)
        assert busy.returncode == 5, busy.stderr
        assert "host local is busy with another experiment (by a test, doing holding the host" in busy.stderr
        waiting = subprocess.Popen([*SPECPERF, "--config", str(config), "compare", "slow"], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = waiting.stdout.readline()
        assert "is busy with another experiment" in line and "waiting for it to finish" in line
        waiting.send_signal(signal.SIGINT)
        assert waiting.wait(30) == 130
    # nothing was recorded for the refused runs
    assert storage.list_runs(storage.open_database(f"sqlite:///{home}/specperf.db"), None, 10) == []


def hold_device(device: Path, stdout=subprocess.DEVNULL) -> subprocess.Popen:
    """A process that holds ``device`` open, as a CUDA process holds /dev/nvidia0; returned once
    it does (before that, a busy machine can show the forked child with pytest's command line)."""
    proc = subprocess.Popen([sys.executable, "-c", f"f = open({str(device)!r}); import time; time.sleep(600)"],
                            stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while not _holds(proc.pid, device):
        assert proc.poll() is None and time.monotonic() < deadline, "the device-holding process did not start"
        time.sleep(0.01)
    return proc


def _holds(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # gone, or a descriptor closed while listed
        return False


async def test_gpu_hygiene_refuses_foreign_holders_cleans_ours_and_force_cleans(sshd, tmp_path):
    device = tmp_path / "nvidia0"
    device.write_text("")
    async with ssh_host(sshd, tmp_path, device_paths=[str(tmp_path / "nvidia[0-9]*")]) as host:
        logs = Path(host.workdir) / "logs"
        logs.mkdir(parents=True)
        with open(logs / "left-behind.log", "wb") as log:
            ours = hold_device(device, stdout=log)  # an engine of a crashed run: its output goes to our logs
        foreign = hold_device(device)
        try:
            await asyncio.sleep(0.5)
            holders = {h.pid: h for h in await gpu_holders(host)}
            assert holders[ours.pid].kind == "ours" and holders[foreign.pid].kind == "foreign"
            with pytest.raises(core.HostBusyError) as refused:
                await clean_gpus(host)
            message = str(refused.value)
            assert f"pid {foreign.pid} (root)" in message and "time.sleep(600)" in message
            assert "--force-clean" in message and f"pid {ours.pid}" not in message
            assert foreign.poll() is None and ours.poll() is None  # refusing touches nothing
            done = await clean_gpus(host, force_clean=True, grace_s=2)
            assert any(f"leftover engine of specperf (process group {ours.pid})" in line for line in done)
            assert any(f"foreign GPU process (--force-clean): pid {foreign.pid}" in line for line in done)
            assert ours.wait(10) is not None and foreign.wait(10) is not None
            assert await gpu_holders(host) == []
        finally:
            for proc in (ours, foreign):
                if proc.poll() is None:
                    proc.kill()


async def test_nvml_processes_in_the_snapshot_are_holders_too(tmp_path):
    (tmp_path / "x").write_text("")
    foreign = hold_device(tmp_path / "x")
    snapshot = {"gpu": {"available": True, "devices": [{"index": 0, "processes": [
        {"pid": foreign.pid, "memory_mib": 1024, "user": "root", "command": "python"},
        {"pid": 4_000_000, "memory_mib": 512, "user": None, "command": None}]}]}}
    try:
        async with local_host(tmp_path / "work") as host:
            holders = {h.pid: h for h in await gpu_holders(host, snapshot)}
        assert holders[foreign.pid].kind == "foreign" and holders[foreign.pid].source == "nvml"
        assert "time.sleep(600)" in holders[foreign.pid].cmdline
        # a pid NVML sees but this namespace does not (another container): foreign, command unknown
        assert holders[4_000_000].kind == "foreign" and holders[4_000_000].line.endswith("command unknown")
    finally:
        foreign.kill()


async def test_specperf_compare_over_ssh_from_the_cli(sshd, tmp_path, unused_tcp_port):
    repo = tmp_path / "repo"
    shas = make_repo(repo)
    cfg = sshd.host_config()
    config = tmp_path / "specperf.toml"
    config.write_text(
        f'[hosts.box]\nssh = "root@127.0.0.1"\nport = {cfg.port}\nknown_hosts = "{cfg.known_hosts}"\n'
        f'identity_file = "{cfg.identity_file}"\nworkdir = "{tmp_path}/remote"\n'
        f'[engines.fake]\nkind = "command"\nrepo = "{repo}"\nsource_dir = "src"\nsource_package = "fake_engine"\n'
        f'python = "{sys.executable}"\ncommand = ["{{python}}", "-m", "fake_engine", "--port", "{{port}}"]\n'
        f'port = {unused_tcp_port}\nstop_grace_s = 3\nenv = {{ PYTHONPATH = "{ROOT}" }}\n'
        'args = ["--profile-dir-env", "FAKE_TRACE_DIR"]\nprofile_dir_env = "FAKE_TRACE_DIR"\n'
        '[engines.fake.modes]\nbaseline = []\n'
        '[compare]\nmin_trials = 2\nmax_trials = 2\ncooldown_s = 0\non_disturbed = "keep"\nmodes = ["baseline"]\n'
        '[workloads.default]\noutput_len = 32\nrequests = 8\nconcurrency = 2\nwarmup_requests = 1\n'
    )
    env = {**os.environ, "SPECPERF_HOME": str(tmp_path / "home")}
    out = subprocess.run([*SPECPERF, "--config", str(config), "compare", "slow", "--host", "box", "--profile", "always",
                          "--json", str(tmp_path / "r.json")], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"host box (ssh root@127.0.0.1:{cfg.port}; the benchmark client runs here, through an SSH tunnel)" in out.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["modes"]["baseline"]["verdict"]["n_pairs"] == 2
    assert (tmp_path / "remote/worktrees" / shas["slow"]).is_dir()  # worktrees live on the host
    stored = storage.load_run(storage.open_database(f"sqlite:///{tmp_path}/home/specperf.db"), report["run_id"])
    assert stored.run.host == "box" and stored.run.status == "done"
    # the profile round on the SSH host: each arm's traces written there (its work folder) and
    # copied here through the SSH channel, byte for byte, into the run's profile folder
    profile = report["modes"]["baseline"]["profile"]
    assert profile["status"] == "done", profile
    for role in ("base", "head"):
        (copied,) = profile[role]["traces"]
        here = Path(copied)
        assert here.is_relative_to(tmp_path / "home/profiles" / f"run-{report['run_id']}" / "baseline" / role)
        (there,) = (tmp_path / "remote/profiles").glob(f"*-baseline-{role}/{here.name}")
        assert here.read_bytes() == there.read_bytes() and here.stat().st_size > 0


@pytest.fixture(scope="module")
def netns_sshd():
    """A second host: sshd inside a network namespace of its own (where this machine allows)."""
    from tests.ssh_server import NetnsUnavailable, SshServer

    try:
        server = SshServer(netns=True)
    except NetnsUnavailable as exc:
        pytest.skip(f"this machine does not allow network namespaces: {exc}")
    yield server
    server.close()


async def test_a_second_host_in_its_own_network_namespace(netns_sshd, tmp_path, unused_tcp_port):
    make_repo(tmp_path / "repo")
    subprocess.run(["git", "-C", str(tmp_path / "repo"), "checkout", "-q", "base"], check=True)  # HEAD is broken
    async with open_host("netns", netns_sshd.host_config(workdir=str(tmp_path / "remote")), tmp_path) as host:
        engine = fake_engine(tmp_path / "repo", unused_tcp_port, ROOT)
        argv = adapter_for(engine).launch_argv("baseline")
        tree = f"{tmp_path}/repo"
        async with host.launch("fake", argv, {**engine.env, "PYTHONPATH": f"{tree}/src:{ROOT}"},
                               f"{host.workdir}/logs/x.log", tree, 3) as process, host.forward(unused_tcp_port) as url:
            await adapter_for(engine).wait_ready(httpx.AsyncClient(base_url=url), 20,
                                                      lambda: process.returncode, process.log_tail)
            # the engine listens on the namespace's loopback: reachable through the tunnel only
            assert await process.holds_port(unused_tcp_port) is True
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"http://127.0.0.1:{unused_tcp_port}/health", timeout=2)
        result = await compare(request_for(tmp_path / "repo", unused_tcp_port, host))
    assert result.status == "done", result.reason
    assert len(result.trials["baseline"]["head"]) == 2


def test_specperf_env_probes_an_ssh_host_and_lists_its_gpu_holders(sshd, tmp_path):
    device = tmp_path / "nvidia0"
    device.write_text("")
    cfg = sshd.host_config()
    config = tmp_path / "specperf.toml"
    config.write_text(
        f'[hosts.box]\nssh = "root@127.0.0.1"\nport = {cfg.port}\nknown_hosts = "{cfg.known_hosts}"\n'
        f'identity_file = "{cfg.identity_file}"\nworkdir = "{tmp_path}/remote"\npython = "{sys.executable}"\n'
        f'device_paths = ["{tmp_path}/nvidia[0-9]*"]\n'
    )
    holder = hold_device(device)
    try:
        out = subprocess.run([*SPECPERF, "--config", str(config), "env", "--host", "box", "--cheap",
                              "--json", str(tmp_path / "env.json")],
                             env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")},
                             capture_output=True, text=True, timeout=120)
    finally:
        holder.kill()
    assert out.returncode == 0, out.stderr
    assert "env snapshot of host box" in out.stdout
    assert f"GPU holder (foreign, seen through device): pid {holder.pid} (root)" in out.stdout
    doc = json.loads((tmp_path / "env.json").read_text())
    assert doc["snapshot"]["kind"] == "cheap" and doc["gpu_holders"][0]["pid"] == holder.pid
