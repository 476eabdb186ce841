"""Socket Mode's connection: slack-bolt's handler on slack_sdk's aiohttp client, with the bot's
reconnect policy.

slack_sdk's client retries a failed websocket connection every ``ping_interval`` forever,
with the same single-use URL and a traceback each time, and its session monitor retries a
failed ``apps.connections.open`` every ``ping_interval`` as well. Here every (re)connection is
a series of attempts, each with a fresh URL from ``apps.connections.open``, spaced by
exponential backoff with jitter (:func:`reconnect_delay_s`: attempt n waits between half and
all of ``min(cap_s, base_s * 2**(n-1))``, so never less than ``base_s / 2`` and never more than
``cap_s``), with one log line per failed attempt naming the reason and the wait, and one when
connected. Attempts go on while the bot runs (a network outage ends; a refused app token is
said in every line, with the key to fix), and stop when the bot stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient

from bot._common import SlackUnavailableError

log = logging.getLogger("specperf.bot")
RECONNECT_BASE_S, RECONNECT_CAP_S = 1.0, 60.0


def reconnect_delay_s(attempt: int, base_s: float = RECONNECT_BASE_S, cap_s: float = RECONNECT_CAP_S,
                      rng: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1, 2, ...): exponential backoff
    ``d = min(cap_s, base_s * 2**(attempt-1))`` with "equal jitter" (AWS Architecture Blog,
    "Exponential Backoff And Jitter", 2015): uniform in ``[d/2, d]``."""
    ceiling = min(cap_s, base_s * 2 ** min(attempt - 1, 62))
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, SlackApiError):
        status = exc.response.status_code
        error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
        if error and status < 500 and status != 429:
            return f"Slack refused the app token ({error}); fix [slack].app_token"
        return f"Slack answered HTTP {status}" + (f" ({error})" if error else "")
    return f"{exc.__class__.__name__}: {str(exc)[:200]}" if str(exc) else exc.__class__.__name__


class ReconnectingClient(SocketModeClient):
    """slack_sdk's aiohttp Socket Mode client whose connections follow the module's policy."""

    def __init__(self, *args, base_s: float = RECONNECT_BASE_S, cap_s: float = RECONNECT_CAP_S, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.base_s, self.cap_s = base_s, cap_s

    async def connect(self, max_attempts: int | None = None) -> None:
        """Connect, retrying with backoff until connected or closed (see the module docstring),
        or at most ``max_attempts`` times.

        Raises:
            SlackUnavailableError: ``max_attempts`` attempts failed (the last one's reason).
        """
        for attempt in itertools.count(1):
            if self.closed:
                return
            try:
                if attempt > 1 or self.wss_uri is None:  # Slack's URLs serve one connection
                    self.wss_uri = await self.issue_new_wss_url()
                await self._open_session()
            except Exception as exc:  # noqa: BLE001 - every failure is one attempt, said and retried
                if self.closed:
                    return
                if attempt == max_attempts:
                    raise SlackUnavailableError(f"Socket Mode: no connection after {attempt} attempts: "
                                                f"{_reason(exc)}") from None
                delay = reconnect_delay_s(attempt, self.base_s, self.cap_s)
                log.warning("Socket Mode: connection attempt %d failed: %s; next attempt in %.1f s", attempt,
                            _reason(exc), delay)
                await asyncio.sleep(delay)
                continue
            log.info("Socket Mode: connected%s", f" after {attempt} attempts" if attempt > 1 else "")
            return

    async def connect_to_new_endpoint(self, force: bool = False) -> None:
        """Reconnect (the session monitor and receiver call this when the link drops), one
        caller at a time; a caller that finds the link up again does nothing."""
        async with self.connect_operation_lock:
            if force or not await self.is_connected():
                log.warning("Socket Mode: connection lost; reconnecting")
                self.wss_uri = None
                await self.connect()

    async def _open_session(self) -> None:
        """One connection attempt to ``wss_uri``: what slack_sdk's ``connect`` does inside its
        retry loop (close the old session, open the websocket, first ping, restart the session
        monitor and message receiver).

        Raises:
            Exception: aiohttp's, when the websocket cannot be opened.
        """
        assert self.wss_uri is not None, "issue_new_wss_url() first"
        old = self.current_session
        self.auto_reconnect_enabled = False  # the old session's tasks must not reconnect meanwhile
        if old is not None:
            with contextlib.suppress(Exception):
                await old.close()
        if self.aiohttp_client_session.closed:
            self.aiohttp_client_session = aiohttp.ClientSession()
        self.current_session = await self.aiohttp_client_session.ws_connect(
            self.wss_uri, autoping=False, heartbeat=self.ping_interval, proxy=self.proxy,
            ssl=self.web_client.ssl if self.web_client.ssl is not None else True)
        self.auto_reconnect_enabled = self.default_auto_reconnect_enabled
        self.stale = False
        await self.current_session.ping(f"sdk-ping-pong:{time.time()}".encode())
        if self.current_session_monitor is not None:
            self.current_session_monitor.cancel()
        self.current_session_monitor = asyncio.ensure_future(self.monitor_current_session())
        if self.message_receiver is not None:
            self.message_receiver.cancel()
        self.message_receiver = asyncio.ensure_future(self.receive_messages())


class SocketHandler(AsyncSocketModeHandler):
    """slack-bolt's Socket Mode handler for ``app`` on a :class:`ReconnectingClient`
    (``base_s``/``cap_s``: its backoff)."""

    def __init__(self, app: AsyncApp, app_token: str, ping_interval: float = 10, base_s: float = RECONNECT_BASE_S,
                 cap_s: float = RECONNECT_CAP_S) -> None:
        self.app, self.app_token = app, app_token
        self.client = ReconnectingClient(app_token=app_token, logger=app.logger, web_client=app.client,
                                         ping_interval=ping_interval, base_s=base_s, cap_s=cap_s)
        self.client.socket_mode_request_listeners.append(self.handle)  # type: ignore[arg-type]
