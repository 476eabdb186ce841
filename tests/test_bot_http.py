"""The Slack bot in HTTP mode, in process, against the Slack emulator and the fast fake engine:
a compare end to end (ack, queue, threaded progress, verdict blocks matching the stored run,
chart upload), signatures, authorisation, usage errors, redelivery, cancel."""

from __future__ import annotations

import asyncio
import math
import re
import subprocess
import sys

import pytest
from sqlmodel import Session

import storage
from bot import load_config as load_bot_config
from bot._slack import handlers
from bot._slack.app import SlackBot
from core._experiments.compare import resolve_refs
from tests.bot_support import (
    check_verdict_thread,
    form,
    post_command,
    wait_for,
    write_config,
)
from tests.conftest import ROOT, group_members
from tests.fake_engine_repo import linear_history, make_repo
from tests.slack_emulator import signed_headers


@pytest.fixture
async def make_bot(tmp_path, repo, emulator, unused_tcp_port, monkeypatch):
    monkeypatch.setenv("SPECPERF_HOME", str(tmp_path / "home"))
    bots = []

    async def start(**kwargs):
        config = load_bot_config(write_config(tmp_path, repo[0], unused_tcp_port, emulator.api_url, **kwargs))
        db = storage.open_database(f"sqlite:///{tmp_path}/bot.db")
        bot = SlackBot(config, db)
        await bot.start()
        bots.append(bot)
        return bot

    yield start
    for bot in bots:
        await bot.stop()


def _jobs(db):
    return storage.list_jobs(db, ("queued", "running", "done", "failed", "cancelled", "interrupted"))


@pytest.mark.e2e
async def test_compare_end_to_end_threaded_verdict_matches_the_stored_run(make_bot, emulator, repo):
    bot = await make_bot()
    emulator.script("chat.postMessage", 429, 500)  # Slack pushing back: nothing may be lost
    emulator.script("chat.update", 429)
    response, seconds = await post_command(bot.port, form("compare slow --modes baseline,eagle3",
                                                          response_url=emulator.response_url()))
    assert response.status_code == 200 and seconds < 3.0
    assert "working on it" in response.json()["text"]
    job = await wait_for(lambda: next((j for j in _jobs(bot.db) if j.status in ("done", "failed")), None),
                         what="the job to finish")
    assert job.status == "done", job.reason
    await wait_for(lambda: emulator.recorded("files.completeUploadExternal"), 30, what="the chart upload")

    check_verdict_thread(bot, emulator, job, "local", ("baseline", "eagle3"))
    posts = emulator.recorded("chat.postMessage")[1:]
    progress_ts = job.slack["progress_ts"]
    edits = [c for c in emulator.recorded("chat.update") if c.body["ts"] == progress_ts]
    # paced as configured: progress edits >= 0.5 s apart, any two calls in the channel >= 0.2 s apart
    assert all(b.at - a.at >= 0.45 for a, b in zip(edits, edits[1:])), str([round(b.at - a.at, 3) for a, b in zip(edits, edits[1:])])
    in_channel = sorted((c for c in emulator.calls if c.body.get("channel") == "C_ALLOWED"), key=lambda c: c.at)
    assert all(b.at - a.at >= 0.18 for a, b in zip(in_channel, in_channel[1:])), [
        (a.method, b.method, round(b.at - a.at, 3)) for a, b in zip(in_channel, in_channel[1:])]
    assert [c.status for c in emulator.calls if c.status != 200] == [429, 500, 429]
    assert "started on host `local`" in posts[0].body["text"]  # the progress message, then the verdict
    audit = storage.list_commands(bot.db)
    assert [(a.user_id, a.result) for a in audit] == [("U_ALLOWED", f"queued job {job.id}")]
    assert len(emulator.recorded("auth.test")) == 1  # at start, never between a command and its ack


