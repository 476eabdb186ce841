"""Shared fixtures: the exact-rate server as a real subprocess, process-table checks, the
location of the real CPU test engine, a PostgreSQL server and an OpenSSH server; and the
markers those fixtures imply (a test that uses ``testenv`` is an ``engine`` test, and so on),
so ``-m "not engine and not postgres and not ssh"`` never starts what it excludes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

import core
from core._experiments.compare import CompareRequest, compare, resolve_refs
from core._hosts import LocalHost

ROOT = Path(__file__).resolve().parent.parent

# A shell without job control starts a background command with SIGINT ignored (POSIX), and that
# passes down to every process the tests start: a specperf started from here would then ignore
# the Ctrl-C a test sends it, as it should when a user runs it that way. The tests' processes
# start as a terminal's do: a Python handler is not inherited, so they get SIGINT's default.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# Fixture -> the marker of what it needs (pyproject.toml lists the markers). The session compare
# launches the engine on its CPU and needs that CPU quiet: its tests are in scripts/test's engine tier.
FIXTURE_MARKERS = {"testenv": "engine", "postgres_url": "postgres", "postgres_server": "postgres", "sshd": "ssh",
                   "netns_sshd": "ssh", "slurm_cluster": "slurm", "slow_spec_compare": "launch", "chromium": "e2e"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with what its fixtures need (db_url's PostgreSQL case is marked by its param)."""
    for item in items:
        for fixture in set(getattr(item, "fixturenames", ())) & FIXTURE_MARKERS.keys():
            item.add_marker(FIXTURE_MARKERS[fixture])


def local_host(workdir: Path) -> LocalHost:
    """This machine as a host whose work directory is ``workdir``."""
    return LocalHost("local", core.HostConfig(), str(workdir))


# The installed console script, as users run it (``python -m`` can turn a handled Ctrl-C into
# death by SIGINT at interpreter exit).
SPECPERF = [str(Path(sys.executable).parent / "specperf")]
TESTENV = Path(os.environ.get("SPECPERF_TESTENV", Path.home() / ".cache/specperf/testenv"))


