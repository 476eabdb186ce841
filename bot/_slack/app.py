"""The Slack bot's transport: a slack-bolt AsyncApp with the ``/specperf`` command, and the two
ways Slack reaches the bot: Socket Mode, or an aiohttp HTTP endpoint (``POST /slack/events``)
with signature and replay checks; a retried delivery of a command is acknowledged and dropped.

HTTP: a request that is too large, lacks or has a malformed timestamp or signature, fails the
signature check or cannot be read is refused (400/401) with one short log line, never a 500
with a traceback; a signature already served within Slack's 5-minute window, also by an
earlier bot process, is refused (kept in the database, :func:`storage.first_sight`).
The bot composes the Web API client (:mod:`bot._slack.client`), the notifier
(:mod:`bot._slack.notifier`), the commands (:mod:`bot._slack.handlers`), the job queue and the
scheduler.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier
from sqlalchemy.exc import SQLAlchemyError

import core
import storage
from bot._jobs.queue_workers import JobQueue, every
from bot._jobs.scheduler import BotScheduler
from bot._slack.client import check_config, check_slack, web_client
from bot._slack.handlers import SlackCommands
from bot._slack.notifier import SlackNotifier
from bot._slack.socket_mode import SocketHandler

log = logging.getLogger("specperf.bot")
SIGNATURE_WINDOW_S = 300  # Slack's: a request older than 5 minutes is refused
MAX_BODY_BYTES = 64 << 10  # a slash command's form is a few hundred bytes
SOCKET_START_ATTEMPTS = 5  # at start-up (about 15 s of backoff); once connected, reconnects go on


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
        self.notifier = SlackNotifier(self.client, self.slack, db, config.compare.max_trials)
        self.queue = JobQueue(config, db, self.notifier)
        self.schedules = BotScheduler(config, db, self.queue, self.notifier)
        self.schedules.wanted()  # a cron expression APScheduler cannot read fails here, before any I/O
        http = self.slack.mode == "http"
        self.app = AsyncApp(client=self.client, signing_secret=self.slack.signing_secret.get_secret_value() or None,
                            request_verification_enabled=http, process_before_response=False)
        self.commands = SlackCommands(config, db, self.queue, self.notifier)
        self.app.command(command)(self._on_command)
        self._verifier = SignatureVerifier(self.slack.signing_secret.get_secret_value())
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._runner: web.AppRunner | None = None
        self._socket = None
        self._resumer: asyncio.Task | None = None
        self.port: int | None = None

    # connection -------------------------------------------------------------------------
    async def start(self) -> None:
        """Check the bot token (auth.test), reconcile and start the workers, then listen (HTTP)
        or connect (Socket Mode).

        Raises:
            core.ConfigError: Slack refused the bot token or the app token.
            SlackUnavailableError: Slack unreachable or failing after bounded retries (Socket
                Mode: no websocket after ``SOCKET_START_ATTEMPTS`` attempts).
        """
        identity = await check_slack(self.client, self.slack)
        # bolt would call auth.test on the first command, before its ack: give it the answer now
        for middleware in getattr(self.app, "_async_middleware_list", []):
            if isinstance(middleware, AsyncSingleTeamAuthorization):
                middleware.auth_test_result = identity
        log.info("Slack: bot user %s in team %s", identity.get("user_id"), identity.get("team_id"))
        await self.queue.start()
        await self.commands.resume()
        self._resumer = asyncio.create_task(every(self.config.storage.owner_lease_s / 3, self.commands.resume,
                                                  "resuming received commands"))
        await self.schedules.start()  # or not: another bot process runs the schedules (status says so)
        if self.slack.mode == "http":
            server = web.Application()
            server.router.add_post("/slack/events", self._http)
            server.router.add_get("/health", self._health)
            self._runner = web.AppRunner(server, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, self.slack.http_host, self.slack.http_port)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
        else:
            self._socket = SocketHandler(self.app, self.slack.app_token.get_secret_value())
            await self._socket.client.connect(max_attempts=SOCKET_START_ATTEMPTS)

    async def stop(self) -> None:
        """Stop listening and the workers (a running job's engine is stopped); a second call does nothing."""
        runner, socket, self._runner, self._socket = self._runner, self._socket, None, None  # stop once
        if runner is not None:
            await runner.cleanup()
        if socket is not None:
            await socket.close_async()
        if self._resumer is not None:
            self._resumer.cancel()
        self.commands.cancel()
        await self.schedules.stop()
        await self.queue.stop()

    async def _health(self, request: web.Request) -> web.Response:
        """``GET /health``: 200 ``ok``, or 503 with one line per problem of the job queue
        (:meth:`bot._jobs.queue_workers.JobQueue.health`: queued jobs without a live worker, restarted
        workers) or ``database unavailable (...)``."""
        try:
            queued = await asyncio.to_thread(storage.list_jobs, self.db, ("queued",))
        except SQLAlchemyError as exc:
            return web.Response(status=503, text=f"database unavailable ({storage.short_error(exc)})\n")
        problems = self.queue.health(queued)
        return web.Response(status=503 if problems else 200, text="\n".join(problems or ["ok"]) + "\n")

    def _refuse(self, request: web.Request, status: int, why: str) -> web.Response:
        log.warning("HTTP %d to %s from %s: %s", status, request.path, request.remote, why)
        return web.Response(status=status, text=why)

    async def _http(self, request: web.Request) -> web.Response:
        if (request.content_length or 0) > MAX_BODY_BYTES:
            return self._refuse(request, 400, f"request body over {MAX_BODY_BYTES} bytes")
        body = await request.content.read(MAX_BODY_BYTES + 1)
        if len(body) > MAX_BODY_BYTES:
            return self._refuse(request, 400, f"request body over {MAX_BODY_BYTES} bytes")
        timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature", "")
        if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
            return self._refuse(request, 401, "missing or malformed X-Slack-Request-Timestamp")
        if not (signature.isascii() and signature.startswith("v0=") and len(signature) == 67):
            return self._refuse(request, 401, "missing or malformed X-Slack-Signature")
        try:
            text = body.decode()
        except UnicodeDecodeError:
            return self._refuse(request, 400, "request body is not UTF-8")
        if not self._verifier.is_valid(text, timestamp, signature):
            return self._refuse(request, 401, "invalid or stale Slack signature")
        try:
            fresh = await asyncio.to_thread(storage.first_sight, self.db, signature, 2 * SIGNATURE_WINDOW_S)
        except SQLAlchemyError as exc:
            return self._refuse(request, 503, f"database unavailable ({storage.short_error(exc)})")
        if not fresh:
            return self._refuse(request, 401, "replayed request")
        try:  # bolt parses the body here: JSON by Content-Type or a leading "{", a form, or a form's payload
            bolt_request = AsyncBoltRequest(body=text, query=request.query_string, headers=dict(request.headers))
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            return self._refuse(request, 400, f"unreadable request body ({exc.__class__.__name__}: not JSON, "
                                "nor a form whose payload is JSON)")
        try:
            return await to_aiohttp_response(await self.app.async_dispatch(bolt_request))
        except Exception as exc:  # noqa: BLE001 - logged once with an id; the answer carries no detail
            incident = secrets.token_hex(4)
            log.error("HTTP 500 to %s from %s, incident %s: %s: %s", request.path, request.remote, incident,
                      exc.__class__.__name__, str(exc)[:200])
            return web.Response(status=500, text=f"internal error (incident {incident}; see the bot's log)")

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