@pytest.mark.parametrize("case", ["unsigned", "bad", "stale", "replayed"])
async def test_unsigned_bad_stale_and_replayed_requests_get_401(make_bot, case):
    bot = await make_bot()
    body = form("queue")
    headers = {"unsigned": {"Content-Type": "application/x-www-form-urlencoded"},
               "bad": signed_headers(body, secret="not-the-secret"),
               "stale": signed_headers(body, timestamp=int(__import__("time").time()) - 301),
               "replayed": signed_headers(body)}[case]
    if case == "replayed":
        first, _ = await post_command(bot.port, body, headers)
        assert first.status_code == 200
    response, _ = await post_command(bot.port, body, headers)
    assert response.status_code == 401
    await __import__("asyncio").sleep(0.3)
    assert len(storage.list_commands(bot.db)) == (1 if case == "replayed" else 0)


async def test_an_unauthorised_user_or_channel_is_refused_and_nothing_is_queued(make_bot, emulator):
    bot = await make_bot()
    for user, channel in (("U_STRANGER", "C_ALLOWED"), ("U_ALLOWED", "C_OTHER")):
        response, _ = await post_command(bot.port, form("compare slow", user=user, channel=channel))
        assert response.status_code == 200
        assert response.json()["text"].startswith("refused:")
    await wait_for(lambda: len(storage.list_commands(bot.db)) == 2, 5, what="the audit rows")
    assert [a.result for a in storage.list_commands(bot.db)] == ["refused: not on the allow-list"] * 2
    assert _jobs(bot.db) == []
    assert emulator.recorded("chat.postMessage") == []


@pytest.mark.parametrize("text", ["compare", "compare slow --rounds many", "compare 'slow; touch {canary}'",
                                  "compare $(touch {canary})", "compare --upload-pack=touch {canary}",
                                  "compare slow --host nowhere", "compare slow --modes turbo", "frobnicate",
                                  "cancel ../1", "compare 'unbalanced"])
async def test_malformed_and_shell_looking_commands_are_usage_errors(make_bot, emulator, tmp_path, text):
    bot = await make_bot()
    canary = tmp_path / "canary"
    response, _ = await post_command(bot.port, form(text.format(canary=canary)))
    assert response.status_code == 200
    assert response.json()["text"].startswith("usage error:")
    await wait_for(lambda: storage.list_commands(bot.db), 5, what="the audit row")
    assert storage.list_commands(bot.db)[0].result.startswith("usage error")
    assert _jobs(bot.db) == [] and not canary.exists() and not (tmp_path / "home/work/worktrees").exists()


async def test_a_ref_that_names_no_commit_is_a_usage_error_after_the_ack(make_bot, emulator):
    bot = await make_bot()
    response, _ = await post_command(bot.port, form("compare no-such-ref", response_url=emulator.response_url()))
    assert "working on it" in response.json()["text"]
    reply = await wait_for(lambda: emulator.recorded("response"), 10, what="the ephemeral reply")
    assert "names no commit" in reply[0].body["text"] and reply[0].body["response_type"] == "ephemeral"
    assert _jobs(bot.db) == []


@pytest.mark.e2e
async def test_a_slack_retry_never_queues_a_duplicate(make_bot, emulator):
    bot = await make_bot(workload="output_len = 2000\nrequests = 50\nwarmup_requests = 0\n")
    body = form("compare slow --modes baseline", trigger="trig-once", response_url=emulator.response_url())
    first, _ = await post_command(bot.port, body)
    retry_headers = {**signed_headers(body, timestamp=int(__import__("time").time()) + 1), "X-Slack-Retry-Num": "1",
                     "X-Slack-Retry-Reason": "http_timeout"}
    second, _ = await post_command(bot.port, body, retry_headers)
    assert first.status_code == second.status_code == 200
    await wait_for(lambda: _jobs(bot.db), 10, what="the job")
    # a restarted bot has no memory of the first delivery: the database's unique key stops it
    bot._seen.clear()
    third, _ = await post_command(bot.port, body, {**signed_headers(body, timestamp=int(__import__("time").time()) + 2),
                                                   "X-Slack-Retry-Num": "2"})
    assert third.status_code == 200
    await wait_for(lambda: len(storage.list_commands(bot.db)) >= 2, 10, what="the audit rows")
    assert len(_jobs(bot.db)) == 1
    job = _jobs(bot.db)[0]
    await bot.queue.cancel(job.id, "test over")


