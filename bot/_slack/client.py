"""The Slack Web API client of the bot: the token and mode checks, an ``AsyncWebClient`` with
rate-limit, server-error and connection retries, per-channel pacing of calls, replies through a
command's response URL, and the log lines of the bot process.

What the bot says goes out redacted: every paced Web API call's arguments and every
response-URL reply pass through :func:`core._redact.redact` (the one redaction rule: values of
secret-looking environment variables, option arguments, URLs' passwords), and so does every
log line (:class:`RedactingFormatter`), whatever exception text a Slack or engine failure
carried.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse
from slack_sdk.webhook.async_client import AsyncWebhookClient

import core
from bot._common import SlackUnavailableError
from bot._settings import SlackConfig
from core._redact import redact


async def check_slack(client: AsyncWebClient, slack: SlackConfig) -> AsyncSlackResponse:
    """``auth.test`` with the bot token, and in Socket Mode ``apps.connections.open`` with the
    app token, each retried by the client (server errors 5 times, connection errors 3 times);
    returns ``auth.test``'s response (slack-bolt's authorization middleware reads its headers).

    Raises:
        core.ConfigError: Slack refused the bot token or the app token (the reason Slack gave).
        SlackUnavailableError: Slack unreachable or answering server errors after the retries.
    """
    async def app_token_check():
        return await client.apps_connections_open(app_token=slack.app_token.get_secret_value())

    calls: list[tuple[str, Callable[[], Awaitable]]] = [("bot token", client.auth_test)]
    if slack.mode == "socket":
        calls.append(("app token", app_token_check))
    answers = []
    for what, call in calls:
        try:
            answers.append(await call())
        except SlackApiError as exc:
            status = exc.response.status_code
            if status >= 500 or status == 429:
                raise SlackUnavailableError(f"Slack answered HTTP {status} to the {what} check at {slack.api_url} "
                                            "after 5 retries; try again later") from None
            error = exc.response.get("error") if isinstance(exc.response.data, dict) else f"HTTP {status}"
            raise core.ConfigError(f"Slack refused the {what}: {error}") from None
        except (OSError, TimeoutError) as exc:  # aiohttp's connection errors are OSErrors
            raise SlackUnavailableError(f"Slack unreachable at {slack.api_url} after 3 retries: "
                                        f"{exc.__class__.__name__}: {str(exc)[:200]}") from None
    return answers[0]


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


log = logging.getLogger("specperf.bot")


class RedactingFormatter(logging.Formatter):
    """A log formatter whose every line (exception text included) is :func:`core._redact.redact`-ed."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


async def reply_via(response_url: str, **kwargs) -> bool:
    """Post ``kwargs`` (``text``, ``blocks``, ``response_type``), redacted, to a command's
    ``response_url``; whether it went out (a failure is logged, not raised)."""
    try:
        await AsyncWebhookClient(response_url).send(**redact(kwargs))
        return True
    except Exception as exc:  # noqa: BLE001 - a reply that cannot go out is logged, not fatal
        log.warning("response_url reply failed: %s: %s", exc.__class__.__name__, str(exc)[:200])
        return False


class ChannelPacer:
    """Serialises Web API calls per channel with at least ``interval_s`` seconds between the
    starts of two calls in one channel (Slack allows about one message per second per
    channel). Calls wait their turn in order; none is dropped: a 429 that outlasts the client's
    retries is waited out here too (``Retry-After`` seconds, up to 20 more times). The call's
    arguments go out redacted (:func:`core._redact.redact`)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._last: dict[str, float] = {}

    async def call(self, channel: str, method, /, **kwargs):
        """``await method(**kwargs)`` in ``channel``'s turn; its response.

        Raises:
            SlackApiError: an error other than rate limiting (``not_in_channel``, ...).
        """
        kwargs = redact(kwargs)
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