def specperf_in_process(args: list[str], *, cwd: Path | str | None = None,
                        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``specperf ARGS`` run by the console script's own ``bot.cli.main`` in this process, with
    ``env`` (default: this one) as the whole environment and ``cwd`` as the working directory
    for the call; standard output and error captured, the exit status as the console script's.
    Saves a process start per call (importing specperf costs about 2 s of CPU); tests that need
    a real process (signals, the installed script, the bot) use :data:`SPECPERF`. Sync tests
    only: ``main`` runs its own event loop."""
    import contextlib
    import io
    import signal

    from bot import cli

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd, saved_sigterm = dict(os.environ), os.getcwd(), signal.getsignal(signal.SIGTERM)
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main([str(arg) for arg in args])
            except SystemExit as exc:  # argparse's usage errors
                status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        signal.signal(signal.SIGTERM, saved_sigterm)  # main turns SIGTERM into KeyboardInterrupt
    return subprocess.CompletedProcess(["specperf", *map(str, args)], status, out.getvalue(), err.getvalue())


class ExactServer:
    """A running ``tests.exact_rate_server`` process."""

    def __init__(self, *options: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.exact_rate_server", "--port", "0", *options],
            cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True,
        )
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), f"exact-rate server did not start: {line!r}"
        self.port = int(line.split()[-1])
        self.base_url = f"http://127.0.0.1:{self.port}"

    def truth(self) -> list[dict]:
        return httpx.get(f"{self.base_url}/truth").json()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def exact_server() -> Iterator:
    """Factory: ``exact_server("--itl-ms", "5")`` starts a server; all are killed at teardown."""
    servers: list[ExactServer] = []

    def start(*options: str) -> ExactServer:
        servers.append(ExactServer(*options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def record_verdict(record_property, name: str, verdict, result=None, mode: str | None = None) -> None:
    """Records a verdict's figures on the running test (pytest's ``record_property``: JUnit XML
    properties ``NAME_change_pct``, ``NAME_ci_low_pct``, ``NAME_ci_high_pct`` and, given the
    compare's ``result`` (core.CompareResult) and ``mode``, ``NAME_pair_sd_pct``: the sd of the
    pairs' log tok/s changes, as a percentage, over the pairs the verdict kept), which
    ``scripts/test`` writes to its JUnit files and ``scripts/test --repeat`` gathers over repeats:
    the spread that test saw (issue 41; CONTRIBUTING.md's margin table).
    ``verdict``: a core Verdict, or its dict form (a JSON report's mode verdict, a history check)."""
    import math

    import numpy as np

    from core._experiments.stats import pair_log_ratios

    get = verdict.get if isinstance(verdict, dict) else lambda key: getattr(verdict, key, None)
    for key in ("change_pct", "ci_low_pct", "ci_high_pct"):
        if get(key) is not None:
            record_property(f"{name}_{key}", round(float(get(key)), 2))
    if result is not None and mode in result.trials:
        left_out = set(result.left_out.get(mode, ()))  # pairs judged disturbed and measured again
        base, head = ([t.sample.output_tok_s for i, t in enumerate(result.trials[mode][role]) if i not in left_out]
                      for role in ("base", "head"))
        n = min(len(base), len(head))
        if n >= 2:
            sd = float(np.std(pair_log_ratios(base[:n], head[:n]), ddof=1))
            record_property(f"{name}_pair_sd_pct", round(100 * math.expm1(sd), 2))


def group_members(pgid: int, log_path: str | None = None) -> list[psutil.Process]:
    """Every live (non-zombie) process whose process group is ``pgid``, read from the process table.

    With ``log_path`` (the trial's engine log), only those whose standard output or error is that
    file: an engine and everything it spawns inherit both, while a process group of someone
    else that later got the same id (Linux recycles pids, and with ``pid_max`` 32768 a suite
    that starts thousands of processes wraps around within minutes) does not. A process whose
    descriptors cannot be read counts as a member."""
    wanted = os.path.realpath(log_path) if log_path else None
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) != pgid or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if wanted is None or wanted in {f.path for f in proc.open_files() if f.fd in (1, 2)}:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
        except psutil.AccessDenied:
            members.append(proc)
    return members


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's headless-capable Chromium (package ``chromium``, which scripts/test installs);
    fails, never skips, when absent. Tests that use it are ``e2e`` (FIXTURE_MARKERS)."""
    import shutil

    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("chromium is not installed: apt-get install -y chromium (scripts/test installs it), "
                    "then run the browser tests again")
    return Path(found)


@pytest.fixture(scope="session")
def testenv() -> Path:
    """The installed CPU test engine (``scripts/setup-test-engine``); fails, never skips, when absent."""
    python = TESTENV / "engine-venv/bin/python"
    target = TESTENV / "models/target/config.json"
    if not (python.exists() and target.exists()):
        pytest.fail(f"CPU test engine missing under {TESTENV}: run scripts/setup-test-engine first")
    return TESTENV


def default_config(testenv: Path) -> core.Config:
    """The embedded default config (``bot/default.toml``: the CPU test engine ``tiny-vllm``)
    with ``${SPECPERF_TESTENV}`` expanded to ``testenv``."""
    from importlib import resources

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECPERF_TESTENV", str(testenv))
        return core.parse_config(resources.files("bot").joinpath("default.toml").read_text(),
                                 "<embedded default config>")


def slowed_default_config(path: Path, slowdown: str, *edits: tuple[str, str]) -> Path:
    """bot/default.toml written to ``path`` with the test plugin's step slowdown
    (``SPECPERF_TESTEXT_STEP_SLOWDOWN = slowdown`` in the engine's environment:
    scripts/make_engine_repo.py), on a free port and the next (the second engine of the concurrent
    pairing), a 1 s cool-down and no profile round, each ``(old, new)`` of ``edits`` applied
    (old found once), and the rest tier's load on the client's CPU and the hypervisor's steal
    not judged (scripts/test shares the client's CPU with the rest tier by design)."""
    from importlib import resources

    text = resources.files("bot").joinpath("default.toml").read_text()
    for old, new in (("port = 8199", f"port = {free_port(2)}"),
                     ("env = { ", f'env = {{ SPECPERF_TESTEXT_STEP_SLOWDOWN = "{slowdown}", '),
                     ("[compare]\n", '[compare]\ncooldown_s = 1\nprofile = "never"\n'), *edits):
        assert text.count(old) == 1, old  # the default config still reads as these tests expect
        text = text.replace(old, new)
    path.write_text(text + "\n[compare.disturbance]\nclient_cpus_foreign_share = 1.0\nsteal_share = 1.0\n")
    return path


def free_port(span: int = 1) -> int:
    """A TCP port P on 127.0.0.1 such that P .. P + span - 1 all bind now, picked below the
    kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range): a port the kernel hands
    out with bind(0) can be taken a moment later as the local end of any outgoing loopback
    connection (another test's client), and an engine that binds it then exits with "address
    already in use". ``span`` = 2 for concurrent pairing, whose commit engine takes P + 1."""
    import random
    import socket

    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    pick = random.SystemRandom()
    for _ in range(200):
        port = pick.randrange(10000, max(low - span, 10001))
        socks = [socket.socket() for _ in range(span)]
        try:
            for offset, sock in enumerate(socks):
                sock.bind(("127.0.0.1", port + offset))
            return port
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {span} consecutive free TCP ports below {low} after 200 tries")


@pytest.fixture
def unused_tcp_port() -> int:
    """pytest-asyncio's fixture of this name, made safe for tests that also use the ports
    after it (concurrent pairing's port + 1, a second or third engine or bot up to port + 3):
    :func:`free_port` with ``span`` 4."""
    return free_port(span=4)


def two_commit_repo(repo: Path, name: str, base: tuple[str, str], head: tuple[str, str]) -> Path:
    """A git repository at ``repo`` of two commits of one file ``name``: ``base`` and then
    ``head``, each ``(file text, commit message)``."""
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       check=True, capture_output=True, text=True)

    repo.mkdir()
    git("init", "-q")
    (repo / name).write_text(base[0])
    git("add", ".")
    git("commit", "-qm", base[1])
    (repo / name).write_text(head[0])
    git("commit", "-qam", head[1])
    return repo


def server_repo(repo: Path, served_where: str) -> Path:
    """A two-commit git repository at ``repo`` for an engine of ``kind = "command"`` (the server
    comes from its own venv, not from the repo): the commit changes nothing served, so a compare
    of it against its parent is an A/A of the server. ``served_where`` goes in the commit's note."""
    return two_commit_repo(repo, "SERVING.md", ("served by transformers serve\n", "base"),
                           (f"served by transformers serve, {served_where}\n", "a commit that changes nothing served"))


class Hog(core.CompareObserver):
    """A CPU hog (a busy Python loop, its command line tagged ``specperf-test-hog``) on ``cpu``
    during the launches numbered in ``seqs``: started when such a trial's engine is launched, it
    waits (polling every 0.2 s) until the engine on ``port`` answers ``/health``, then spins
    through warm-up and the measured window until the trial ends. ``pids[seq]`` is the hog's pid
    in that launch. Waiting for readiness keeps the hogged launches' start-up as long as the
    others' (spinning from the launch on doubled it: about 50 s against 20 s on 2 vCPUs)."""

    COMMAND = ("import time, urllib.request  # specperf-test-hog\n"
               "while True:\n"
               "    try:\n"
               "        if urllib.request.urlopen('http://127.0.0.1:%d/health', timeout=1).status == 200: break\n"
               "    except OSError: pass\n"
               "    time.sleep(0.2)\n"
               "while True: time.time()")

    def __init__(self, cpu: int, seqs: set[int], port: int) -> None:
        self.cpu, self.seqs, self.port, self.hog, self.pids = cpu, seqs, port, None, {}

    def trial_launched(self, arm, seq, process) -> None:
        if seq in self.seqs:
            self.hog = subprocess.Popen(["taskset", "--cpu-list", str(self.cpu), sys.executable, "-c",
                                         self.COMMAND % self.port], start_new_session=True)
            self.pids[seq] = self.hog.pid

    def trial_finished(self, arm, seq, trial) -> None:
        self._stop()

    def trial_failed(self, arm, seq, error) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.hog is not None:
            self.hog.kill()
            self.hog.wait()
            self.hog = None


def vllm_compare(testenv: Path, workdir: Path, head: str, modes: list[str],
                 observer: core.CompareObserver | None = None, port: int | None = None, pinned: bool = True,
                 workload: str = "default", workload_update: dict | None = None, **settings):
    """One compare of the planted branch ``head`` against its parent on the real CPU test engine
    (local host, cool-down 1 s, ``settings`` over the default [compare]; the embedded config's
    ``workload`` with ``workload_update`` over it), served on ``port``
    (default: a free one), stored in SQLite under ``workdir``, ``observer`` told every step after
    the store. ``pinned=False`` drops the engine's ``cpus`` (it runs where this process may: for
    tests that need no quiet CPU, which scripts/test runs off the engine's CPU). Returns
    (core.CompareResult, storage.StoredRun)."""
    import asyncio

    import storage
    from bot._app import CompareObservers

    config = default_config(testenv)
    # scripts/test runs the rest of the suite on the client's CPU by design (the engine's CPU is
    # kept quiet): load there is not judged, or every launch would read disturbed
    disturbance = config.compare.disturbance.model_copy(update={"client_cpus_foreign_share": None})
    request = CompareRequest(
        engine_name="tiny-vllm", engine=config.engine("tiny-vllm").model_copy(
            update={"port": port or free_port(), **({} if pinned else {"cpus": None})}),
        workload_name=workload, workload=config.workload(workload).model_copy(update=workload_update or {}),
        head_ref=head, base_ref=None, modes=modes,
        settings=config.compare.model_copy(update={"cooldown_s": 1, "disturbance": disturbance, **settings}),
        host=local_host(workdir / "work"), profile_dir=str(workdir / "profiles"),
    )

    async def run():
        db = storage.open_database(f"sqlite:///{workdir}/db.sqlite")
        shas = await resolve_refs(request)
        store = storage.RunStore(db)
        run_id = store.create(request, *shas)
        result = await compare(request, CompareObservers(store, observer), shas=shas)
        return result, storage.load_run(db, run_id)

    return asyncio.run(run())


@dataclass
class SessionCompare:
    """The session's real-engine compare: ``result`` (core.CompareResult), ``stored``
    (storage.StoredRun), ``hog`` (the Hog that ran during launches ``HOGGED``) and ``db_path``
    (the SQLite file it is stored in, run 1 there: a test that adds runs works on a copy)."""

    result: core.CompareResult
    stored: object
    hog: Hog
    db_path: Path


# Round 1 launches ABBA per mode, baseline first: 1-4 baseline (base, commit, commit, base),
# 5-8 eagle3. The hog runs on the base's eagle3 launches of round 1, where it would hide the
# REGRESSION. (Hogging baseline's commit launches too, an A/A the hog would turn into a
# REGRESSION, showed the same path: a disturbed round left out and measured again. It cost
# four launches, about 2 minutes of a suite that must end within 25.)
HOGGED = {5, 8}


@pytest.fixture(scope="session")
def slow_spec_compare(testenv, tmp_path_factory) -> SessionCompare:
    """The real engine's session compare, asserted on by several tests (tests/test_compare_vllm.py,
    tests/test_disturbance_vllm.py, tests/test_vllm_engine.py): ``slow-spec`` (one more 1152x1152
    matmul per draft proposal, about 25-30 ms: EAGLE-3 tok/s about 75% lower, baseline untouched) in baseline and eagle3
    modes with a 5% margin, and a CPU hog on the engine's CPU during launches ``HOGGED`` (the
    base's eagle3 launches of round 1, where it would hide the REGRESSION). 20 launches: each
    mode stops at 4 undisturbed pairs (``max_trials = 4``), eagle3 after its hogged round is
    measured again. The planted change (about -75%, a log-ratio of -1.4) is about six times the
    sd of pair changes this suite saw (21-25% on 2026-12-06; at 640x640, -36%, eagle3 read
    INCONCLUSIVE (-62.5 .. +8.9) at 4 pairs once the interval was the t interval with the place
    in the round corrected for, 2 degrees of freedom), so 4 pairs separate it; baseline, where slow-spec changes nothing, is an A/A compare that ends NO
    CHANGE or INCONCLUSIVE, either of which the tests accept."""
    config = default_config(testenv)
    port = free_port()
    hog = Hog(config.engine("tiny-vllm").cpus[0], HOGGED, port)
    # sequential pairing, as on a GPU host with one large model: one engine at a time, ABBA
    # (the embedded default's concurrent pairing runs in tests/test_bot_vllm_ssh.py)
    # Steal time is not judged here: this VM's hypervisor took 10-14% of CPU 1 in 2 of 20 launches
    # on 2026-12-03, which re-measured their pairs and moved the launch counts these tests assert
    # (the hog is their subject; steal's judgement has tests of its own in tests/test_disturbance.py).
    disturbance = default_config(testenv).compare.disturbance.model_copy(
        update={"client_cpus_foreign_share": None, "steal_share": 1.0})
    workdir = tmp_path_factory.mktemp("slow-spec")
    result, stored = vllm_compare(testenv, workdir, "slow-spec", ["baseline", "eagle3"],
                                  hog, port, margin_pct=5.0, max_trials=4, pairing="sequential", disturbance=disturbance)
    return SessionCompare(result, stored, hog, workdir / "db.sqlite")


def _as_postgres(argv: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; as root, run its tools as the postgres user.
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


class PostgresServer:
    """A real PostgreSQL server (initdb + pg_ctl on a free port) with one database; ``stop()``
    and ``start()`` take it down and bring it back (an outage), ``close()`` removes it."""

    def __init__(self) -> None:
        import glob
        import shutil
        import tempfile

        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb")]
        if not found[-1]:
            pytest.fail("PostgreSQL server binaries missing: scripts/test installs them (apt-get install postgresql)")
        self.bin_dir = Path(found[-1]).parent
        # Not under pytest's tmp_path: that folder is private to root and the server runs as postgres.
        self.data = Path(tempfile.mkdtemp(prefix="specperf-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.data, "postgres", "postgres")
        self.port = free_port()  # below the ephemeral range (free_port's docstring)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "specperf")
        self.start()
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "specperf", "specperf_test")
        self.url = f"postgresql+psycopg://specperf@127.0.0.1:{self.port}/specperf_test"

    def _run(self, *argv: str) -> None:
        subprocess.run(_as_postgres([str(self.bin_dir / argv[0]), *argv[1:]]), check=True, capture_output=True,
                       text=True)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.data / "server.log"),
                  "-o", f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def close(self) -> None:
        import shutil

        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass  # stopped already (a test's outage)
        shutil.rmtree(self.data, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server started for this test session (:class:`PostgresServer`)."""
    server = PostgresServer()
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own, which the test may stop and start."""
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path) -> str:
    """Each storage test runs on SQLite (a file) and on the real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/specperf.db"
    return request.getfixturevalue("postgres_url")


@pytest.fixture(scope="session")
def sshd() -> Iterator:
    """A real OpenSSH server on loopback for this test session (tests/ssh_server.py)."""
    from tests.ssh_server import SshServer

    server = SshServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator:
    """A real Slurm cluster on loopback for this test session (tests/slurm_cluster.py); Slurm's
    client commands (this process's and its children's) find it through ``SLURM_CONF``."""
    from tests.slurm_cluster import SlurmCluster

    cluster = SlurmCluster()
    before = os.environ.get("SLURM_CONF")
    os.environ.update(cluster.env())
    yield cluster
    if before is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = before
    cluster.close()


@pytest.fixture
def repo(tmp_path):
    """The fast fake engine's repository (tests/fake_engine_repo.py): (path, {tag: SHA})."""
    from tests.fake_engine_repo import make_repo

    path = tmp_path / "engine-repo"
    return path, make_repo(path)


@pytest.fixture
async def emulator():
    """The local Slack emulator (tests/slack_emulator.py), started and closed around a test."""
    from tests.slack_emulator import SlackEmulator

    emu = SlackEmulator()
    await emu.start()
    yield emu
    await emu.close()


@contextmanager
def stopped_at_end(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """``proc`` (a specperf started by a test), sent SIGTERM at the end of the block if it still
    runs, so a test that fails early leaves no compare and engine running under the next tests
    (specperf stops its engine's group on SIGTERM); SIGKILL after 60 s."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def first_trial_pgid(db_url: str, timeout_s: float = 90.0) -> int:
    """The pgid of the first trial a running specperf recorded in ``db_url`` (polled; a bisect
    makes its worktrees first, which on a busy machine takes tens of seconds)."""
    import time

    from sqlmodel import Session, select

    import storage

    db = storage.open_database(db_url)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with Session(db) as session:
            trial = session.exec(select(storage.Trial)).first()
        if trial and trial.pgid:
            return trial.pgid
        time.sleep(0.1)
    raise AssertionError(f"no trial was launched within {timeout_s:g} s")