@pytest.mark.e2e
async def test_cancel_stops_a_running_job_and_its_engine(make_bot, emulator):
    bot = await make_bot(workload="output_len = 2000\nrequests = 50\nwarmup_requests = 0\n")
    await post_command(bot.port, form("compare slow --modes baseline", response_url=emulator.response_url()))
    await post_command(bot.port, form("compare noop --modes baseline", response_url=emulator.response_url()))
    trial = await wait_for(lambda: next((t for t in _trials(bot.db) if t.pgid), None), 60, what="a launch")
    assert group_members(trial.pgid) != []
    response, _ = await post_command(bot.port, form("cancel 1", response_url=emulator.response_url("c")))
    assert "working on it" in response.json()["text"]
    reply = await wait_for(lambda: [c for c in emulator.recorded("response") if c.body["name"] == "c"], 30,
                           what="the cancel reply")
    assert "engine was stopped" in reply[0].body["text"]
    assert group_members(trial.pgid, trial.log_path) == []
    job = storage.get_job(bot.db, 1)
    assert job.status == "cancelled" and "cancelled by <@U_ALLOWED>" in job.reason
    assert storage.load_run(bot.db, job.run_id).run.status == "interrupted"
    # the queued job behind it cancelled too, before it starts
    await post_command(bot.port, form("cancel 2", response_url=emulator.response_url("c2")))
    await wait_for(lambda: storage.get_job(bot.db, 2).status in ("cancelled",), 30, what="job 2 cancelled")


def _trials(db):
    from sqlmodel import Session, select
    with Session(db) as session:
        return list(session.exec(select(storage.Trial)))


@pytest.mark.e2e
async def test_help_status_queue_and_history_answer_and_every_command_is_audited(make_bot, emulator):
    bot = await make_bot(workload="output_len = 2000\nrequests = 50\nwarmup_requests = 0\n")
    help_reply, _ = await post_command(bot.port, form("help"))
    assert "/specperf compare" in help_reply.json()["text"]
    await post_command(bot.port, form("compare slow --modes baseline", response_url=emulator.response_url("q")))
    await wait_for(lambda: [t for t in _trials(bot.db) if t.pgid], 60, what="the run to start")
    for name in ("status", "queue", "history", "status 1", "status 99"):
        response, _ = await post_command(bot.port, form(name, response_url=emulator.response_url(name)))
        assert "working on it" in response.json()["text"]
    replies = {}
    for name in ("status", "queue", "history", "status 1", "status 99"):
        found = await wait_for(lambda name=name: [c for c in emulator.recorded("response") if c.body["name"] == name], 10,
                               what=f"the reply to {name}")
        replies[name] = found[0].body["text"]
        assert found[0].body["response_type"] == "ephemeral"
    assert replies["status"].startswith("job 1 (running)") and "run 1 (running)" in replies["status"]
    assert replies["status 1"] == replies["status"] and replies["status 99"] == "no such job"
    assert "*local*" in replies["queue"] and "job 1 running" in replies["queue"]
    assert replies["history"].startswith("run 1 ") and "running" in replies["history"]
    await wait_for(lambda: len(storage.list_commands(bot.db)) == 7, 10, what="seven audit rows")
    audit = storage.list_commands(bot.db)
    assert sorted((a.command, a.result) for a in audit) == sorted([  # written after each ack, in any order
        ("help", "help"), ("compare slow --modes baseline", "queued job 1"), ("status", "status"),
        ("queue", "queue"), ("history", "history"), ("status 1", "status"), ("status 99", "status")])
    assert all(a.user_id == "U_ALLOWED" and a.channel_id == "C_ALLOWED" and a.at is not None for a in audit)
    await bot.queue.cancel(1, "test over")


