"""The bot's queue never loses, strands or silently fails a job (issue 14), each shown on the
real ``specperf bot`` process: restarted as a container would restart it (a new host name, PID
1 of a new PID namespace, through ``unshare`` as root), killed between the ack and the queue,
under a database outage, and stopped cleanly twice."""

from __future__ import annotations

import asyncio
import os
import signal

import psutil
import pytest
from sqlmodel import Session, select

import storage
from tests.bot_support import LOCKER, form, post_command, start_bot, wait_for, write_config
from tests.conftest import group_members
from tests.fake_engine_repo import make_repo

pytestmark = pytest.mark.e2e  # every test runs specperf (the bot or the CLI) as a process

LONG = "output_len = 2000\nrequests = 50\nwarmup_requests = 0\n"
SHORT = "output_len = 8\nrequests = 2\nwarmup_requests = 0\n"  # the jobs after a restart: quick launches
LEASE_S = 10  # renewed every 3.3 s; a bot starved of CPU for 2 s (a busy CI machine) kept it


def _trials(db):
    with Session(db) as session:
        return list(session.exec(select(storage.Trial).order_by(storage.Trial.id)))


def _container(hostname: str, new_pid_namespace: bool) -> list[str]:
    """A command prefix that runs the bot as a container would: under ``hostname`` and, with
    ``new_pid_namespace``, as PID 1 of a fresh PID namespace (killed with its ``unshare``)."""
    pid = ["--pid", "--mount-proc", "--kill-child"] if new_pid_namespace else []
    return ["unshare", "--uts", *pid, "sh", "-c", f'hostname {hostname} && exec "$@"', "sh"]


def _bot_pid(proc) -> int:
    """The bot's pid as seen from here (under ``unshare --kill-child`` it is unshare's child)."""
    if "--kill-child" not in proc.args:
        return proc.pid
    return psutil.Process(proc.pid).children()[0].pid


def _setup(tmp_path, emulator, port: int, url: str | None = None, **config_options):
    """The fake engine's repository and a bot config for it (``write_config`` options), the
    database URL (default: SQLite in ``tmp_path``), data directory, open bot log and database:
    (config, url, home, log, db)."""
    repo = tmp_path / "engine-repo"
    make_repo(repo)
    url = url or f"sqlite:///{tmp_path}/bot.db"
    config = write_config(tmp_path, repo, port, emulator.api_url, **config_options)
    return config, url, tmp_path / "home", open(tmp_path / "bot.log", "w"), storage.open_database(url)


async def _stop(proc) -> None:
    if proc.poll() is None:
        os.kill(_bot_pid(proc), signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 60)


