"""The Slack front end: a slack-bolt AsyncApp with the ``/specperf`` command, its Web API
client (rate-limit and server-error retries, per-channel pacing), the notifier that turns a
job's life into threaded messages, and the two ways Slack reaches the bot: Socket Mode, or an
aiohttp HTTP endpoint (``POST /slack/events``) with signature and replay checks.

Every command is acknowledged first, from the text and the config alone (parse, authorise),
before any I/O; git, the database and the Web API come after the ack. Usage errors and
refusals are the ack's ephemeral text, and nothing is queued for them. Every command is
recorded in the audit table (who, what, when, result).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

import core
import storage
from bot._common import data_dir, fmt, pick
from bot._jobs import JobQueue, Notifier, compare_request
from bot._runs import stored_report
from bot._scheduler import BotScheduler
from bot._slack_blocks import (
    bisect_blocks,
    failure_blocks,
    summary_line,
    verdict_blocks,
)
from bot._slack_commands import HELP, Command, UsageError, parse

log = logging.getLogger("specperf.bot")
SIGNATURE_WINDOW_S = 300  # Slack's: a request older than 5 minutes is refused
IO_SLOTS = 2  # commands doing database or git work at once, after their ack


def check_config(slack: core.SlackConfig) -> None:
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


def web_client(slack: core.SlackConfig) -> AsyncWebClient:
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


def _by(job: storage.Job) -> str:
    """Who queued ``job``: a person (``<@U...>``) or a watch."""
    return f"watch `{job.watch}`" if job.watch else f"<@{job.user_id}>"


@dataclass
class _Thread:
    channel: str
    thread_ts: str | None
    progress_ts: str | None = None
    response_url: str | None = None


class SlackNotifier(Notifier):
    """Posts a job's life in its thread: a progress message edited in place (at most every
    ``progress_interval_s``), then the verdict (Block Kit, text fallback, chart PNG) or the
    failure (reason, engine log tail). Where the bot is not in the channel, the reply goes
    through the command's ``response_url`` instead, unthreaded."""

    def __init__(self, client: AsyncWebClient, slack: core.SlackConfig, db) -> None:
        self.client, self.slack, self.db = client, slack, db
        self.pacer = ChannelPacer(slack.channel_interval_s)
        self.parent_ready: dict[int, asyncio.Event] = {}
        self._progress: dict[int, dict] = {}

    async def post(self, channel: str, **kwargs) -> dict | None:
        """``chat.postMessage`` in ``channel``'s turn; ``None`` (logged) on an API error or when
        Slack stays unreachable after the client's retries."""
        try:
            return (await self.pacer.call(channel, self.client.chat_postMessage, channel=channel, **kwargs)).data
        except SlackApiError as exc:
            log.warning("chat.postMessage in %s failed: %s", channel, exc.response.get("error"))
            return None
        except (OSError, TimeoutError) as exc:  # Slack unreachable after the client's retries
            log.warning("chat.postMessage in %s failed: %s: %s", channel, exc.__class__.__name__, exc)
            return None

    async def permalink(self, channel: str, ts: str) -> str | None:
        """The URL of message ``ts`` in ``channel`` (``chat.getPermalink``); ``None`` (logged)
        when Slack will not say."""
        try:
            return (await self.client.chat_getPermalink(channel=channel, message_ts=ts)).get("permalink")
        except SlackApiError as exc:
            log.warning("chat.getPermalink in %s failed: %s", channel, exc.response.get("error"))
        except (OSError, TimeoutError) as exc:
            log.warning("chat.getPermalink in %s failed: %s: %s", channel, exc.__class__.__name__, exc)
        return None

    async def _thread(self, job: storage.Job) -> _Thread:
        event = self.parent_ready.get(job.id)
        if event is not None:
            try:
                await asyncio.wait_for(event.wait(), 120)
            except TimeoutError:
                pass
            job = await asyncio.to_thread(storage.get_job, self.db, job.id)
        s = job.slack or {}
        return _Thread(s.get("channel", job.channel_id), s.get("thread_ts"), s.get("progress_ts"), s.get("response_url"))

    async def _webhook(self, thread: _Thread, **kwargs) -> None:
        if thread.response_url:
            try:
                await AsyncWebhookClient(thread.response_url).send(response_type="in_channel", **kwargs)
            except Exception as exc:  # a reply that cannot go out is logged, not fatal
                log.warning("response_url reply failed: %s", exc)

    async def job_started(self, job: storage.Job, run_id: int) -> None:
        thread = await self._thread(job)
        text = f"job {job.id}: run {run_id} started on host `{job.host}`"
        if thread.thread_ts is None:
            return
        sent = await self.post(thread.channel, thread_ts=thread.thread_ts, text=text)
        if sent:
            self._progress[job.id] = {"text": text, "task": None, "last": time.monotonic(),
                                      "thread": _Thread(thread.channel, thread.thread_ts, sent["ts"]), "label": text}
            await asyncio.to_thread(storage.update_job, self.db, job.id, slack={"progress_ts": sent["ts"]})

    def progress(self, job: storage.Job, message: str) -> None:
        state = self._progress.get(job.id)
        if state is None:
            return
        state["text"] = f"{state['label']}\n{message}"
        if state["task"] is None or state["task"].done():
            state["task"] = asyncio.get_running_loop().create_task(self._flush(job.id))

    async def _flush(self, job_id: int) -> None:
        state = self._progress[job_id]
        while True:
            wait = state["last"] + self.slack.progress_interval_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            text, thread = state["text"], state["thread"]
            try:
                await self.pacer.call(thread.channel, self.client.chat_update, channel=thread.channel,
                                      ts=thread.progress_ts, text=text)
            except SlackApiError as exc:
                log.warning("progress edit failed: %s", exc.response.get("error"))
            state["last"] = time.monotonic()
            if state["text"] == text:
                return

    async def _final_progress(self, job_id: int, text: str) -> None:
        state = self._progress.pop(job_id, None)
        if state is None:
            return
        if state["task"] is not None and not state["task"].done():
            state["task"].cancel()
            await asyncio.gather(state["task"], return_exceptions=True)
        thread = state["thread"]
        wait = state["last"] + self.slack.progress_interval_s - time.monotonic()
        if wait > 0:  # the last edit keeps the pace too
            await asyncio.sleep(wait)
        try:
            await self.pacer.call(thread.channel, self.client.chat_update, channel=thread.channel,
                                  ts=thread.progress_ts, text=f"{state['label']}\n{text}")
        except SlackApiError as exc:
            log.warning("progress edit failed: %s", exc.response.get("error"))

    async def job_finished(self, job, run_id, result, error) -> None:
        thread = await self._thread(job)
        self.parent_ready.pop(job.id, None)
        label = f"job {job.id}" + (f", run {run_id}" if run_id else "")
        if isinstance(result, core.BisectResult):
            report = result.to_dict()
            blocks, text = bisect_blocks(label, report)
            await self._final_progress(job.id, f"finished: bisect {report['status']}")
            await self._reply(thread, blocks=blocks, text=text)
            return
        if result is None or result.status != "done":
            reason = error or (result.reason if result else "unknown")
            await self._final_progress(job.id, "FAILED")
            blocks, text = failure_blocks(label, reason, result.log_tail if result else None)
            await self._reply(thread, blocks=blocks, text=text)
            return
        stored = await asyncio.to_thread(storage.load_run, self.db, run_id)
        report, trials = stored_report(stored)
        text = summary_line(stored, report)
        await self._final_progress(job.id, "finished: " + text)
        await self._reply(thread, blocks=verdict_blocks(stored, report), text=text)
        title = f"run {run_id}: {stored.run.engine_name} {stored.run.head_sha[:12]} vs {stored.run.base_sha[:12]}"
        chart = data_dir() / "charts" / f"run-{run_id}.png"
        await asyncio.to_thread(core.render_chart, trials, chart, title)
        if thread.thread_ts is not None:
            await self.upload(thread.channel, thread.thread_ts, chart, title)

    async def upload(self, channel: str, thread_ts: str, path: Path, title: str) -> bool:
        """Upload the file at ``path`` (a chart PNG) to the thread ``thread_ts`` of ``channel``,
        in the channel's turn; whether it went up (an API error or Slack staying unreachable is
        logged, not raised)."""
        try:
            await self.pacer.call(channel, self.client.files_upload_v2, channel=channel, thread_ts=thread_ts,
                                  file=str(path), filename=path.name, title=title)
            return True
        except SlackApiError as exc:
            log.warning("upload of %s failed: %s", path.name, exc.response.get("error"))
        except (OSError, TimeoutError) as exc:
            log.warning("upload of %s failed: %s: %s", path.name, exc.__class__.__name__, exc)
        return False

    async def _reply(self, thread: _Thread, **kwargs) -> None:
        if thread.thread_ts is None or await self.post(thread.channel, thread_ts=thread.thread_ts, **kwargs) is None:
            await self._webhook(thread, **kwargs)

    async def job_cancelled(self, job, reason) -> None:
        await self._final_progress(job.id, f"cancelled: {reason}")
        await self._reply(await self._thread(job), text=f"job {job.id} cancelled: {reason}")

    async def job_reconciled(self, job, status, reason) -> None:
        after = "it is queued again" if status == "queued" else "it is marked failed"
        await self._reply(await self._thread(job), text=f"job {job.id} was interrupted: {reason}; {after}")


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
        self.app.command(command)(self._on_command)
        self._verifier = SignatureVerifier(self.slack.signing_secret.get_secret_value())
        self._signatures: OrderedDict[str, float] = OrderedDict()
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._tasks: set[asyncio.Task] = set()
        self._io_slots = asyncio.Semaphore(IO_SLOTS)
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
        for task in list(self._tasks):
            task.cancel()
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

    # commands ---------------------------------------------------------------------------
    async def _io(self, fn, /, *args, **kwargs):
        """``fn(*args, **kwargs)`` in a thread, at most :data:`IO_SLOTS` commands at a time: a burst
        of commands' database and git work (GIL-bound ORM code) cannot starve the event loop
        that sends the next acks."""
        async with self._io_slots:
            return await asyncio.to_thread(fn, *args, **kwargs)

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

    def _target(self, cmd: Command) -> tuple[str | None, str | None]:
        """(host, engine) a command acts on, from the config alone; ``None`` for any.

        Raises:
            UsageError: an unknown engine or host.
        """
        host = engine = None
        if cmd.name in ("compare", "bisect"):
            try:
                engine = pick(self.config.engines, cmd.engine, "engine")
                spec = self.config.engine(engine)
            except core.ConfigError as exc:
                raise UsageError(str(exc)) from None
            host = cmd.host or spec.host
            if cmd.name == "bisect":
                cmd.options["mode"] = cmd.mode or ("baseline" if "baseline" in spec.modes else next(iter(spec.modes)))
            modes = [cmd.mode] if cmd.name == "bisect" else \
                cmd.modes or [m for m in self.config.compare.modes if m in spec.modes]
            missing = [m for m in modes if m not in spec.modes]
            if missing or not modes:
                raise UsageError(f"engine {engine!r} has no mode {', '.join(missing) or '(none chosen)'} "
                                 f"(its modes: {', '.join(spec.modes)})")
            cmd.options["modes"] = modes
        elif cmd.name == "env":
            host = cmd.host or "local"
        elif cmd.name == "history" and cmd.engine:
            engine = cmd.engine
            if engine not in self.config.engines:
                raise UsageError(f"no engine named {engine!r} (known: {', '.join(sorted(self.config.engines))})")
        if host is not None:
            if host not in self.config.hosts:
                raise UsageError(f"no host named {host!r} (known hosts: {', '.join(sorted(self.config.hosts))})")
        return host, engine

    async def _on_command(self, ack, body: dict, respond) -> None:
        if self._redelivery(body):
            await ack()  # a Slack retry of a command already taken: nothing more
            return
        text = (body.get("text") or "").strip()
        who = (body.get("user_id", ""), body.get("channel_id", ""), body.get("team_id", ""))
        try:
            cmd = parse(text)
            host, engine = self._target(cmd)
        except UsageError as exc:
            await ack(response_type="ephemeral", text=f"usage error: {exc}")
            self._audit(who, text, f"usage error: {str(exc).splitlines()[0]}")
            return
        if cmd.name == "help":
            await ack(response_type="ephemeral", text=HELP)
            self._audit(who, text, "help")
            return
        if not self.slack.allow.allows(who[0], who[1], host, engine):
            where = " and ".join(x for x in (f"host {host}" if host else "", f"engine {engine}" if engine else "") if x)
            await ack(response_type="ephemeral",
                      text=f"refused: <@{who[0]}> in this channel is not allowed to use specperf"
                           f"{' on ' + where if where else ''}; ask an admin to add you to [slack.allow] "
                           "(user and channel IDs)")
            self._audit(who, text, "refused: not on the allow-list")
            return
        await ack(response_type="ephemeral", text=f"`/specperf {text}`: working on it")
        task = asyncio.create_task(self._execute(cmd, who, text, body, respond, host, engine))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _audit(self, who: tuple[str, str, str], text: str, result: str, job_id: int | None = None) -> None:
        task = asyncio.create_task(self._io(storage.record_command, self.db, *who, text, result, job_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute(self, cmd, who, text, body, respond, host, engine) -> None:
        try:
            handler = getattr(self, f"_cmd_{cmd.name}")
            reply, result, job_id = await handler(cmd, who, body, host, engine)
        except core.SpecperfError as exc:
            reply, result, job_id = f"error: {exc}", f"error: {str(exc).splitlines()[0]}", None
        except Exception as exc:  # one command's bug must not take the bot down
            log.exception("command %r failed", text)
            reply, result, job_id = f"internal error: {exc.__class__.__name__}", f"internal error: {exc!r}", None
        self._audit(who, text, result, job_id)
        if reply and body.get("response_url"):
            try:
                await respond(response_type="ephemeral", text=reply)
            except Exception as exc:  # the ack went out; a lost ephemeral line is logged
                log.warning("ephemeral reply failed: %s", exc)

    def _job(self, kind: str, who, body, host: str, engine: str, args: dict) -> storage.Job:
        workload = pick(self.config.workloads, None, "workload", default="default")
        return storage.Job(kind=kind, host=host, engine_name=engine, workload_name=workload, user_id=who[0],
                           channel_id=who[1], team_id=who[2],
                           dedupe_key=f"{who[2]}:{body['trigger_id']}" if body.get("trigger_id") else None,
                           args=args, slack={"channel": who[1], "response_url": body.get("response_url")})

    async def _cmd_compare(self, cmd, who, body, host, engine):
        job = self._job("compare", who, body, host, engine,
                        {"head_ref": cmd.commit, "base_ref": cmd.base, "modes": cmd.modes, "rounds": cmd.rounds})
        request = compare_request(self.config, job, self.queue.host(host))
        try:
            base_sha, head_sha = await core.resolve_refs(request)
        except core.GitError as exc:
            return f"usage error: {exc}", f"usage error: {exc}", None
        job.args = {**job.args, "base_sha": base_sha, "head_sha": head_sha}
        base = cmd.base or f"{cmd.commit}^"
        return await self._queue(job, who, body, f"<@{who[0]}> compare `{cmd.commit}` ({head_sha[:10]}) against `{base}` "
                                 f"({base_sha[:10]}) on host `{host}`, engine `{engine}`, modes {', '.join(cmd.modes)}")

    async def _cmd_bisect(self, cmd, who, body, host, engine):
        job = self._job("bisect", who, body, host, engine, {"good_ref": cmd.good, "bad_ref": cmd.bad, "mode": cmd.mode})
        target = self.queue.host(host)
        repo = self.config.engine(engine).repo
        try:
            if not repo:
                raise core.GitError(f"engine {engine!r} has no repo")
            good = await core.resolve_commit(target, repo, cmd.good)
            bad = await core.resolve_commit(target, repo, cmd.bad)
            commits = await core.first_parent_range(target, repo, good, bad)
        except core.GitError as exc:
            return f"usage error: {exc}", f"usage error: {exc}", None
        return await self._queue(job, who, body, f"<@{who[0]}> bisect `{cmd.good}` ({good[:10]}) .. `{cmd.bad}` "
                                 f"({bad[:10]}), {len(commits)} commits, mode {cmd.mode}, on host `{host}`, engine "
                                 f"`{engine}`")

    async def _queue(self, job: storage.Job, who, body, text: str):
        """Queue ``job`` and post its parent message (``text`` plus the job and its place)."""
        host = job.host
        async with self._io_slots:
            queued = await self.queue.submit(job, wake=False)
        if queued is None:
            return None, "redelivery: already queued", None
        ready = self.notifier.parent_ready[queued.id] = asyncio.Event()
        try:
            ahead = sum(1 for j in await self._io(storage.list_jobs, self.db, host=host) if j.id < queued.id)
            text += f": job {queued.id}, " + (f"{ahead} job(s) ahead" if ahead else "next to run")
            sent = await self.notifier.post(who[1], text=text)
            if sent is not None:
                await self._io(storage.update_job, self.db, queued.id, slack={"thread_ts": sent["ts"]})
            else:
                await AsyncWebhookClient(body["response_url"]).send(
                    response_type="in_channel", text=text + " (invite the bot to this channel for threaded progress)")
        finally:
            ready.set()
            self.queue.wake(host)
        return None, f"queued job {queued.id}", queued.id

    async def _cmd_status(self, cmd, who, body, host, engine):
        jobs = ([await self._io(storage.get_job, self.db, cmd.job)] if cmd.job
                else await self._io(storage.list_jobs, self.db, ("running",)))
        jobs = [j for j in jobs if j is not None]
        if not jobs:
            return ("no such job" if cmd.job else "no job is running"), "status", None
        lines = []
        for job in jobs:
            line = (f"job {job.id} ({job.status}): compare `{job.args.get('head_ref')}` on host `{job.host}`, "
                    f"engine `{job.engine_name}`, by {_by(job)}")
            if job.run_id:
                stored = await self._io(storage.load_run, self.db, job.run_id)
                ok = sum(1 for t in stored.trials if t.status == "ok")
                verdicts = ", ".join(f"{v.mode} {v.verdict}" for v in stored.verdicts) or "no verdict yet"
                line += f"; run {job.run_id} ({stored.run.status}): {ok} launches done, {verdicts}"
            if job.reason:
                line += f"; {job.reason}"
            lines.append(line)
        return "\n".join(lines), "status", None

    async def _cmd_queue(self, cmd, who, body, host, engine):
        jobs = await self._io(storage.list_jobs, self.db)
        if not jobs:
            return "the queue is empty", "queue", None
        by_host: dict[str, list[str]] = {}
        for job in jobs:
            by_host.setdefault(job.host, []).append(
                f"job {job.id} {job.status}: `{job.args.get('head_ref')}` ({job.engine_name}) by {_by(job)}")
        return "\n".join(f"*{h}*\n" + "\n".join(lines) for h, lines in by_host.items()), "queue", None

    async def _cmd_cancel(self, cmd, who, body, host, engine):
        job = await self._io(storage.get_job, self.db, cmd.job)
        if job is None:
            return f"there is no job {cmd.job}", "cancel: no such job", None
        if not self.slack.allow.allows(who[0], who[1], job.host, job.engine_name):
            return f"refused: you may not cancel jobs on host {job.host}", "refused: cancel", job.id
        outcome = await self.queue.cancel(job.id, f"cancelled by <@{who[0]}>")
        return outcome, outcome, job.id

    async def _cmd_history(self, cmd, who, body, host, engine):
        runs = await self._io(storage.list_runs, self.db, engine, 10)
        if not runs:
            return "no runs yet", "history", None
        lines = [f"run {run.id} {run.created_at:%Y-%m-%d %H:%M} {run.engine_name} `{run.head_ref}` {run.head_sha[:10]} "
                 f"vs {run.base_sha[:10]} {run.status}: "
                 + (", ".join(f"{v.mode} {v.verdict} {v.change_pct:+.1f}%" if v.change_pct is not None
                              else f"{v.mode} {v.verdict}" for v in verdicts) or "-")
                 for run, verdicts in runs]
        return "\n".join(lines), "history", None

    async def _cmd_env(self, cmd, who, body, host, engine):
        engines = [(n, e) for n, e in self.config.engines.items() if e.host == host]
        python, env, label = (engines[0][1].python, dict(engines[0][1].env), f"engine {engines[0][0]}") if engines \
            else ("python3", {}, "the system python")
        snapshot = await core.probe_async(python, cheap=False, env=env, host=self.queue.host(host))
        checks = core.run_checks(snapshot, under_load=False)
        lines = [(f"env of host `{host}` with {label} ({snapshot['kind']} probe, {fmt(snapshot['wall_s'], 2)} s): "
                  f"worst {core.worst(checks)}")]
        lines += [f"{c.status} {c.name}: {c.line}" for c in checks]
        return "\n".join(lines)[:3000], f"env: {core.worst(checks)}", None