@pytest.mark.e2e
async def test_a_failed_run_replies_with_the_reason_and_the_engine_log_tail(make_bot, emulator):
    bot = await make_bot()
    await post_command(bot.port, form("compare broken --modes baseline", response_url=emulator.response_url()))
    job = await wait_for(lambda: next((j for j in _jobs(bot.db) if j.status in ("done", "failed")), None), 60,
                         what="the job to fail")
    assert job.status == "failed" and "exited with status 1 before it was ready" in job.reason
    reply = await wait_for(lambda: [p for p in emulator.recorded("chat.postMessage") if p.body.get("blocks")], 20,
                           what="the failure reply")
    body = reply[0].body
    assert body["thread_ts"] == job.slack["thread_ts"] and "FAILED" in body["text"]
    text = " ".join(b.get("text", {}).get("text", "") for b in body["blocks"])
    assert "exited with status 1 before it was ready" in text and "illegal memory access" in text
    assert emulator.recorded("files.completeUploadExternal") == []  # no chart for a run without a verdict


@pytest.mark.e2e
async def test_env_probes_the_local_host_and_reports_the_checks(make_bot, emulator):
    bot = await make_bot()
    response, seconds = await post_command(bot.port, form("env local", response_url=emulator.response_url("env")))
    assert response.status_code == 200 and seconds < 3.0
    reply = await wait_for(lambda: [c for c in emulator.recorded("response") if c.body["name"] == "env"], 90,
                           what="the env reply")
    text = reply[0].body["text"]
    assert text.startswith("env of host `local` with engine fake (full probe") and "worst " in text
    assert any(line.split(" ", 1)[0] in ("PASS", "WARN", "FAIL") for line in text.splitlines()[1:])


@pytest.mark.e2e
async def test_stopping_the_bot_stops_the_engine_and_requeues_the_job(make_bot, emulator):
    bot = await make_bot(workload="output_len = 2000\nrequests = 50\nwarmup_requests = 0\n")
    await post_command(bot.port, form("compare slow --modes baseline", response_url=emulator.response_url()))
    trial = await wait_for(lambda: next((t for t in _trials(bot.db) if t.pgid), None), 60, what="a launch")
    await bot.stop()
    assert group_members(trial.pgid, trial.log_path) == []
    job = storage.get_job(bot.db, 1)
    # a clean stop does not spend the crash re-queue, and says so in the job's thread
    assert (job.status, job.attempts) == ("queued", 0) and "stopped cleanly" in job.reason
    assert storage.load_run(bot.db, trial.run_id).run.status == "interrupted"
    notes = [p.body["text"] for p in emulator.recorded("chat.postMessage") if p.body.get("thread_ts") == job.slack["thread_ts"]]
    assert any("stopped cleanly" in t and "queued again" in t for t in notes), notes


async def test_the_ack_goes_out_before_any_slow_io(make_bot, emulator, monkeypatch):
    import time

    bot = await make_bot()
    slow_git, slow_audit = resolve_refs, storage.record_command

    # each slow step takes twice the time the ack is allowed: an ack that waited for either is late
    async def slow_resolve(request):  # git on a slow host: awaited, so the loop stays free
        await asyncio.sleep(2)
        return await slow_git(request)

    monkeypatch.setattr(handlers, "resolve_refs", slow_resolve)
    monkeypatch.setattr(storage, "record_command", lambda *a, **k: (time.sleep(2), slow_audit(*a, **k))[1])
    emulator.script("chat.postMessage", 429)  # and Slack itself is pushing back
    response, seconds = await post_command(bot.port, form("compare slow --modes baseline --rounds 1",
                                                          response_url=emulator.response_url()))
    # an ack that waited for a slow step takes 2 s or more; acks under load: p99 207 ms (bench/ACK_RESULTS.md),
    # so 1.5 s is 7x the slowest seen and still below the wrong answer (issue 41)
    assert response.status_code == 200 and seconds < 1.5, seconds
    job = await wait_for(lambda: _jobs(bot.db), 20, what="the job, queued after the slow git")
    assert len(job[0].args["head_sha"]) == 40
    await wait_for(lambda: storage.list_commands(bot.db), 20, what="the slow audit row")
    await bot.queue.cancel(job[0].id, "test over")