async def test_a_bot_restarted_as_a_new_container_reclaims_the_dead_bots_job(tmp_path, emulator, unused_tcp_port):
    if os.geteuid() != 0:
        pytest.fail("this test runs the bot in new UTS and PID namespaces (unshare): run it as root")
    config, url, home, log, db = _setup(tmp_path, emulator, unused_tcp_port, workload=LONG, lease_s=LEASE_S,
                                        slack_extra="requeue_interrupted = true\n")

    # 1. the bot under host name box-a is killed mid-run; its engine lives on
    proc, port = await start_bot(config, url, home, log, _container("box-a", False))
    try:
        await post_command(port, form("compare slow --modes baseline", trigger="a1", response_url=emulator.response_url()))
        trial = await wait_for(lambda: next((t for t in _trials(db) if t.pgid), None), 60, what="the first launch")
        await asyncio.sleep(1.0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert group_members(trial.pgid) != [] and storage.get_job(db, 1).owner["host"] == "box-a"

    # 2. restarted under another host name (a recreated container): the dead owner is seen, the
    # engine stopped through its recorded group, the job queued again and run
    config.write_text(config.read_text().replace(LONG, SHORT))
    proc, port = await start_bot(config, url, home, log, _container("box-b", False))
    try:
        assert group_members(trial.pgid, trial.log_path) == []
        first = await wait_for(lambda: (j := storage.get_job(db, 1)).status in ("done", "failed") and j, 120,
                               what="job 1 run again")
        assert first.status == "done", first.reason
        assert first.attempts == 1 and "pid" in first.reason and "on box-a" in first.reason
        run = storage.load_run(db, trial.run_id).run
        assert run.status == "interrupted" and "was still running and was stopped" in run.reason
    finally:
        await _stop(proc)

    # 3. the bot as PID 1 of a PID namespace, killed; restarted as PID 1 of another one under the
    # same host name: "pid 1 on box-c" is the new bot itself, yet the job is orphaned once its
    # owner's lease runs out, and queued again
    config.write_text(config.read_text().replace(SHORT, LONG))
    proc, port = await start_bot(config, url, home, log, _container("box-c", True))
    try:
        await post_command(port, form("compare slow --modes baseline", trigger="c1"))
        await wait_for(lambda: any(t.pgid for t in _trials(db) if t.run_id != trial.run_id and t.run_id != first.run_id),
                       60, what="job 2's launch")
        job = storage.get_job(db, 2)
        assert job.status == "running" and job.owner["pid"] == 1 and job.owner["host"] == "box-c"
        os.kill(proc.pid, signal.SIGKILL)  # unshare dies; --kill-child kills the bot, the namespace goes
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    config.write_text(config.read_text().replace(LONG, SHORT))
    proc, port = await start_bot(config, url, home, log, _container("box-c", True))
    try:
        second = await wait_for(lambda: (j := storage.get_job(db, 2)).status in ("done", "failed") and j,
                                120, what="job 2 reclaimed after its owner's lease ran out")
        assert second.status == "done" and second.attempts == 1, second.reason
        assert "pid 1 on box-c" in second.reason
        assert all(group_members(t.pgid, t.log_path) == [] for t in _trials(db) if t.pgid)
    finally:
        await _stop(proc)
        log.close()
    assert proc.returncode == 0


async def test_commands_acknowledged_before_a_kill_are_all_carried_out_after_restart(tmp_path, emulator,
                                                                                      unused_tcp_port):
    config, url, home, log, db = _setup(tmp_path, emulator, unused_tcp_port, workload=LONG, lease_s=LEASE_S)
    proc, port = await start_bot(config, url, home, log)
    texts = [f"compare {ref} --modes baseline" for ref in ("slow", "noop", "slow --base base", "noop --base base",
                                                           "base --base slow")]
    try:  # a burst, then SIGKILL the moment the last ack is in: some commands are only acknowledged
        responses = await asyncio.gather(*(post_command(port, form(t, trigger=f"b{i}", response_url=emulator.response_url()))
                                           for i, t in enumerate(texts)))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert all(r.status_code == 200 and "working on it" in r.json()["text"] for r, _ in responses)
    commands = storage.list_commands(db)
    assert sorted(c.command for c in commands) == sorted(texts)  # every acknowledged command was on disk
    unanswered = [c for c in commands if c.result == "received"]

    config.write_text(config.read_text().replace(LONG, SHORT))
    proc, port = await start_bot(config, url, home, log)
    try:
        await wait_for(lambda: all(c.result != "received" for c in storage.list_commands(db)), 60,
                       what="every received command answered")
        jobs = storage.list_jobs(db, ("queued", "running", "done", "failed"))
        assert sorted(j.args["head_ref"] + " " + str(j.args["base_ref"]) for j in jobs) == sorted(
            ["slow None", "noop None", "slow base", "noop base", "base slow"])  # exactly one job per command
        assert all(c.result.startswith("queued job") for c in storage.list_commands(db))
        # each command resumed after the restart got its parent message in the channel
        for command in storage.list_commands(db):
            await wait_for(lambda c=command: any(f"job {c.job_id}," in r.body.get("text", "")
                                                 for r in emulator.recorded("chat.postMessage")), 30,
                           what=f"the answer to command {command.id}")
    finally:
        await _stop(proc)
        log.close()
    assert proc.returncode == 0
    assert "carrying it out" in (tmp_path / "bot.log").read_text() or not unanswered


async def test_the_worker_survives_postgresql_stopped_and_started_mid_job(tmp_path, emulator, unused_tcp_port,
                                                                           postgres_server):
    # launches of a few seconds each: the run's bookkeeping meets the outage; the default lease (60 s)
    # outlasts it (an outage longer than the lease: tests/test_bot_faults.py)
    config, url, home, log, db = _setup(tmp_path, emulator, unused_tcp_port, url=postgres_server.url, workload=SHORT,
                                        trials=4)
    proc, port = await start_bot(config, url, home, log)
    try:
        await post_command(port, form("compare slow --modes baseline", trigger="p1", response_url=emulator.response_url()))
        trial = await wait_for(lambda: next((t for t in _trials(db) if t.pgid), None), 60, what="the first launch")
        # the database goes away mid-run for 6 s: the next launch's bookkeeping (a launch takes
        # 1-3 s) meets the outage
        await asyncio.to_thread(postgres_server.stop)
        await asyncio.sleep(6)
        await asyncio.to_thread(postgres_server.start)
        job = await wait_for(lambda: (j := storage.get_job(db, 1)).status in ("done", "failed") and j, 180,
                             what="job 1 done after the outage")
        assert job.status == "done" and job.attempts == 1 and "database became unavailable" in job.reason
        assert group_members(trial.pgid, trial.log_path) == []
        assert storage.load_run(db, trial.run_id).run.status == "interrupted"
        # the host's worker is alive: a new command is queued and run
        await post_command(port, form("compare noop --modes baseline", trigger="p2", response_url=emulator.response_url()))
        second = await wait_for(lambda: (j := storage.get_job(db, 2)) and j.status in ("done", "failed") and j, 120,
                                what="job 2 run after the outage")
        assert second.status == "done", second.reason
    finally:
        await _stop(proc)
        log.close()
    assert proc.returncode == 0
    thread = [p.body["text"] for p in emulator.recorded("chat.postMessage")
              if p.body.get("thread_ts") == job.slack["thread_ts"]]
    assert any("database became unavailable" in t and "engine was stopped" in t for t in thread), thread
    assert any("queued again" in t for t in thread), thread
    said = " ".join(p.body.get("text", "") for p in emulator.recorded("chat.postMessage")) + " ".join(
        r.body.get("text", "") for r in emulator.recorded("response"))
    assert "SELECT" not in said and "INSERT" not in said and "UPDATE" not in said and "[SQL" not in said
    logged = (tmp_path / "bot.log").read_text()
    assert "database unavailable" in logged and "Traceback" not in logged


async def test_two_clean_stops_during_one_job_requeue_it_without_spending_the_crash_budget(tmp_path, emulator,
                                                                                           unused_tcp_port):
    config, url, home, log, db = _setup(tmp_path, emulator, unused_tcp_port, workload=LONG, lease_s=LEASE_S)
    first_post = True
    for _deploy in range(2):  # two deploys during one long job
        proc, port = await start_bot(config, url, home, log)
        try:
            if first_post:
                await post_command(port, form("compare slow --modes baseline", trigger="d1",
                                              response_url=emulator.response_url()))
                first_post = False
            launched = len([t for t in _trials(db) if t.pgid])
            await wait_for(lambda n=launched: len([t for t in _trials(db) if t.pgid]) > n, 60, what="a launch")
            await asyncio.sleep(0.5)
        finally:
            await _stop(proc)
        assert proc.returncode == 0
        job = storage.get_job(db, 1)
        assert (job.status, job.attempts) == ("queued", 0) and "stopped cleanly" in job.reason
    config.write_text(config.read_text().replace(LONG, SHORT))
    proc, port = await start_bot(config, url, home, log)
    try:
        job = await wait_for(lambda: (j := storage.get_job(db, 1)).status in ("done", "failed") and j, 120,
                             what="job 1 finished after two deploys")
    finally:
        await _stop(proc)
        log.close()
    assert job.status == "done" and job.attempts == 0, job.reason
    thread = [p.body["text"] for p in emulator.recorded("chat.postMessage")
              if p.body.get("thread_ts") == job.slack["thread_ts"]]
    assert len([t for t in thread if "stopped cleanly" in t and "queued again" in t]) == 2, thread
    assert all(group_members(t.pgid, t.log_path) == [] for t in _trials(db) if t.pgid)


async def test_a_database_locked_mid_compare_is_one_line_exit_2_and_the_run_marked(tmp_path, emulator,
                                                                                  unused_tcp_port):
    import subprocess
    import sys

    from tests.conftest import ROOT, SPECPERF

    repo = tmp_path / "engine-repo"
    make_repo(repo)
    path = tmp_path / "runs.db"
    url = f"sqlite:///{path}"
    config = write_config(tmp_path, repo, unused_tcp_port, emulator.api_url, workload=SHORT, trials=6)
    db = storage.open_database(url)
    proc = subprocess.Popen([*SPECPERF, "--config", str(config), "compare", "slow", "--modes", "baseline", "--db", url],
                            cwd=ROOT, env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        trial = await wait_for(lambda: next((t for t in _trials(db) if t.pgid), None), 60, what="the first launch")
        # another process holds the database for 12 s: the compare's next write fails (SQLite's 5 s wait)
        locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(path), "12"], stdout=subprocess.PIPE, text=True)
        assert (await asyncio.to_thread(locker.stdout.readline)).strip() == "locked"
        _out, err = await asyncio.to_thread(proc.communicate, timeout=120)
        locker.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("storage error: the database failed during the run"), err
    assert "database is locked" in lines[0] and "SELECT" not in err and "UPDATE" not in err and "INSERT" not in err
    assert f"run {trial.run_id} is marked failed" in lines[0]
    run = storage.load_run(db, trial.run_id).run
    assert run.status == "failed" and "database is locked" in run.reason
    assert all(group_members(t.pgid, t.log_path) == [] for t in _trials(db) if t.pgid)


