"""The bot's Slack side: Socket Mode envelopes through the websocket emulator, a burst of 429s
and 500s where every message still arrives in order and paced, and a channel the bot is not in."""

from __future__ import annotations

import asyncio

import pytest

import core
import storage
from bot import SlackConfig
from bot import load_config as load_bot_config
from bot._slack_app import SlackBot
from bot._slack_client import web_client
from bot._slack_notifier import SlackNotifier
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
