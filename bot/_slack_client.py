"""The Slack Web API client of the bot: the token and mode checks, an ``AsyncWebClient`` with
rate-limit, server-error and connection retries, and per-channel pacing of calls."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

import core
from bot._settings import SlackConfig


def check_config(slack: SlackConfig) -> None:
    """Fail early when ``[slack]`` cannot work: nothing is opened or contacted here.

    Raises:
        core.ConfigError: the bot token, or the mode's app token or signing secret, is empty.
    """
    if not slack.bot_token.get_secret_value():
        raise core.ConfigError("[slack] bot_token is empty; set it (bot_token = \"${SLACK_BOT_TOKEN}\")")
    if slack.mode == "http" and not slack.signing_secret.get_secret_value():
        raise core.ConfigError("[slack] mode = \"http\" needs signing_secret (\"${SLACK_SIGNING_SECRET}\")")
    if slack.mode == "socket" and not slack.app_token.get_secret_value():
        raise core.ConfigError("[slack] mode = \"socket\" needs app_token (\"${SLACK_APP_TOKEN}\", xapp-...)")


def web_client(slack: SlackConfig) -> AsyncWebClient:
    """The Web API client: ``[slack].api_url``, the bot token, and retries: 429 after its
    ``Retry-After`` (up to 30 times), 500/503 (up to 5 times), connection errors."""
    return AsyncWebClient(
        token=slack.bot_token.get_secret_value() or None, base_url=slack.api_url,
        retry_handlers=[AsyncConnectionErrorRetryHandler(max_retry_count=3),
                        AsyncRateLimitErrorRetryHandler(max_retry_count=30),
                        AsyncServerErrorRetryHandler(max_retry_count=5)],
    )


class ChannelPacer:
    """Serialises Web API calls per channel with at least ``interval_s`` seconds between the
    starts of two calls in one channel (Slack allows about one message per second per
    channel). Calls wait their turn in order; none is dropped: a 429 that outlasts the client's
    retries is waited out here too (``Retry-After`` seconds, up to 20 more times)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._last: dict[str, float] = {}

    async def call(self, channel: str, method, /, **kwargs):
        """``await method(**kwargs)`` in ``channel``'s turn; its response.

        Raises:
            SlackApiError: an error other than rate limiting (``not_in_channel``, ...).
        """
        async with self._locks[channel]:
            for attempt in range(21):
                wait = self._last.get(channel, -1e9) + self.interval_s - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                try:
                    return await method(**kwargs)
                except SlackApiError as exc:
                    if exc.response.status_code != 429 or attempt == 20:
                        raise
                    await asyncio.sleep(float(exc.response.headers.get("Retry-After", 1)))
                finally:
                    self._last[channel] = time.monotonic()
