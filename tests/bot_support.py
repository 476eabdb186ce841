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
                 trials: int = 2, slack_extra: str = "", db_url: str | None = None) -> Path:
    """A specperf.toml: the fake engine from ``repo_path`` on ``port``, a small workload, and a
    [slack] section (HTTP on any free port, tokens from literals, U_ALLOWED in C_ALLOWED allowed)."""
    config = tmp_path / "specperf.toml"
    config.write_text(
        f'[engines.fake]\nkind = "command"\nrepo = "{repo_path}"\nsource_dir = "src"\npython = "{sys.executable}"\n'
        f'command = ["{{python}}", "-m", "fake_engine", "--port", "{{port}}"]\nport = {port}\n'
        f'env = {{ PYTHONPATH = "{ROOT}" }}\nready_timeout_s = 20\nstop_grace_s = 3\n'
        '[engines.fake.modes]\nbaseline = []\neagle3 = ["--itl-scale", "0.5"]\n'
        f'[compare]\nmin_trials = {trials}\nmax_trials = {trials}\ncooldown_s = 0\nmodes = ["baseline", "eagle3"]\n'
        f'[workloads.default]\n{workload}'
        + (f'[storage]\nurl = "{db_url}"\n' if db_url else "")
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