async def test_malformed_requests_are_refused_with_one_short_log_line_and_replays_survive_a_restart(
        tmp_path, emulator, unused_tcp_port):
    from tests.slack_emulator import signed_headers

    repo = tmp_path / "engine-repo"
    make_repo(repo)
    url = f"sqlite:///{tmp_path}/bot.db"
    config = write_config(tmp_path, repo, unused_tcp_port, emulator.api_url)
    home, log_path = tmp_path / "home", tmp_path / "bot.log"
    log = open(log_path, "w")
    proc, port = await start_bot(config, url, home, log)
    good = form("queue", trigger="q1", response_url=emulator.response_url())
    signed = signed_headers(good)
    try:
        bad = [
            ({**signed, "X-Slack-Request-Timestamp": "12ab"}, good),  # malformed timestamp
            ({**signed, "X-Slack-Signature": "v0=\u00e9".encode("latin-1")}, good),  # non-ASCII signature
            ({**signed, "X-Slack-Signature": "v0=" + "0" * 64}, good),  # wrong signature
            ({k: v for k, v in signed.items() if k != "X-Slack-Signature"}, good),  # none
        ]
        big = form("compare " + "a" * (1 << 20))
        for _ in range(10):
            for headers, body in bad:
                response, _ = await post_command(port, body, headers)
                assert response.status_code == 401, response.text
            response, _ = await post_command(port, big)  # validly signed, 1 MB
            assert response.status_code == 400
        garbled = b"\xff\xfe%%%=&&"
        response, _ = await post_command(port, garbled)  # validly signed, not a form at all
        assert response.status_code == 400
        not_json = b"this is not json"  # validly signed, says JSON, is not
        response, _ = await post_command(port, not_json, {**signed_headers(not_json), "Content-Type": "application/json"})
        assert response.status_code == 400 and "Traceback" not in response.text, response.text
        bad_payload = b"payload={bad"  # a validly signed interactive form whose payload is not JSON
        response, _ = await post_command(port, bad_payload)
        assert response.status_code == 400 and "Traceback" not in response.text, response.text
        long_ref, _ = await post_command(port, form("compare " + "r" * 300, trigger="l1"))  # a 300-character ref
        assert long_ref.status_code == 200 and "at most 255" in long_ref.json()["text"]
        long_text, _ = await post_command(port, form("compare x " + "y" * 3000, trigger="l2"))
        assert long_text.status_code == 200 and "at most 2,000 are read" in long_text.json()["text"]
        first, _ = await post_command(port, good, signed)
        assert first.status_code == 200
    finally:
        await _stop(proc)
    # the same signed request after a restart, inside Slack's 5-minute window: refused
    proc, port = await start_bot(config, url, home, log)
    try:
        replay, _ = await post_command(port, good, signed)
        assert replay.status_code == 401 and "replayed" in replay.text
    finally:
        await _stop(proc)
        log.close()
    logged = log_path.read_text()
    refusals = [line for line in logged.splitlines() if " HTTP 40" in line]
    assert len(refusals) == 10 * 5 + 4 and "Traceback" not in logged
    assert max(len(line) for line in logged.splitlines()) < 500
    assert [c.command for c in storage.list_commands(storage.open_database(url))].count("queue") == 1


