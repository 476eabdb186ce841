"""The Slack bot's transport: a slack-bolt AsyncApp with the ``/specperf`` command, and the two
ways Slack reaches the bot: Socket Mode, or an aiohttp HTTP endpoint (``POST /slack/events``)
with signature and replay checks; a retried delivery of a command is acknowledged and dropped.
The bot composes the Web API client (:mod:`bot._slack_client`), the notifier
(:mod:`bot._slack_notifier`), the commands (:mod:`bot._slack_handlers`), the job queue and the
scheduler.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier

import core
from bot._jobs import JobQueue
from bot._scheduler import BotScheduler
from bot._slack_client import check_config, web_client
from bot._slack_handlers import SlackCommands
from bot._slack_notifier import SlackNotifier

log = logging.getLogger("specperf.bot")
SIGNATURE_WINDOW_S = 300  # Slack's: a request older than 5 minutes is refused


class SlackBot:
    """The bot: the AsyncApp and its ``/specperf`` listener, the job queue, the scheduler
    (``[schedule]``, ``[[watches]]``; ``schedules.status`` says whether this process runs it),
    and the connection (``[slack].mode``). ``await start()``, then ``await stop()``.

    Raises:
        core.ConfigError: the bot token, or the mode's app token or signing secret, is empty; a
            cron expression cannot be read.
    """

    def __init__(self, config: core.Config, db, command: str = "/specperf") -> None:
        self.config, self.db, self.slack = config, db, config.slack
        check_config(self.slack)
        self.client = web_client(self.slack)
        self.notifier = SlackNotifier(self.client, self.slack, db)
        self.queue = JobQueue(config, db, self.notifier)
        self.schedules = BotScheduler(config, db, self.queue, self.notifier)
        self.schedules.wanted()  # a cron expression APScheduler cannot read fails here, before any I/O
        http = self.slack.mode == "http"
        self.app = AsyncApp(client=self.client, signing_secret=self.slack.signing_secret.get_secret_value() or None,
                            request_verification_enabled=http, process_before_response=False)
        self.commands = SlackCommands(config, db, self.queue, self.notifier)
        self.app.command(command)(self._on_command)
        self._verifier = SignatureVerifier(self.slack.signing_secret.get_secret_value())
        self._signatures: OrderedDict[str, float] = OrderedDict()
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._runner: web.AppRunner | None = None
        self._socket = None
        self.port: int | None = None

    # connection -------------------------------------------------------------------------
    async def start(self) -> None:
        """Check the bot token (auth.test), reconcile and start the workers, then listen (HTTP)
        or connect (Socket Mode).

        Raises:
            core.ConfigError: Slack refused the bot token.
        """
        try:
            identity = await self.client.auth_test()
        except SlackApiError as exc:
            raise core.ConfigError(f"Slack refused the bot token: {exc.response.get('error')}") from None
        # bolt would call auth.test on the first command, before its ack: give it the answer now
        for middleware in getattr(self.app, "_async_middleware_list", []):
            if isinstance(middleware, AsyncSingleTeamAuthorization):
                middleware.auth_test_result = identity
        log.info("Slack: bot user %s in team %s", identity.get("user_id"), identity.get("team_id"))
        await self.queue.start()
        await self.schedules.start()  # or not: another bot process runs the schedules (status says so)
        if self.slack.mode == "http":
            server = web.Application()
            server.router.add_post("/slack/events", self._http)
            self._runner = web.AppRunner(server, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, self.slack.http_host, self.slack.http_port)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
        else:
            from slack_bolt.adapter.socket_mode.async_handler import (
                AsyncSocketModeHandler,
            )

            self._socket = AsyncSocketModeHandler(self.app, self.slack.app_token.get_secret_value())
            await self._socket.connect_async()

    async def stop(self) -> None:
        """Stop listening and the workers (a running job's engine is stopped); a second call does nothing."""
        runner, socket, self._runner, self._socket = self._runner, self._socket, None, None  # stop once
        if runner is not None:
            await runner.cleanup()
        if socket is not None:
            await socket.close_async()
        self.commands.cancel()
        await self.schedules.stop()
        await self.queue.stop()

    async def _http(self, request: web.Request) -> web.Response:
        body = await request.read()
        timestamp = request.headers.get("X-Slack-Request-Timestamp")
        signature = request.headers.get("X-Slack-Signature")
        if not self._verifier.is_valid(body, timestamp, signature):
            return web.Response(status=401, text="invalid or stale Slack signature")
        now = time.time()
        while self._signatures and next(iter(self._signatures.values())) < now - 2 * SIGNATURE_WINDOW_S:
            self._signatures.popitem(last=False)
        if signature in self._signatures:
            return web.Response(status=401, text="replayed request")
        self._signatures[signature] = now
        bolt_request = AsyncBoltRequest(body=body.decode(), query=request.query_string, headers=dict(request.headers))
        return await to_aiohttp_response(await self.app.async_dispatch(bolt_request))

    async def _on_command(self, ack, body: dict, respond) -> None:
        if self._redelivery(body):
            await ack()  # a Slack retry of a command already taken: nothing more
            return
        await self.commands.handle(ack, body, respond)

    def _redelivery(self, body: dict) -> bool:
        trigger = body.get("trigger_id")
        if not trigger:
            return False
        key = f"{body.get('team_id', '')}:{trigger}"
        now = time.monotonic()
        while self._seen and next(iter(self._seen.values())) < now - 3600:
            self._seen.popitem(last=False)
        if key in self._seen:
            return True
        self._seen[key] = now
        return False
