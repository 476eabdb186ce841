"""What the bot tests share: a config for the fast fake engine with a [slack] section pointing
at the emulator, an in-process bot, signed slash-command POSTs, and waiting on the database."""

from __future__ import annotations

import asyncio
import sys
import time
import urllib.parse
from pathlib import Path

import httpx

from tests.conftest import ROOT
from tests.slack_emulator import SIGNING_SECRET, signed_headers, slash_body


def write_config(tmp_path: Path, repo_path: Path, port: int, api_url: str, mode: str = "http",
                 workload: str = "output_len = 64\nrequests = 4\nwarmup_requests = 1\n",
                 trials: int = 2, slack_extra: str = "", db_url: str | None = None,
                 lease_s: float | None = None) -> Path:
    """A specperf.toml: the fake engine from ``repo_path`` on ``port``, a small workload, and a
    [slack] section (HTTP on any free port, tokens from literals, U_ALLOWED in C_ALLOWED allowed);
    ``lease_s`` sets ``[storage].owner_lease_s``."""
    config = tmp_path / "specperf.toml"
    config.write_text(
        f'[engines.fake]\nkind = "command"\nrepo = "{repo_path}"\nsource_dir = "src"\npython = "{sys.executable}"\n'
        f'command = ["{{python}}", "-m", "fake_engine", "--port", "{{port}}"]\nport = {port}\n'
        f'env = {{ PYTHONPATH = "{ROOT}" }}\nready_timeout_s = 20\nstop_grace_s = 3\n'
        '[engines.fake.modes]\nbaseline = []\neagle3 = ["--itl-scale", "0.5"]\n'
        f'[compare]\nmin_trials = {trials}\nmax_trials = {trials}\ncooldown_s = 0\non_disturbed = "keep"\nmodes = ["baseline", "eagle3"]\n'
        f'[workloads.default]\n{workload}'
        + ('[storage]\n' if db_url or lease_s else "") + (f'url = "{db_url}"\n' if db_url else "")
        + (f'owner_lease_s = {lease_s}\n' if lease_s else "")
        + f'[slack]\nmode = "{mode}"\nbot_token = "xoxb-test-token"\napp_token = "xapp-test-token"\n'
        f'signing_secret = "{SIGNING_SECRET}"\nhttp_host = "127.0.0.1"\nhttp_port = 0\napi_url = "{api_url}"\n'
        f'progress_interval_s = 0.5\nchannel_interval_s = 0.2\n{slack_extra}'
        '[slack.allow]\nusers = ["U_ALLOWED"]\nchannels = ["C_ALLOWED"]\n'
    )
    return config


def form(text: str, **kwargs) -> bytes:
    """A slash command's urlencoded body."""
    return urllib.parse.urlencode(slash_body(text, **kwargs)).encode()


async def post_command(port: int, body: bytes, headers: dict | None = None, client: httpx.AsyncClient | None = None
                       ) -> tuple[httpx.Response, float]:
    """POST ``body`` to the bot's endpoint, signed unless ``headers`` are given; (response, seconds)."""
    url = f"http://127.0.0.1:{port}/slack/events"
    headers = signed_headers(body) if headers is None else headers
    start = time.monotonic()
    if client is None:
        async with httpx.AsyncClient(timeout=30) as own:
            response = await own.post(url, content=body, headers=headers)
    else:
        response = await client.post(url, content=body, headers=headers)
    return response, time.monotonic() - start


