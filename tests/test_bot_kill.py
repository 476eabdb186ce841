"""The bot as users run it (`specperf bot`, a real process in HTTP mode) killed with SIGKILL in
the middle of a run, then restarted: the orphaned engine group is stopped, the job is marked
interrupted and queued again once, the other queued jobs each run exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections import Counter

import pytest
from sqlmodel import Session, select

import storage
from tests.bot_support import form, post_command, wait_for, write_config
from tests.conftest import ROOT, SPECPERF, group_members
from tests.fake_engine_repo import make_repo
from tests.slack_emulator import SlackEmulator

LONG = "output_len = 2000\nrequests = 50\nwarmup_requests = 0\n"
SHORT = "output_len = 8\nrequests = 2\nwarmup_requests = 0\n"  # the jobs after a restart: quick launches


@pytest.fixture
async def emulator():
    emu = SlackEmulator()
    await emu.start()
    yield emu
    await emu.close()


async def _start(config, url, home, log):
    proc = subprocess.Popen([*SPECPERF, "--config", str(config), "bot", "--db", url], cwd=ROOT,
                            env={**os.environ, "SPECPERF_HOME": str(home)}, stdout=subprocess.PIPE,
                            stderr=log, text=True)
    line = await asyncio.to_thread(proc.stdout.readline)  # the emulator shares this event loop
    assert line.startswith("listening on "), f"the bot did not start: {line!r}"
    return proc, int(line.rsplit(":", 1)[1].split("/")[0])


def _runs(db):
    with Session(db) as session:
        return list(session.exec(select(storage.Run).order_by(storage.Run.id)))


@pytest.mark.e2e
async def test_a_killed_bot_is_reconciled_and_every_queued_job_runs_once(tmp_path, emulator, unused_tcp_port):
    repo = tmp_path / "engine-repo"
    make_repo(repo)
    url = f"sqlite:///{tmp_path}/bot.db"
    config = write_config(tmp_path, repo, unused_tcp_port, emulator.api_url, workload=LONG,
                          slack_extra="requeue_interrupted = true\n")
    home, log = tmp_path / "home", open(tmp_path / "bot.log", "w")
    proc, port = await _start(config, url, home, log)
    try:
        for i, text in enumerate(["compare slow --modes baseline", "compare noop --modes baseline",
                                  "compare slow --base base --modes baseline"]):
            response, _ = await post_command(port, form(text, trigger=f"t{i}", response_url=emulator.response_url()))
            assert response.status_code == 200
        db = storage.open_database(url)
        await wait_for(lambda: len(storage.list_jobs(db)) == 3, 30, what="three jobs queued")
        # queued in the order the commands were received (CI once saw command 2 become job 1)
        assert [(j.args["head_ref"], j.args["base_ref"]) for j in storage.list_jobs(db)] == [
            ("slow", None), ("noop", None), ("slow", "base")]
        trial = await wait_for(lambda: next((t for t in _trials(db) if t.pgid), None), 60, what="the first launch")
        await asyncio.sleep(1.0)
        os.kill(proc.pid, signal.SIGKILL)  # no cleanup runs: the engine is orphaned, job 1 says running
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert group_members(trial.pgid) != []
    assert storage.get_job(db, 1).status == "running"
    assert [j.status for j in storage.list_jobs(db)] == ["running", "queued", "queued"]

    config.write_text(config.read_text().replace(LONG, SHORT))  # the jobs that follow are quick
    proc, port = await _start(config, url, home, log)
    try:
        assert group_members(trial.pgid, trial.log_path) == []  # stopped by the reconcile, before "listening"
        done = await wait_for(
            lambda: len(storage.list_jobs(db, ("done", "failed"))) == 3 and storage.list_jobs(db, ("done", "failed")),
            300, what="all three jobs finished", interval=0.5)
        await wait_for(lambda: len([p for p in emulator.recorded("chat.postMessage") if p.body.get("blocks")]) == 3,
                       30, what="three verdicts")
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 30)
        log.close()
    assert proc.returncode == 0  # a clean stop on SIGTERM
    assert [j.status for j in done] == ["done", "done", "done"], [j.reason for j in done]
    first = storage.get_job(db, 1)
    assert first.attempts == 1 and "stopped while this job ran" in first.reason
    runs = _runs(db)
    assert runs[0].status == "interrupted" and "was still running and was stopped" in runs[0].reason
    assert first.run_id != runs[0].id
    # every job ran exactly once after the restart (job 1 once before it, interrupted)
    assert Counter((r.head_ref, r.base_ref, r.status) for r in runs) == Counter({
        ("slow", "slow^", "interrupted"): 1, ("slow", "slow^", "done"): 1, ("noop", "noop^", "done"): 1,
        ("slow", "base", "done"): 1})
    assert sorted(j.run_id for j in done) == [r.id for r in runs[1:]]
    verdicts = Counter(p.body["thread_ts"] for p in emulator.recorded("chat.postMessage") if p.body.get("blocks"))
    assert verdicts == Counter({j.slack["thread_ts"]: 1 for j in done})
    notes = [p.body["text"] for p in emulator.recorded("chat.postMessage")
             if p.body.get("thread_ts") == first.slack["thread_ts"]]
    assert any("was interrupted" in t and "queued again" in t for t in notes)
    assert all(group_members(t.pgid, t.log_path) == [] for t in _trials(db) if t.pgid)
    logged = (tmp_path / "bot.log").read_text()
    assert "xoxb-test-token" not in logged and "test-signing-secret" not in logged  # secrets never logged


def _trials(db):
    with Session(db) as session:
        return list(session.exec(select(storage.Trial).order_by(storage.Trial.id)))


def test_requeue_disabled_fails_the_interrupted_job(tmp_path):
    db = storage.open_database(f"sqlite:///{tmp_path}/q.db")
    job = storage.enqueue(db, storage.Job(host="local", engine_name="e", workload_name="w", user_id="U", channel_id="C"))
    assert storage.claim_next(db, "local").id == job.id
    assert storage.requeue_or_fail(db, job.id, False, "the bot stopped") == "failed"
    assert storage.claim_next(db, "local") is None
    again = storage.enqueue(db, storage.Job(host="local", engine_name="e", workload_name="w", user_id="U",
                                            channel_id="C"))
    storage.claim_next(db, "local")
    assert storage.requeue_or_fail(db, again.id, True, "crash") == "queued"
    assert storage.claim_next(db, "local").id == again.id
    assert storage.requeue_or_fail(db, again.id, True, "crash again") == "failed"  # re-queued once only


@pytest.mark.e2e
async def test_sigterm_mid_run_stops_the_bot_cleanly(tmp_path, emulator, unused_tcp_port):
    repo = tmp_path / "engine-repo"
    make_repo(repo)
    url = f"sqlite:///{tmp_path}/bot.db"
    config = write_config(tmp_path, repo, unused_tcp_port, emulator.api_url, workload=LONG)
    log = open(tmp_path / "bot.log", "w")
    proc, port = await _start(config, url, tmp_path / "home", log)
    try:
        for i in range(3):  # busy: a run streaming, commands arriving, replies failing (no response URL)
            await post_command(port, form("compare slow --modes baseline", trigger=f"s{i}"))
        db = storage.open_database(url)
        trial = await wait_for(lambda: next((t for t in _trials(db) if t.pgid), None), 60, what="the first launch")
        await asyncio.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    assert proc.returncode == 0
    assert group_members(trial.pgid, trial.log_path) == []
    first = storage.get_job(db, 1)
    # a clean stop re-queues without spending the crash re-queue (issue 14)
    assert (first.status, first.attempts) == ("queued", 0) and "stopped cleanly" in first.reason
    assert [j.status for j in storage.list_jobs(db)] == ["queued", "queued", "queued"]
