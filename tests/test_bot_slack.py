"""The bot's Slack side: Socket Mode envelopes through the websocket emulator, a burst of 429s
and 500s where every message still arrives in order and paced, and a channel the bot is not in."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import core
import storage
from bot import SlackConfig
from bot import load_config as load_bot_config
from bot._slack.app import SlackBot
from bot._slack.client import web_client
from bot._slack.notifier import SlackNotifier
from core._env.disturbance import judge_window
from tests.bot_support import wait_for, write_config
from tests.slack_emulator import slash_body


async def _bot(tmp_path, repo, emulator, port, monkeypatch, **kwargs) -> SlackBot:
    monkeypatch.setenv("SPECPERF_HOME", str(tmp_path / "home"))
    config = load_bot_config(write_config(tmp_path, repo[0], port, emulator.api_url, **kwargs))
    bot = SlackBot(config, storage.open_database(f"sqlite:///{tmp_path}/bot.db"))
    await bot.start()
    return bot


@pytest.mark.e2e
async def test_socket_mode_envelopes_are_acked_and_run(tmp_path, repo, emulator, unused_tcp_port, monkeypatch):
    bot = await _bot(tmp_path, repo, emulator, unused_tcp_port, monkeypatch, mode="socket")
    try:
        assert emulator.recorded("apps.connections.open")[0].body["_auth"] == "Bearer xapp-test-token"
        command = slash_body("compare slow --modes baseline --rounds 1", response_url=emulator.response_url())
        ack = await emulator.send_envelope(command)
        assert "working on it" in ack["payload"]["text"]
        redelivered = await emulator.send_envelope(command)  # Slack's retry of the same command
        assert "text" not in redelivered.get("payload", {})
        refused = await emulator.send_envelope(slash_body("compare slow", user="U_STRANGER"))
        assert refused["payload"]["text"].startswith("refused:")
        usage = await emulator.send_envelope(slash_body("compare 'x; rm -rf /'"))
        assert usage["payload"]["text"].startswith("usage error:")
        job = await wait_for(lambda: next((j for j in storage.list_jobs(bot.db, ("done", "failed"))), None),
                             90, what="the job")
        assert job.status == "done" and job.args["rounds"] == 1
        stored = storage.load_run(bot.db, job.run_id)
        assert len(stored.trials) == 4  # one ABBA round
        verdict = await wait_for(lambda: [p for p in emulator.recorded("chat.postMessage") if p.body.get("blocks")],
                                 30, what="the verdict")
        assert verdict[0].body["thread_ts"] == job.slack["thread_ts"]
        assert len(storage.list_jobs(bot.db, ("queued", "running", "done", "failed"))) == 1
    finally:
        await bot.stop()


async def test_a_burst_of_429s_and_500s_loses_no_message_and_keeps_the_pace(tmp_path, emulator):
    slack = SlackConfig(bot_token="xoxb-t", api_url=emulator.api_url, channel_interval_s=0.5)
    notifier = SlackNotifier(web_client(slack), slack, db=None)
    emulator.script("chat.postMessage", 429, 429, 500, 429)
    texts = [f"message {i}" for i in range(5)]
    sent = await asyncio.gather(*(notifier.post("C1", text=t) for t in texts),
                                notifier.post("C2", text="other channel"))
    assert all(s is not None and s["ok"] for s in sent)
    delivered = [c for c in emulator.recorded("chat.postMessage") if c.body["channel"] == "C1"]
    assert [c.body["text"] for c in delivered] == texts  # all of them, in order
    assert len([c for c in emulator.calls if c.status == 429]) == 3
    assert len([c for c in emulator.calls if c.status == 500]) == 1
    gaps = [b.at - a.at for a, b in zip(delivered, delivered[1:])]
    assert min(gaps) >= 0.475  # at least channel_interval_s between posts in one channel
    other = next(c for c in emulator.recorded("chat.postMessage") if c.body["channel"] == "C2")
    assert other.at < delivered[-1].at  # another channel does not wait behind C1's queue


@pytest.mark.e2e
async def test_not_in_channel_falls_back_to_the_response_url(tmp_path, repo, emulator, unused_tcp_port, monkeypatch):
    bot = await _bot(tmp_path, repo, emulator, unused_tcp_port, monkeypatch, mode="socket")
    try:
        emulator.script("chat.postMessage", "not_in_channel")
        await emulator.send_envelope(slash_body("compare slow --modes baseline --rounds 1",
                                                response_url=emulator.response_url("fallback")))
        replies = await wait_for(lambda: [c for c in emulator.recorded("response") if c.body["name"] == "fallback"
                                          and c.body.get("blocks")], 90, what="the verdict through response_url")
        texts = [c.body["text"] for c in emulator.recorded("response") if c.body["name"] == "fallback"]
        assert any("invite the bot" in t for t in texts)
        assert replies[0].body["response_type"] == "in_channel" and replies[0].body["text"].startswith("run 1")
    finally:
        await bot.stop()


@pytest.mark.e2e
async def test_specperf_bot_connects_in_socket_mode_as_a_process(tmp_path, repo, emulator, unused_tcp_port):
    import os
    import subprocess

    from tests.conftest import ROOT, SPECPERF

    config = write_config(tmp_path, repo[0], unused_tcp_port, emulator.api_url, mode="socket")
    proc = subprocess.Popen([*SPECPERF, "--config", str(config), "bot", "--db", f"sqlite:///{tmp_path}/b.db"],
                            cwd=ROOT, env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line.strip() == "connected (Socket Mode)"
        ack = await emulator.send_envelope(slash_body("queue", response_url=emulator.response_url()))
        assert ack["payload"] == {"text": "`/specperf queue`: working on it", "response_type": "ephemeral"}
        reply = await wait_for(lambda: emulator.recorded("response"), 10, what="the queue reply")
        assert reply[0].body["text"] == "the queue is empty"
    finally:
        proc.terminate()
        _, stderr = await asyncio.to_thread(proc.communicate, timeout=30)
    assert proc.returncode == 0, stderr  # SIGTERM: a clean stop
    assert "xapp-test-token" not in stderr and "xoxb-test-token" not in stderr


@pytest.mark.e2e
async def test_a_missing_or_refused_token_stops_the_bot_at_start(tmp_path, repo, emulator, unused_tcp_port,
                                                                 monkeypatch):
    import os
    import subprocess

    from tests.conftest import ROOT, SPECPERF

    config = write_config(tmp_path, repo[0], unused_tcp_port, emulator.api_url, mode="http")
    config.write_text(config.read_text().replace('signing_secret = "test-signing-secret"\n', ""))
    out = await asyncio.to_thread(subprocess.run, [*SPECPERF, "--config", str(config), "bot"], cwd=ROOT,
                                  env={**os.environ, "SPECPERF_HOME": str(tmp_path / "home")},
                                  capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and 'mode = "http" needs signing_secret' in out.stderr
    assert not (tmp_path / "home").exists()  # refused before any database was made
    emulator.script("auth.test", "invalid_auth")
    with pytest.raises(core.ConfigError, match="Slack refused the bot token: invalid_auth"):
        await _bot(tmp_path, repo, emulator, unused_tcp_port, monkeypatch, mode="socket")


async def test_help_lists_every_command_with_an_example(tmp_path, repo, emulator, unused_tcp_port, monkeypatch):
    from bot._slack.commands import COMMANDS, HELP

    bot = await _bot(tmp_path, repo, emulator, unused_tcp_port, monkeypatch, mode="socket")
    try:
        for text in ("help", ""):
            ack = await emulator.send_envelope(slash_body(text))
            assert ack["payload"] == {"text": HELP, "response_type": "ephemeral"}
        lines = ack["payload"]["text"].splitlines()
        for name, spec in COMMANDS.items():
            assert any(line.startswith(f"`/specperf {name}") and line.endswith(f"e.g. `/specperf {spec.example}`")
                       for line in lines), name
        assert {"calibrate", "watch"} <= set(COMMANDS)
        usage = await emulator.send_envelope(slash_body("frobnicate"))
        assert usage["payload"]["text"].startswith("usage error: unknown command 'frobnicate'")
        assert "`/specperf calibrate" in usage["payload"]["text"]  # the help text follows
        await wait_for(lambda: len(storage.list_commands(bot.db)) == 3, 5, what="the audit rows")
        # each audit row is written off the loop, in a thread of its own: their order is not the commands'
        assert sorted(c.result.split(":")[0] for c in storage.list_commands(bot.db)) == ["help", "help", "usage error"]
    finally:
        await bot.stop()


@pytest.mark.parametrize("text, why", [
    ("calibrate --launches 1", "usage error: calibrate needs --launches of at least 2"),
    ("calibrate --power 2", "usage error: calibrate needs --launches of at least 2, --change-pct between 0 and 100, "
                            "--power between 0 and 1 and --windows between 1 and 64"),
    ("calibrate --windows 65", "usage error: calibrate needs --launches of at least 2, --change-pct between 0 and "
                               "100, --power between 0 and 1 and --windows between 1 and 64"),
    ("calibrate --modes turbo", "usage error: "),
    ("calibrate --commit '$(touch x)'", "usage error: "),
    ("watch 0", "usage error: argument seconds: '0' is not a number of seconds between 0 and 3600"),
    ("watch 5 --host nowhere", "usage error: no host named 'nowhere'"),
])
async def test_calibrate_and_watch_mistakes_are_usage_errors_and_queue_nothing(tmp_path, repo, emulator, unused_tcp_port,
                                                                               monkeypatch, text, why):
    bot = await _bot(tmp_path, repo, emulator, unused_tcp_port, monkeypatch, mode="socket")
    try:
        ack = await emulator.send_envelope(slash_body(text))
        assert ack["payload"]["text"].startswith(why)
        refused = await emulator.send_envelope(slash_body(text.split()[0], user="U_STRANGER"))
        assert refused["payload"]["text"].startswith("refused:")
        await wait_for(lambda: len(storage.list_commands(bot.db)) == 2, 5, what="the audit rows")
        assert storage.list_jobs(bot.db, ("queued", "running", "done", "failed")) == []
        assert emulator.recorded("chat.postMessage") == []
    finally:
        await bot.stop()


@pytest.mark.e2e
async def test_calibrate_and_watch_are_queued_on_the_host_and_answered_in_their_threads(
        tmp_path, repo, emulator, unused_tcp_port, monkeypatch):
    import json
    import re

    from bot import _app as app
    from bot._common import window_rows
    from bot._runs import stored_report

    bot = await _bot(tmp_path, repo, emulator, unused_tcp_port, monkeypatch, mode="socket")
    try:
        ack = await emulator.send_envelope(slash_body("calibrate --commit slow --modes baseline --launches 2",
                                                      response_url=emulator.response_url()))
        assert "working on it" in ack["payload"]["text"]
        await wait_for(lambda: storage.list_jobs(bot.db, ("queued", "running")), 30, what="the calibrate job")
        ack = await emulator.send_envelope(slash_body("watch 1.5", response_url=emulator.response_url()))
        assert "working on it" in ack["payload"]["text"]
        jobs = await wait_for(lambda: (js := storage.list_jobs(bot.db, ("done", "failed"))) and len(js) == 2 and js,
                              120, what="both jobs")
        calibrate, watch = sorted(jobs, key=lambda j: j.id)
        assert (calibrate.kind, calibrate.status, watch.kind, watch.status) == ("calibrate", "done", "watch", "done"), \
            (calibrate.reason, watch.reason)
        assert watch.started_at >= calibrate.finished_at  # one job at a time on the host, in order
        assert watch.run_id is None  # a watch records no run

        # the calibration: an A/A compare of 2 launches per arm, stored as the host's calibration
        stored = storage.load_run(bot.db, calibrate.run_id)
        assert stored.run.base_sha == stored.run.head_sha and len(stored.trials) == 4
        assert stored.run.settings["calibration"] == {"change_pct": 5.0, "power": 0.9}
        assert storage.latest_calibration(bot.db, "fake", "local", "default").id == calibrate.run_id
        report, trials = stored_report(stored)
        expected = app.calibration_lines(trials, stored.run.settings["calibration"], report["settings"]["alpha"],
                                         report["cost"], bot.config.compare.max_trials)
        # three windows a launch (the default), so the answer splits the spread and plans windows too
        assert stored.run.settings["workload"]["windows"] == 3
        assert all("between-launch sd" in line for line in expected), expected

        # each job: a parent message in the channel, a progress message in its thread edited in
        # place, and its answer in the thread
        await wait_for(lambda: len([p for p in emulator.recorded("chat.postMessage") if p.body.get("blocks")]) == 2,
                       30, what="both answers")
        posts = emulator.recorded("chat.postMessage")
        parents = [p for p in posts if "thread_ts" not in p.body]
        assert [p.body["channel"] for p in parents] == ["C_ALLOWED"] * 2
        assert parents[0].body["text"].startswith(f"<@U_ALLOWED> calibrate `slow` ({stored.run.head_sha[:10]}) against "
                                                  "itself on host `local`")
        assert f"job {calibrate.id}, next to run" in parents[0].body["text"]
        assert parents[1].body["text"].startswith("<@U_ALLOWED> watch host `local` for 1.5 s")
        assert f"job {watch.id}, 1 job(s) ahead" in parents[1].body["text"]
        for job in (calibrate, watch):
            job = storage.get_job(bot.db, job.id)
            in_thread = [p for p in posts if p.body.get("thread_ts") == job.slack["thread_ts"]]
            assert in_thread[0].body["text"].startswith(f"job {job.id}: ")  # the progress message
            edits = [c for c in emulator.recorded("chat.update") if c.body["ts"] == job.slack["progress_ts"]]
            assert edits and "finished" in edits[-1].body["text"]
        calibrated = next(p for p in posts if p.body.get("thread_ts") == calibrate.slack["thread_ts"]
                          and p.body.get("blocks"))
        section = next(b["text"]["text"] for b in calibrated.body["blocks"]
                       if b["type"] == "section" and b.get("text", {}).get("text", "").startswith("*calibration*"))
        assert all(line in section for line in expected) and expected[0].startswith("calibration baseline: ")

        watched = next(p for p in posts if p.body.get("thread_ts") == watch.slack["thread_ts"] and p.body.get("blocks"))
        blocks = watched.body["blocks"]
        context = blocks[-1]["elements"][0]["text"]
        saved = json.loads(Path(re.search(r"window saved to (\S+)", context).group(1)).read_text())
        judged = judge_window(saved["window"], bot.config.compare.disturbance)
        assert saved["disturbed"] == judged.to_dict()
        state = "DISTURBED" if judged.disturbed else "QUIET"
        assert blocks[0]["text"]["text"] == f"{state}: host local, {saved['window']['window_s']:.1f} s watched"
        figures = next(b["text"]["text"] for b in blocks if b["type"] == "section"
                       and b["text"]["text"].startswith("*window*"))
        for name, value in window_rows(saved["window"], judged):
            assert f"{name.strip()}: *{value}*" in figures
        assert 1.4 <= saved["window"]["window_s"] <= 10
        audit = [(c.command, c.result) for c in storage.list_commands(bot.db)]
        assert audit == [("calibrate --commit slow --modes baseline --launches 2", f"queued job {calibrate.id}"),
                         ("watch 1.5", f"queued job {watch.id}")]
    finally:
        await bot.stop()