async def wait_for(predicate, timeout: float = 120, interval: float = 0.2, what: str = "condition"):
    """Poll ``predicate()`` (sync; run in a thread) until it returns a truthy value, which is returned."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await asyncio.to_thread(predicate)
        if value:
            return value
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def check_verdict_thread(bot, emulator, job, host: str, modes: tuple[str, ...]):
    """Assert, from the emulator's record, what a finished compare job posted: the parent message
    in the channel, everything else in its thread, progress edited in place, a Block Kit verdict
    whose numbers are the stored run's (per mode: verdict, base and commit tok/s, change), the
    EAGLE-3 speedup line when both modes ran, a context line with the host and SHAs, a text
    fallback, and the chart PNG uploaded to the thread; no engine process left. Returns the
    stored run."""
    import storage
    from bot._common import fmt
    from bot._runs import stored_report
    from tests.conftest import group_members

    parent = emulator.recorded("chat.postMessage")[0]
    assert parent.body["channel"] == "C_ALLOWED" and "thread_ts" not in parent.body
    assert f"job {job.id}" in parent.body["text"]
    thread_ts = job.slack["thread_ts"]
    posts = emulator.recorded("chat.postMessage")[1:]
    assert all(p.body["thread_ts"] == thread_ts for p in posts)
    edits = [c for c in emulator.recorded("chat.update") if c.body["ts"] == job.slack["progress_ts"]]
    assert len(edits) >= 2 and "finished" in edits[-1].body["text"]
    verdict = next(p for p in posts if p.body.get("blocks"))
    blocks = verdict.body["blocks"]
    assert blocks[0]["type"] == "header"
    stored = storage.load_run(bot.db, job.run_id)
    report, _ = stored_report(stored)
    assert stored.run.status == "done" and stored.run.host == host
    stored_verdicts = {v.mode: v.verdict for v in stored.verdicts}
    assert set(stored_verdicts) == set(modes)
    for mode in modes:
        i = next(i for i, b in enumerate(blocks) if b["type"] == "section" and f"*{mode}*" in b.get("text", {}).get("text", ""))
        assert stored_verdicts[mode] in blocks[i]["text"]["text"]
        fields = {f["text"].split("\n")[0].strip("*"): f["text"].split("\n")[1] for f in blocks[i + 1]["fields"]}
        entry = report["modes"][mode]
        assert fields["base tok/s"] == fmt(entry["base"]["output_tok_s"])
        assert fields["commit tok/s"] == fmt(entry["head"]["output_tok_s"])
        assert fields["change"].startswith(f"{entry['verdict']['change_pct']:+.1f}%")
    if {"baseline", "eagle3"} <= set(modes):
        assert any("eagle3 speedup over baseline" in b.get("text", {}).get("text", "") for b in blocks)
    context = " ".join(e["text"] for b in blocks if b["type"] == "context" for e in b["elements"])
    assert f"host `{host}`" in context and stored.run.head_sha[:12] in context and stored.run.base_sha[:12] in context
    assert verdict.body["text"].startswith(f"run {job.run_id}")  # the text fallback
    upload = emulator.recorded("files.completeUploadExternal")[0]
    assert upload.body["channel_id"] == "C_ALLOWED" and upload.body["thread_ts"] == thread_ts
    assert emulator.file(upload.body["files"][0]["id"])[:4] == b"\x89PNG"
    assert all(group_members(t.pgid, t.log_path) == [] for t in stored.trials)
    return stored


LOCKER = """
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
connection.execute("ROLLBACK")
"""


def hold_sqlite(path: Path, seconds: float):
    """Another process holding the SQLite database at ``path`` (``BEGIN EXCLUSIVE``) for
    ``seconds``: a database outage as a bot meets it. Returns the process once it holds it."""
    import subprocess

    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(path), f"{seconds:g}"], stdout=subprocess.PIPE,
                              text=True)
    assert locker.stdout.readline().strip() == "locked"
    return locker


async def start_bot(config: Path, url: str, home: Path, log, wrap: list[str] | None = None):
    """``specperf bot`` as a real process (``wrap``: a command line it runs under, e.g.
    ``unshare``), stdout read up to its "listening on" line: (process, port)."""
    import os
    import subprocess

    from tests.conftest import SPECPERF

    argv = [*SPECPERF, "--config", str(config), "bot", "--db", url]
    proc = subprocess.Popen([*(wrap or []), *argv], cwd=ROOT, env={**os.environ, "SPECPERF_HOME": str(home)},
                            stdout=subprocess.PIPE, stderr=log, text=True)
    line = await asyncio.to_thread(proc.stdout.readline)  # the emulator shares this event loop
    assert line.startswith("listening on "), f"the bot did not start: {line!r}"
    return proc, int(line.rsplit(":", 1)[1].split("/")[0])