async def test_jobs_are_queued_in_the_order_their_commands_were_received(make_bot, emulator, monkeypatch):
    """Each command's git runs after its ack; the first one's answering last must not put its
    job behind the second's (test_bot_kill's job-by-job assertions failed so in CI)."""
    bot = await make_bot()
    real_resolve = resolve_refs

    async def resolve(request):  # the first command's git is the slower one
        if request.head_ref == "slow":
            await asyncio.sleep(0.5)
        return await real_resolve(request)

    monkeypatch.setattr(handlers, "resolve_refs", resolve)
    # The worker has looked at the empty queue by the time the first job is queued; unwoken, it
    # runs neither job (only their order matters here, and no engine is launched).
    monkeypatch.setattr(bot.queue, "wake", lambda host: None)
    for i, ref in enumerate(["slow", "noop"]):
        response, _ = await post_command(bot.port, form(f"compare {ref} --modes baseline --rounds 1", trigger=f"o{i}"))
        assert response.status_code == 200
    jobs = await wait_for(lambda: len(_jobs(bot.db)) == 2 and _jobs(bot.db), 20, what="both jobs queued")
    assert [(j.id, j.args["head_ref"]) for j in jobs] == [(1, "slow"), (2, "noop")]
    for job in jobs:
        await bot.queue.cancel(job.id, "test over")


@pytest.mark.e2e
async def test_bisect_from_slack_names_the_culprit_in_the_thread(tmp_path, emulator, unused_tcp_port, monkeypatch):
    monkeypatch.setenv("SPECPERF_HOME", str(tmp_path / "home"))
    # c2 slows decode: a confirm, a probe and the pair that settles it (3 compares; c3 took 4)
    shas = make_repo(tmp_path / "history", linear_history(n=4, slow=2))
    config = load_bot_config(write_config(tmp_path, tmp_path / "history", unused_tcp_port, emulator.api_url, trials=4))
    bot = SlackBot(config, storage.open_database(f"sqlite:///{tmp_path}/bot.db"))
    await bot.start()
    try:
        response, _ = await post_command(bot.port, form("bisect good c4 --mode baseline",
                                                        response_url=emulator.response_url()))
        assert response.status_code == 200
        job = await wait_for(lambda: next((j for j in _jobs(bot.db) if j.status in ("done", "failed")), None),
                             300, what="the bisect job")
        await wait_for(lambda: [p for p in emulator.recorded("chat.postMessage") if p.body.get("blocks")], 30,
                       what="the bisect reply")
    finally:
        await bot.stop()
    assert job.status == "done" and job.kind == "bisect", job.reason
    stored = storage.load_run(bot.db, job.run_id)
    record = stored.run.settings["bisect"]
    assert stored.run.kind == "bisect" and record["culprit"] == shas["c2"]
    assert len(record["steps"]) <= math.ceil(math.log2(4)) + 2
    parent = emulator.recorded("chat.postMessage")[0]
    assert f"job {job.id}" in parent.body["text"] and "4 commits" in parent.body["text"]
    reply = next(p for p in emulator.recorded("chat.postMessage")[1:] if p.body.get("blocks"))
    assert reply.body["thread_ts"] == job.slack["thread_ts"]
    assert reply.body["text"].startswith(f"job {job.id}, run {job.run_id} bisect FOUND")
    steps = next(b["text"]["text"] for b in reply.body["blocks"] if b.get("text", {}).get("text", "").startswith("*steps*"))
    assert steps.count("\n") == len(record["steps"]) and shas["c2"][:12] in steps
    context = str([b for b in reply.body["blocks"] if b["type"] == "context"])
    assert record["spend"]["line"] in context and "node-hours against about" in context  # the spend, as stored
    edits = [c for c in emulator.recorded("chat.update") if c.body["ts"] == job.slack["progress_ts"]]
    # progress in the thread, step by step: each edit under its step's line (which steps a noisy
    # machine needs is the bisect's business: in the whole suite step 2 was not always a probe)
    shown = {m.group(1) for e in edits for m in re.finditer(r"\nstep (\d+) \([a-z ]+\)", e.body["text"])}
    assert len(shown) >= 2 and "1" in shown, [e.body["text"][:120] for e in edits]
    assert "finished: bisect found" in edits[-1].body["text"]


