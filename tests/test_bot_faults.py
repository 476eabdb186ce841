"""Issue 14's remaining hostile edges, each in the fast tier (no engine, no server process):
an SSH host key that cannot be checked names the config file, key and command; a config error
never echoes a secret; Slack failure texts are redacted; Socket Mode reconnects with bounded,
jittered backoff; a locked SQLite database never blocks the bot's event loop; and a bot that
could not renew its lease stops its job before another bot may take it."""

from __future__ import annotations

import asyncio

import asyncssh
import pytest

import core
from bot._common import open_host
from bot._settings import parse_config
from core._experiments.compare import CompareRequest
from tests.bot_support import hold_sqlite

# -- item 11: an SSH host key that cannot be checked ------------------------------------------


@pytest.fixture
async def ssh_listener():
    """An in-process SSH server on loopback (asyncssh, a fresh ed25519 host key) that accepts
    the connection's start only: enough for the host-key check. Yields (port, public key line)."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.create_server(asyncssh.SSHServer, "127.0.0.1", 0, server_host_keys=[key])
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, key.export_public_key().decode().strip()
    finally:
        server.close()
        await server.wait_closed()


def _config(tmp_path, port: int, known_hosts) -> tuple[core.Config, str]:
    path = tmp_path / "specperf.toml"
    known = f'known_hosts = "{known_hosts}"\n' if known_hosts else ""
    path.write_text(f'[hosts.gpu-a]\nssh = "root@127.0.0.1"\nport = {port}\nconnect_timeout_s = 5\n{known}')
    from bot._settings import load_config

    return load_config(str(path)), str(path)


@pytest.mark.parametrize("case", ["missing file", "no key", "changed key"])
async def test_an_unknown_host_key_names_the_config_file_the_key_and_what_to_run(tmp_path, ssh_listener, case,
                                                                                monkeypatch):
    port, public = ssh_listener
    known = tmp_path / "known_hosts"
    if case == "no key":
        known.write_text("")
    elif case == "changed key":
        other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
        known.write_text(f"[127.0.0.1]:{port} {other}\n")
    monkeypatch.setenv("SPECPERF_HOME", str(tmp_path / "home"))
    config, path = _config(tmp_path, port, known)
    with pytest.raises(core.HostError) as error:
        async with open_host(config, "gpu-a") as host:
            await host.run(["true"])
    message = str(error.value)
    assert message.startswith(f"{path}: hosts.gpu-a.known_hosts: "), message
    assert f"set hosts.gpu-a.known_hosts in {path} to a file that has it" in message
    assert f"ssh-keyscan -p {port} 127.0.0.1 >> {known}" in message
    if case == "missing file":
        assert f"{known} does not exist" in message
    elif case == "no key":
        assert f"{known} has no key for 127.0.0.1:{port}" in message
    else:
        assert f"is not the one in {known}" in message and f"ssh-keygen -R '[127.0.0.1]:{port}' -f {known}" in message


def test_no_engine_configured_says_so_in_every_front_end():
    config = parse_config('[hosts.local]\n')
    from bot import _app as app
    from core._api import _only

    for pick in (lambda: app.choose(config), lambda: _only(config.engines, None, "engine")):
        with pytest.raises(core.ConfigError) as error:
            pick()
        assert str(error.value) == "no engine is configured; add a [engines.<name>] table to the config"


def test_a_bad_compare_option_is_named():
    from bot import _app as app

    with pytest.raises(core.ConfigError, match=r"bad compare option --margin-pct: Input should be greater than 0"):
        app.compare_settings(parse_config(""), margin_pct=-1)


def test_min_trials_above_max_trials_names_the_keys():
    from bot import _app as app

    with pytest.raises(core.ConfigError) as error:
        app.compare_settings(parse_config(""), min_trials=8, max_trials=4)
    assert str(error.value) == "bad compare option --max-trials: max_trials (4) is below min_trials (8)"
    with pytest.raises(core.ConfigError) as error:  # the config's max_trials, the command line's min_trials
        app.compare_settings(parse_config("[compare]\nmax_trials = 6\n"), min_trials=10)
    assert str(error.value) == "bad compare option [compare].max_trials: max_trials (6) is below min_trials (10)"
    with pytest.raises(core.ConfigError) as error:  # in the file itself
        parse_config("[compare]\nmin_trials = 9\nmax_trials = 5\n", "specperf.toml")
    assert "specperf.toml: compare.max_trials: max_trials (5) is below min_trials (9)" in str(error.value)


# -- item 9's rest: a configuration error never echoes a secret --------------------------------


@pytest.mark.parametrize("text, key", [
    ('[slack]\nbot_token = 80123456789\n', "slack.bot_token"),  # a wrong-typed token, literally
    ('[slack]\nsigning_secret = ["s3cr3t-80123456789"]\n', "slack.signing_secret"),
    ('[engines.e]\nkind = "vllm"\nenv = { HF_TOKEN = "hf_80123456789" }\n', "engines.e"),  # the whole table echoed
    ('[engines.e]\nkind = "vllm"\nmodel = "m"\nenv = { HF_TOKEN = 80123456789 }\n', "engines.e.env.HF_TOKEN"),
    ('[storage]\nurl = ["postgresql://specperf:pw80123456789@db.example/runs"]\n', "storage.url"),
])
def test_a_config_error_never_echoes_a_secret(text, key):
    with pytest.raises(core.ConfigError) as error:
        parse_config(text, "specperf.toml")
    message = str(error.value)
    assert message.startswith(f"specperf.toml: {key}: ") and "80123456789" not in message, message
    assert "<redacted>" in message


# -- Slack failure texts go out redacted -------------------------------------------------------


async def test_slack_failure_texts_and_log_lines_are_redacted(tmp_path, emulator, monkeypatch):
    import io
    import json
    import logging

    import storage
    from bot._settings import SlackConfig
    from bot._slack.client import RedactingFormatter, web_client
    from bot._slack.notifier import SlackNotifier

    monkeypatch.setenv("HF_TOKEN", "hf_leak80123456789")
    slack = SlackConfig(bot_token="xoxb-test", api_url=emulator.api_url, channel_interval_s=0, progress_interval_s=0)
    db = storage.open_database(f"sqlite:///{tmp_path}/bot.db")
    notifier = SlackNotifier(web_client(slack), slack, db)
    job = storage.enqueue(db, storage.Job(host="local", engine_name="e", workload_name="default", user_id="U1",
                                          channel_id="C1", slack={"channel": "C1", "thread_ts": "1.000001",
                                                                  "response_url": emulator.response_url()}))
    reason = ("git error: cannot fetch https://bot:ghp_leak80123456789@git.example/engine.git; "
              "the engine printed hf_leak80123456789")
    for script in ((), ("not_in_channel",)):  # threaded, then through the response URL when refused
        emulator.script("chat.postMessage", *script)
        await notifier.job_finished(job, None, None, reason)
    said = json.dumps([c.body for c in emulator.recorded("chat.postMessage") + emulator.recorded("response")])
    assert said.count("https://bot:<redacted>@git.example/engine.git") == 4  # text and block, twice
    assert "80123456789" not in said and "the engine printed <redacted>" in said

    # a log line after a Slack failure, exception text included, as specperf bot writes it
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("specperf.test-redaction")
    logger.addHandler(handler)
    try:
        try:
            raise OSError("Cannot connect to proxy http://me:pw80123456789@proxy.example:3128 (hf_leak80123456789)")
        except OSError as exc:
            logger.warning("chat.postMessage in C1 failed: %s", exc, exc_info=True)
    finally:
        logger.removeHandler(handler)
    assert "80123456789" not in out.getvalue() and "http://me:<redacted>@proxy.example:3128" in out.getvalue()


# -- Socket Mode reconnects with bounded, jittered backoff ----------------------------------


def test_reconnect_delays_are_bounded_jittered_and_never_a_tight_loop():
    import random

    from bot._slack.socket_mode import reconnect_delay_s

    rng = random.Random(7)
    for attempt in range(1, 40):
        ceiling = min(60.0, 2.0 ** (attempt - 1))
        delays = [reconnect_delay_s(attempt, rng=rng) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays) and min(delays) >= 0.5
        assert len(set(delays)) == 50  # jittered: no two bots (or attempts) in lockstep
    assert reconnect_delay_s(10**6, rng=rng) <= 60.0


async def test_socket_mode_reconnects_with_backoff_and_one_line_per_attempt(emulator, caplog):
    import logging

    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    from bot._slack.socket_mode import SocketHandler

    app = AsyncApp(client=AsyncWebClient(token="xoxb-test", base_url=emulator.api_url),
                   request_verification_enabled=False)

    @app.command("/specperf")
    async def _ack(ack):
        await ack(text="pong")

    handler = SocketHandler(app, "xapp-test", base_s=0.2, cap_s=0.4)
    caplog.set_level(logging.INFO, logger="specperf.bot")
    try:
        await handler.client.connect(max_attempts=3)
        assert (await emulator.send_envelope({"command": "/specperf", "text": "ping", "user_id": "U1",
                                              "channel_id": "C1", "team_id": "T1"}))["payload"]["text"] == "pong"
        opened = len(emulator.recorded("apps.connections.open", ok_only=False))
        emulator.script("apps.connections.open", "invalid_auth", "invalid_auth", "invalid_auth")
        emulator._ws_connected.clear()
        await emulator._ws.close()  # Slack drops the link; the next three URLs are refused, the fourth served
        await asyncio.wait_for(emulator._ws_connected.wait(), 10)
        ack = await emulator.send_envelope({"command": "/specperf", "text": "ping again", "user_id": "U1",
                                            "channel_id": "C1", "team_id": "T1"})
        assert ack["payload"]["text"] == "pong"
    finally:
        await handler.close_async()
    calls = emulator.recorded("apps.connections.open", ok_only=False)[opened:]
    assert len(calls) == 4
    gaps = [b.at - a.at for a, b in zip(calls, calls[1:])]
    assert 0.1 <= gaps[0] <= 0.5 and all(0.2 <= g <= 0.6 for g in gaps[1:]), gaps  # backoff, capped, never 0
    lines = [r.getMessage() for r in caplog.records if r.name == "specperf.bot"]
    failed = [line for line in lines if "connection attempt" in line]
    assert lines.count("Socket Mode: connection lost; reconnecting") == 1, lines
    assert [line.split(" failed: ")[1].split(";")[0] for line in failed] == ["Slack refused the app token (invalid_auth)"] * 3
    assert all("fix [slack].app_token; next attempt in 0." in line for line in failed), failed
    assert "Socket Mode: connected after 4 attempts" in lines


# -- a locked SQLite database never blocks the bot's event loop -------------------------------


async def test_reconciling_under_a_locked_sqlite_database_never_blocks_the_event_loop(tmp_path):
    import socket
    import sqlite3
    import subprocess
    import time

    from sqlmodel import Session

    import storage
    from bot._runs import reconcile_runs

    path = tmp_path / "bot.db"
    db = storage.open_database(f"sqlite:///{path}")
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that has just ended: its run was left running by a killed specperf
    with Session(db) as session:
        run = storage.Run(engine_name="e", workload_name="default", base_ref="a", base_sha="a", head_ref="b",
                          head_sha="b", modes=["baseline"], settings={"owner": {"pid": gone.pid,
                                                                                "host": socket.gethostname()}})
        session.add(run)
        session.commit()
        run_id = run.id
    locker = sqlite3.connect(path, isolation_level=None)  # another writer holds the database for 1.5 s
    locker.execute("BEGIN EXCLUSIVE")
    loop = asyncio.get_running_loop()
    loop.call_later(1.5, locker.execute, "ROLLBACK")
    gaps, stop = [], False

    async def ticker():
        last = time.monotonic()
        while not stop:
            await asyncio.sleep(0.02)
            gaps.append(time.monotonic() - last)
            last = time.monotonic()

    ticking = asyncio.create_task(ticker())
    started = time.monotonic()
    closed = await reconcile_runs(db, parse_config(""))
    stop = True
    await ticking
    locker.close()
    assert [run_id] == [r for r, _ in closed] and time.monotonic() - started >= 1.4  # it waited for the lock...
    assert max(gaps) < 0.3, max(gaps)  # ...in a thread: the loop kept turning (acks, heartbeats, other hosts)
    assert storage.load_run(db, run_id).run.status == "interrupted"


@pytest.mark.alone  # the loop's lateness is read off a 20 ms ticker: other tests' load on the CPUs moves it
async def test_a_compare_whose_writes_wait_on_a_locked_database_never_blocks_the_event_loop(tmp_path):
    """A compare through the application layer (as a bot job or `specperf compare` runs it) on
    core.testing.FakeHost, while another process holds the SQLite database for 2.5 s from the
    second launch on: the run's writes wait in their own thread, the event loop keeps turning
    (the bot's heartbeats, Slack acks and cancels run on it), and once the lock is gone every
    trial and verdict is stored, in order. Before the writes left the loop (issue 29), each one
    stopped it until the lock was released: a lag of 1.95 s with a 2 s lock (2026-12-03)."""
    import time

    import storage
    from bot import _app
    from core.testing import FakeHost, fake_engine_config
    from tests.bot_support import hold_sqlite
    from tests.fake_engine_repo import linear_history, make_repo

    shas = make_repo(tmp_path / "repo", linear_history(n=2, slow=2, tag="c", first="c0"))
    held_s = 2.5
    path = tmp_path / "runs.db"
    db = storage.open_database(f"sqlite:///{path}")
    host = FakeHost(tmp_path / "work", lambda launch: 20.0)
    request = CompareRequest(
        engine_name="fake", engine=fake_engine_config(tmp_path / "repo"), workload_name="w",
        workload=core.WorkloadConfig(output_len=4, concurrency=4, requests=8, warmup_requests=0), head_ref="c2",
        base_ref="c1", modes=["baseline"], host=host,
        settings=core.CompareConfig(min_trials=4, max_trials=4, cooldown_s=0.1, on_disturbed="keep"))
    lockers = []

    class LockOnSecondLaunch(core.CompareObserver):
        def trial_launched(self, arm, seq, process) -> None:
            if seq == 2:
                lockers.append((hold_sqlite(path, held_s), time.monotonic()))

    gaps, stop = [], False

    async def ticker():
        last = time.monotonic()
        while not stop:
            await asyncio.sleep(0.02)
            gaps.append((time.monotonic() - last, last))
            last = time.monotonic()

    ticking = asyncio.create_task(ticker())
    started = time.monotonic()
    run_id, result = await _app.compare(parse_config(""), db, request, (shas["c1"], shas["c2"]),
                                        _app.Session("test"), LockOnSecondLaunch())
    seconds = time.monotonic() - started
    stop = True
    await ticking
    (locker, locked_at), = lockers
    locker.wait()
    assert result.status == "done", result.reason
    assert seconds >= held_s - 0.2  # the compare waited for its writes...
    # ...in their own thread: while the lock was held the loop kept turning (a 20 ms tick's lateness)
    # (a loop blocked by the writes lags by about the whole lock; the whole suite's load on 2 vCPUs
    # has delayed a free loop's tick by 0.65 s, CI 2026-12-04, so the line is drawn at half the lock)
    lag_s = max(gap for gap, tick_from in gaps if tick_from >= locked_at) - 0.02
    assert lag_s < held_s / 2, lag_s
    stored = storage.load_run(db, run_id)
    assert stored.run.status == "done"
    assert sorted(t.seq for t in stored.trials) == list(range(1, 9)) and all(t.status == "ok" for t in stored.trials)
    assert {v.mode: v.verdict for v in stored.verdicts} == {"baseline": result.verdicts["baseline"].verdict}


def test_a_write_that_fails_behind_the_loop_stops_the_compare_at_the_next_hook():
    """storage.WriteBehind keeps the first failed write and raises it on the loop at the next
    hook (the compare stops there, its engine stopped) and from drain(); writes after it are
    dropped, since they would build on a row that is not there."""
    import time

    import storage

    done = []

    class Failing(core.CompareObserver):
        def progress(self, message) -> None:
            if message == "bad":
                raise RuntimeError("database is locked")
            done.append(message)

    behind = storage.WriteBehind(Failing())
    behind.progress("one")
    behind.progress("bad")
    deadline = time.monotonic() + 10
    while behind._error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(RuntimeError, match="database is locked"):
        behind.progress("two")
    with pytest.raises(RuntimeError, match="database is locked"):
        behind.drain()
    assert done == ["one"]


def test_writes_that_the_database_does_not_take_overflow_into_an_error_not_a_drop():
    """A database that takes no write: the writes wait, up to max_pending, and the next is a
    StorageError at the hook (the compare stops there); once the database answers every
    waiting write lands, in order."""
    import threading

    import storage

    gate, writing, done = threading.Event(), threading.Event(), []

    class Stuck(core.CompareObserver):
        def progress(self, message) -> None:
            writing.set()
            gate.wait(10)
            done.append(message)

    behind = storage.WriteBehind(Stuck(), max_pending=3)
    behind.progress(0)
    assert writing.wait(10)  # the writer holds the first write; three more may wait
    for n in range(1, 4):
        behind.progress(n)
    with pytest.raises(storage.StorageError, match="has taken none of the last 3 writes"):
        behind.progress(4)
    gate.set()
    behind.drain()
    assert done == [0, 1, 2, 3]


# -- an outage longer than the lease never runs a job twice -----------------------------------

def test_a_job_taken_over_is_never_closed_or_requeued_by_its_old_owner(tmp_path):
    import datetime as dt

    import storage

    db = storage.open_database(f"sqlite:///{tmp_path}/q.db")
    job = storage.enqueue(db, storage.Job(host="local", engine_name="e", workload_name="w", user_id="U", channel_id="C"))
    old = storage.claim_next(db, "local")  # bot A's claim; A then loses the database for longer than its lease
    assert storage.requeue_or_fail(db, job.id, True, "A's lease ran out", old.started_at) == "queued"  # bot B's reclaim
    new = storage.claim_next(db, "local")  # ...and B runs it
    assert new.id == job.id and new.started_at != old.started_at
    # A, back, tries to close or re-queue its old claim: nothing happens, B's run goes on
    assert storage.requeue(db, job.id, "A: lease lost", old.started_at) is False
    assert storage.requeue_or_fail(db, job.id, True, "A: database lost", old.started_at) is None
    assert storage.requeue_or_fail(db, job.id, True, "a second reclaimer, late", old.started_at) is None
    now = storage.get_job(db, job.id)
    assert (now.status, now.attempts, now.started_at) == ("running", 1, new.started_at)
    assert storage.requeue(db, job.id, "B stops cleanly", new.started_at) is True  # the current claim still acts
    assert storage.requeue(db, job.id, "no claim given: as before", None) is True
    assert storage.get_job(db, job.id).status == "queued" and isinstance(new.started_at, dt.datetime)


@pytest.mark.alone  # the lease left read every 0.1 s beside a 2.5 s lock
async def test_the_lease_left_falls_while_the_database_is_locked_and_recovers(tmp_path):
    import time

    import storage

    path = tmp_path / "bot.db"
    heartbeat = storage.Heartbeat(storage.open_database(f"sqlite:///{path}"), lease_s=1.5).start()
    try:
        assert 1.0 < heartbeat.lease_left_s() <= 1.5
        locker = await asyncio.to_thread(hold_sqlite, path, 2.5)
        lowest = min([heartbeat.lease_left_s() for _ in range(22) if not time.sleep(0.1)])
        await asyncio.to_thread(locker.wait, 10)
        await asyncio.sleep(1.0)  # the blocked renewal goes through, then the next beat
        assert lowest < 0 and heartbeat.lease_left_s() > 0.5, (lowest, heartbeat.lease_left_s())
    finally:
        heartbeat.stop()


@pytest.mark.alone  # the engine stopped within the 3 s lease
@pytest.mark.e2e
async def test_a_bot_that_cannot_renew_its_lease_stops_its_job_before_the_lease_runs_out(tmp_path, emulator,
                                                                                       unused_tcp_port):
    import os
    import signal
    import time

    from sqlmodel import Session, select

    import storage
    from tests.bot_support import form, post_command, start_bot, wait_for, write_config
    from tests.conftest import group_members
    from tests.fake_engine_repo import make_repo

    lease_s = 3.0
    repo = tmp_path / "engine-repo"
    make_repo(repo)
    path = tmp_path / "bot.db"
    url = f"sqlite:///{path}"
    config = write_config(tmp_path, repo, unused_tcp_port, emulator.api_url, lease_s=lease_s,
                          workload="output_len = 2000\nrequests = 50\nwarmup_requests = 0\n")
    db = storage.open_database(url)

    def launched():
        with Session(db) as session:
            return [t for t in session.exec(select(storage.Trial).order_by(storage.Trial.id)) if t.pgid]

    log = open(tmp_path / "bot.log", "w")
    proc, port = await start_bot(config, url, tmp_path / "home", log)
    try:
        await post_command(port, form("compare slow --modes baseline", trigger="f1", response_url=emulator.response_url()))
        first = (await wait_for(launched, 60, what="the first launch"))[0]
        await asyncio.sleep(0.5)
        locked_at = time.monotonic()  # the database is away for twice the lease; the last renewal began before this
        locker = await asyncio.to_thread(hold_sqlite, path, 2 * lease_s)
        await wait_for(lambda: group_members(first.pgid) == [], 2 * lease_s, interval=0.05, what="the engine stopped")
        stopped_after = time.monotonic() - locked_at
        assert stopped_after < lease_s, stopped_after  # before any other bot could count it as dead
        await asyncio.to_thread(locker.wait, 30)
        # back: the run is marked, the job queued again without spending its crash re-queue (and taken again)
        job = await wait_for(lambda: (j := storage.get_job(db, 1)).reason and "renew its lease" in j.reason and j, 30,
                             what="job 1 queued again")
        assert job.attempts == 0 and job.status in ("queued", "running") and job.run_id != first.run_id
        assert storage.load_run(db, first.run_id).run.status == "interrupted"

        def thread():
            return [p.body["text"] for p in emulator.recorded("chat.postMessage")
                    if p.body.get("thread_ts") == job.slack["thread_ts"]]
        await wait_for(lambda: any("could not renew its lease" in t and "queued again" in t for t in thread()), 30,
                       what="the note in the job's thread")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 60)
        log.close()
    logged = (tmp_path / "bot.log").read_text()
    assert "job 1: stopping it: this bot's lease was last renewed 2 s ago (the lease is 3 s)" in logged
    assert "job 1: queued again" in logged and "Traceback" not in logged
    assert all(group_members(t.pgid, t.log_path) == [] for t in launched())


def test_a_command_resumed_after_its_job_was_queued_finds_that_job(tmp_path):
    import storage

    db = storage.open_database(f"sqlite:///{tmp_path}/q.db")

    def job():
        return storage.Job(host="local", engine_name="e", workload_name="w", user_id="U", channel_id="C",
                           dedupe_key="T1:trigger-7")
    first = storage.enqueue(db, job())  # the bot queued it, then died before answering the command
    assert storage.enqueue(db, job()) is None  # the next bot carries the command out again: no second job
    assert storage.job_by_key(db, "T1:trigger-7").id == first.id and storage.job_by_key(db, "T1:other") is None
