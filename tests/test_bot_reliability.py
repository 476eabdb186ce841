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
from tests.bot_support import form, post_command, start_bot, wait_for, write_config
from tests.conftest import group_members
from tests.fake_engine_repo import make_repo

LONG = "output_len = 2000\nrequests = 50\nwarmup_requests = 0\n"
SHORT = "output_len = 64\nrequests = 4\nwarmup_requests = 1\n"
LEASE_S = 3


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
    children = psutil.Process(proc.pid).children()
    return children[0].pid if children else proc.pid


async def _stop(proc) -> None:
    if proc.poll() is None:
        os.kill(_bot_pid(proc), signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 60)


@pytest.mark.skipif(os.geteuid() != 0, reason="unshare of UTS and PID namespaces needs root")
async def test_a_bot_restarted_as_a_new_container_reclaims_the_dead_bots_job(tmp_path, emulator, unused_tcp_port):
    repo = tmp_path / "engine-repo"
    make_repo(repo)
    url = f"sqlite:///{tmp_path}/bot.db"
    config = write_config(tmp_path, repo, unused_tcp_port, emulator.api_url, workload=LONG, lease_s=LEASE_S,
                          slack_extra="requeue_interrupted = true\n")
    home, log = tmp_path / "home", open(tmp_path / "bot.log", "w")
    db = storage.open_database(url)

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
        assert group_members(trial.pgid) == []
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
        assert all(group_members(t.pgid) == [] for t in _trials(db) if t.pgid)
    finally:
        await _stop(proc)
        log.close()
    assert proc.returncode == 0