async def test_a_recheck_of_a_run_the_user_may_not_touch_says_nothing_about_it(make_bot, emulator):
    """U_OTHER may use specperf on host gpu-b only; run 1 ran on host local and failed. Before
    the allow-list was checked first (039b3a5), ``/specperf recheck 1`` answered with the run's
    kind, status and launches; now it is refused and names nothing of the run."""
    bot = await make_bot(slack_extra='[hosts.gpu-b]\n[slack.allow.hosts.gpu-b]\nusers = ["U_OTHER"]\nchannels = ["C_ALLOWED"]\n')
    with Session(bot.db) as session:
        session.add(storage.Run(kind="compare", status="failed", engine_name="fake", host="local",
                                workload_name="default", base_ref="base", base_sha="b" * 40, head_ref="slow",
                                head_sha="a" * 40, modes=["baseline"], reason="secret reason"))
        session.commit()
    response, _ = await post_command(bot.port, form("recheck 1", user="U_OTHER", trigger="x1",
                                                    response_url=emulator.response_url("x1")))
    assert response.status_code == 200
    reply = await wait_for(lambda: next((r for r in emulator.recorded("response") if r.body["name"] == "x1"), None), 20,
                           what="the reply")
    text = reply.body["text"]
    assert text.startswith("refused: ") and "run 1's host and engine" in text, text
    assert not [word for word in ("failed", "compare run", "launches", "local", "fake", "secret") if word in text], text
    assert _jobs(bot.db) == []


@pytest.mark.e2e
async def test_recheck_from_slack_answers_against_the_stored_run_in_its_thread(make_bot, emulator):
    """``/specperf recheck 1``: the stored compare's commits again on its host, with its modes
    and launches (4 per arm), and the thread's verdict message opens with the recheck's answer
    against run 1 and one line per arm."""
    bot = await make_bot(trials=4)
    response, _ = await post_command(bot.port, form("compare noop --base base --modes baseline", trigger="c1"))
    assert response.status_code == 200
    first = await wait_for(lambda: next((j for j in _jobs(bot.db) if j.status in ("done", "failed")), None), 120,
                           what="the compare")
    assert first.status == "done", first.reason
    response, _ = await post_command(bot.port, form("recheck 1", trigger="r1"))
    assert response.status_code == 200 and "working on it" in response.json()["text"]
    job = await wait_for(lambda: next((j for j in _jobs(bot.db) if j.kind == "recheck" and j.status in ("done", "failed")),
                                      None), 120, what="the recheck")
    assert job.status == "done", job.reason
    assert job.args["launches"] == 4 and job.args["recheck_of"] == 1 and job.args["modes"] == ["baseline"]
    stored = storage.load_run(bot.db, job.run_id)
    assert (stored.run.head_sha, stored.run.base_sha) == (first.args["head_sha"], first.args["base_sha"])
    verdict = await wait_for(lambda: next((p for p in emulator.recorded("chat.postMessage")
                                           if p.body.get("thread_ts") == job.slack["thread_ts"] and p.body.get("blocks")),
                                          None), 30, what="the recheck's verdict message")
    text = verdict.body["blocks"][1]["text"]["text"]
    assert "recheck of run 1: " in text.splitlines()[0], text
    words = [line.split(": ", 1)[0].strip() for line in text.splitlines()[1:]]
    assert len(words) == 2 and set(words) <= {"reproducible", "differs", "unsettled"}, text
    assert f"baseline base {first.args['base_sha'][:10]}" in text and f"baseline head {first.args['head_sha'][:10]}" in text
    # a run that is not there is one usage line, no job
    response, _ = await post_command(bot.port, form("recheck 99", trigger="r2", response_url=emulator.response_url("r99")))
    reply = await wait_for(lambda: next((r for r in emulator.recorded("response") if r.body["name"] == "r99"), None), 20,
                           what="the reply for run 99")
    assert reply.body["text"].startswith("usage error: no such run: 99")
    assert not [j for j in _jobs(bot.db) if j.kind == "recheck" and j.id != job.id]