def test_bisect_checks_its_refs_before_opening_the_database(tmp_path, repo):
    import subprocess

    from tests.bot_support import write_config
    from tests.conftest import ROOT, SPECPERF

    config = write_config(tmp_path, repo[0], 1, "http://127.0.0.1:1/api/")
    for good, bad in (("base;touch /tmp/x", "slow"), ("base", "no-such-ref")):
        path = tmp_path / "runs.db"
        done = subprocess.run([*SPECPERF, "--config", str(config), "bisect", good, bad, "--db", f"sqlite:///{path}",
                               "--no-wait"], cwd=ROOT, env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stderr.startswith("git error:"), done.stderr
        assert not path.exists()  # nothing was made, no lock taken


def test_secrets_from_the_environment_are_never_stored(tmp_path, repo, unused_tcp_port):
    import json
    import subprocess

    from tests.conftest import ROOT, SPECPERF

    config = write_config(tmp_path, repo[0], unused_tcp_port, "http://127.0.0.1:1/api/", trials=1)
    text = config.read_text()
    text = text.replace('env = { PYTHONPATH', 'env = { HF_TOKEN = "${HF_TOKEN}", LABEL = "run-${VLLM_API_KEY}", PYTHONPATH')
    text = text.replace('command = ["{python}", "-m"', 'command = ["{python}", "-X", "tag=${VLLM_API_KEY}", "-m"')
    config.write_text(text.replace("[compare]\nmin_trials = 1\nmax_trials = 1", "[compare]\nmin_trials = 2\nmax_trials = 2"))
    url = f"sqlite:///{tmp_path}/runs.db"
    secrets = {"HF_TOKEN": "hf_secretvalue123", "VLLM_API_KEY": "sk-apikey456789"}
    done = subprocess.run([*SPECPERF, "--config", str(config), "compare", "slow", "--modes", "baseline", "--db", url],
                          cwd=ROOT, env={**os.environ, **secrets, "SPECPERF_HOME": str(tmp_path / "home")},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    db = storage.open_database(url)
    run = storage.load_run(db, 1)
    stored = json.dumps(run.run.settings) + json.dumps([t.argv for t in run.trials])
    assert all(value not in stored for value in secrets.values())
    assert run.run.settings["engine"]["env"]["HF_TOKEN"] == "<redacted>"
    assert run.run.settings["engine"]["env"]["LABEL"] == "run-<redacted>"
    assert "tag=<redacted>" in run.trials[0].argv


@pytest.mark.parametrize("case", ["auth-500", "unreachable", "app-token-refused"])
async def test_bot_start_up_against_a_misbehaving_slack_is_one_line_and_an_exit_status(tmp_path, emulator, repo,
                                                                                     unused_tcp_port, case):
    import subprocess
    import time

    from tests.conftest import ROOT, SPECPERF

    api_url, mode = emulator.api_url, "http"
    if case == "auth-500":
        emulator.script("auth.test", *[500] * 6)  # the first call and its 5 retries
    elif case == "unreachable":
        api_url = f"http://127.0.0.1:{unused_tcp_port}/api/"  # nothing listens there
    else:
        emulator.script("apps.connections.open", "invalid_auth")
        mode = "socket"
    config = write_config(tmp_path, repo[0], unused_tcp_port, api_url, mode=mode)
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *SPECPERF, "--config", str(config), "bot", "--db", f"sqlite:///{tmp_path}/bot.db", cwd=ROOT,
        env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    seconds = time.monotonic() - start
    errors = [line for line in err.decode().splitlines() if "error" in line.lower()]
    assert "Traceback" not in err.decode() and out.decode() == "", err.decode()
    assert len(errors) == 1, err.decode()
    if case == "app-token-refused":
        assert proc.returncode == 2 and errors[0] == "config error: Slack refused the app token: invalid_auth"
    elif case == "auth-500":
        assert proc.returncode == 5 and errors[0].startswith("Slack error: Slack answered HTTP 500 to the bot token")
    else:
        assert proc.returncode == 5 and errors[0].startswith("Slack error: Slack unreachable at")
    assert seconds < 60  # bounded retries


async def test_an_outage_longer_than_the_lease_mid_job_requeues_it_and_the_worker_runs_on(tmp_path, emulator,
                                                                                           unused_tcp_port):
    # Lease 20 s: the fence stops jobs after 13.3 s unrenewed. The database is held for 30 s (1.5x the
    # lease) while quick launches write often, so the job's own write fails first (SQLite waits 5 s)
    # and the fence lands while the job is recovering from it: the case that ended the host's worker.
    import httpx

    from tests.bot_support import hold_sqlite
    from tests.slack_emulator import signed_headers

    config, url, home, log, db = _setup(tmp_path, emulator, unused_tcp_port, workload=SHORT, trials=6, lease_s=20)
    proc, port = await start_bot(config, url, home, log)
    try:
        await post_command(port, form("compare slow --modes baseline", trigger="o1", response_url=emulator.response_url()))
        await wait_for(lambda: len([t for t in _trials(db) if t.status == "ok"]) >= 1, 60, what="a measured launch")
        locker = await asyncio.to_thread(hold_sqlite, tmp_path / "bot.db", 30)
        await asyncio.sleep(8)
        # a command during the outage: refused 503 while the database is away, so sent again as
        # Slack retries an unacknowledged delivery, until it is taken
        body = form("compare noop --modes baseline", trigger="o2", response_url=emulator.response_url())
        for attempt in range(12):
            headers = {**signed_headers(body), **({"X-Slack-Retry-Num": str(attempt)} if attempt else {})}
            response, _ = await post_command(port, body, headers)
            if response.status_code == 200:
                break
            assert response.status_code == 503 and "database unavailable" in response.text, response.text
            await asyncio.sleep(5)
        assert response.status_code == 200, response.text
        await asyncio.to_thread(locker.wait, 60)
        first = await wait_for(lambda: (j := storage.get_job(db, 1)).status in ("done", "failed") and j, 240,
                               what="job 1 run to its end after the outage")
        assert first.status == "done", first.reason
        second = await wait_for(lambda: (j := storage.get_job(db, 2)) and j.status in ("done", "failed") and j, 240,
                                what="job 2, sent during the outage, run after job 1")
        assert second.status == "done", second.reason
        assert second.started_at >= first.finished_at  # one job at a time on the host: after job 1's end
        async with httpx.AsyncClient(timeout=10) as client:
            health = await client.get(f"http://127.0.0.1:{port}/health")
        assert health.status_code == 200 and health.text.strip() == "ok", health.text
    finally:
        await _stop(proc)
        log.close()
    assert proc.returncode == 0
    logged = (tmp_path / "bot.log").read_text()
    assert "database unavailable" in logged and "Traceback" not in logged
    assert "the worker of host local ended" not in logged  # the supervisor had nothing to restart
    assert all(group_members(t.pgid, t.log_path) == [] for t in _trials(db) if t.pgid)