async def test_a_compare_of_two_engine_entries_from_slack_names_what_differs(make_bot, emulator, repo):
    """``/specperf compare --engine fake-plain --base-engine fake-fast`` (issue 39): two config
    entries without a repo (the fake engine's code from a folder, every token 23% sooner in
    ``fake-fast``; its port 1: an arm runs on the compare's port), so no commit is named: the job
    queues with both engines named, reads REGRESSION, is stored with each set-up's identity where
    a commit's SHA goes, and its verdict message in the thread says what differs between the
    set-ups first. A base engine the config lacks is a usage error, one the user may not use is
    refused, and a compare that names neither a commit nor a base engine is a usage error, each
    before anything is queued."""
    subprocess.run(["git", "-C", str(repo[0]), "checkout", "-q", "base"], check=True)  # the engine's code
    entry = ('[engines.{name}]\nkind = "command"\npython = "{python}"\n'
             'command = ["{{python}}", "-m", "fake_engine", "--port", "{{port}}"]\nport = 1\n'
             'env = {{ PYTHONPATH = "{root}:{repo}/src"{more} }}\nready_timeout_s = 20\nstop_grace_s = 3\n'
             '[engines.{name}.modes]\nbaseline = []\n')
    entries = "".join(entry.format(name=name, repo=repo[0], python=sys.executable, root=ROOT, more=more)
                      for name, more in (("fake-fast", ', FAKE_ENGINE_ITL_SCALE = "0.77"'), ("fake-plain", "")))
    bot = await make_bot(trials=4, workload="output_len = 64\nrequests = 4\nwarmup_requests = 1\n" + entries +
                         '[slack.allow.engines.fake]\nusers = ["U_FAKE_ONLY"]\nchannels = ["C_ALLOWED"]\n')
    for text, user, answer in (("--engine fake --base-engine nope", "U_ALLOWED", "usage error: no engine named 'nope'"),
                               ("--engine fake --base-engine fake-fast", "U_FAKE_ONLY",
                                "refused: <@U_FAKE_ONLY> in this channel is not allowed to use specperf on host local "
                                "and engine fake-fast"),
                               ("--engine fake", "U_ALLOWED", "usage error: compare takes the commit to test")):
        response, _ = await post_command(bot.port, form(f"compare {text} --modes baseline", user=user))
        assert response.json()["text"].startswith(answer), (text, response.json())
    assert _jobs(bot.db) == []
    response, _ = await post_command(bot.port, form("compare --engine fake-plain --base-engine fake-fast --modes baseline",
                                                    response_url=emulator.response_url()))
    assert "working on it" in response.json()["text"], response.json()
    job = await wait_for(lambda: next((j for j in _jobs(bot.db) if j.status in ("done", "failed")), None),
                         what="the job to finish")
    assert job.status == "done", job.reason
    parent = emulator.recorded("chat.postMessage")[0].body["text"]
    assert "compare `engine fake-plain` (setup-" in parent and "against `engine fake-fast` (setup-" in parent, parent
    assert "base engine `fake-fast` against engine `fake-plain`" in parent, parent
    stored = storage.load_run(bot.db, job.run_id)
    run = stored.run
    assert (run.base_ref, run.head_ref) == ("engine fake-fast", "engine fake-plain"), (run.base_ref, run.head_ref)
    assert run.base_sha.startswith("setup-") and run.head_sha.startswith("setup-") and run.base_sha != run.head_sha
    assert run.settings["arms"]["base_engine"] == "fake-fast"
    assert [v.verdict for v in stored.verdicts] == ["REGRESSION"], [(v.verdict, v.change_pct) for v in stored.verdicts]
    verdict = await wait_for(lambda: next((p for p in emulator.recorded("chat.postMessage")[1:] if p.body.get("blocks")),
                                          None), 30, what="the verdict message")
    text = str(verdict.body["blocks"])
    assert "environment differs between the arms: engine env FAKE_ENGINE_ITL_SCALE: 0.77 -&gt; (unset)" in text \
        or "environment differs between the arms: engine env FAKE_ENGINE_ITL_SCALE: 0.77 -> (unset)" in text, text
