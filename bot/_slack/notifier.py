"""The Slack notifier: a job's life as threaded messages (parent, progress edited in place,
verdict or failure, chart upload), paced per channel; the bot's only writer of job messages."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy.exc import SQLAlchemyError

import core
import storage
from bot import _app as app
from bot._common import data_dir
from bot._jobs.queue_workers import Notifier
from bot._runs import add_history, stored_report
from bot._settings import SlackConfig
from bot._slack.blocks import (
    bisect_blocks,
    failure_blocks,
    summary_line,
    verdict_blocks,
    watch_blocks,
)
from bot._slack.client import ChannelPacer, reply_via
from bot._slack.mrkdwn import escape
from bot._slack.summary_blocks import summary_blocks
from core._experiments.bisection import BisectResult
from core._experiments.report import render_chart

log = logging.getLogger("specperf.bot")


def queued_by(job: storage.Job) -> str:
    """Who queued ``job``: a person (``<@U...>``) or a watch."""
    return f"watch `{job.watch}`" if job.watch else f"<@{job.user_id}>"


def job_what(job: storage.Job) -> str:
    """What ``job`` does, for status and queue lines: ``compare `slow```, ``calibrate `HEAD```,
    ``bisect `good`..`bad```, ``watch 30 s``."""
    args = job.args or {}
    if job.kind == "watch":
        return f"watch {float(args.get('seconds', 0)):g} s"
    if job.kind == "bisect":
        return f"bisect `{args.get('good_ref')}`..`{args.get('bad_ref')}`"
    if job.kind == "recheck":
        return f"recheck run {args.get('recheck_of')}"
    if args.get("head_ref") is None and job.kind == "compare":  # two set-ups without a repo
        return f"compare engine `{job.engine_name}` against `{args.get('base_engine')}`"
    return f"{job.kind} `{args.get('head_ref')}`"


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
    through the command's ``response_url`` instead, unthreaded. ``max_trials``: the compares'
    cap of launches per arm, within which a calibration's answer plans."""

    def __init__(self, client: AsyncWebClient, slack: SlackConfig, db, max_trials: int = 64) -> None:
        self.client, self.slack, self.db, self.max_trials = client, slack, db, max_trials
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

    async def post_summary(self, channel: str, summary: core.RegressionSummary, title: str,
                           links: dict[int, str], html_base_url: str | None) -> dict | None:
        """The scheduled regression summary in ``channel``, as
        :func:`bot._slack.summary_blocks.summary_blocks` renders it (``links``: ``{run id:
        thread permalink}``); the posted message, or ``None`` as :meth:`post`."""
        blocks, text = summary_blocks(summary, title, links, html_base_url)
        return await self.post(channel, blocks=blocks, text=text)

    async def permalink(self, channel: str, ts: str) -> str | None:
        """The URL of message ``ts`` in ``channel`` (``chat.getPermalink``); ``None`` (logged)
        when Slack will not say."""
        try:
            return (await self.client.chat_getPermalink(channel=channel, message_ts=ts)).get("permalink")
        except SlackApiError as exc:  # its response may not be JSON (an HTTP error page): log the status
            log.warning("chat.getPermalink in %s failed: HTTP %s", channel, exc.response.status_code)
        except (OSError, TimeoutError) as exc:
            log.warning("chat.getPermalink in %s failed: %s: %s", channel, exc.__class__.__name__, exc)
        return None

    async def _thread(self, job: storage.Job) -> _Thread:
        event = self.parent_ready.get(job.id)
        if event is not None:
            try:
                async with asyncio.timeout(120):
                    await event.wait()
            except TimeoutError:
                pass
            try:
                job = await asyncio.to_thread(storage.get_job, self.db, job.id)
            except SQLAlchemyError:  # a database outage: the thread known when the job was read
                pass
        s = job.slack or {}
        return _Thread(s.get("channel", job.channel_id), s.get("thread_ts"), s.get("progress_ts"), s.get("response_url"))

    async def _webhook(self, thread: _Thread, **kwargs) -> None:
        if thread.response_url:
            await reply_via(thread.response_url, response_type="in_channel", **kwargs)

    async def job_started(self, job: storage.Job, run_id: int | None) -> None:
        thread = await self._thread(job)
        text = (f"job {job.id}: run {run_id} started on host `{job.host}`" if run_id is not None else
                f"job {job.id}: {job.kind} started on host `{job.host}`")
        if thread.thread_ts is None:
            return
        sent = await self.post(thread.channel, thread_ts=thread.thread_ts, text=text)
        if sent:
            self._progress[job.id] = {"text": text, "task": None, "last": time.monotonic(),
                                      "thread": _Thread(thread.channel, thread.thread_ts, sent["ts"]), "label": text}
            await asyncio.to_thread(storage.update_job, self.db, job.id, slack={"progress_ts": sent["ts"]})

    async def job_resumed(self, job: storage.Job, run_id: int) -> None:
        thread = await self._thread(job)
        if thread.thread_ts is None or thread.progress_ts is None:
            return
        label = f"job {job.id}: run {run_id} on host `{job.host}`, followed again after a bot restart"
        self._progress[job.id] = {"text": label, "task": None, "last": 0.0, "label": label,
                                  "thread": _Thread(thread.channel, thread.thread_ts, thread.progress_ts)}

    def progress(self, job: storage.Job, message: str) -> None:
        state = self._progress.get(job.id)
        if state is None:
            return
        state["text"] = f"{state['label']}\n{escape(message)}"  # core's lines carry other users' command lines
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
        if isinstance(result, app.WatchResult):
            blocks, text = watch_blocks(label, job.host, result)
            await self._final_progress(job.id, "finished: " + text)
            await self._reply(thread, blocks=blocks, text=text)
            return
        if isinstance(result, BisectResult):
            report = result.to_dict()
            blocks, text = bisect_blocks(label, report)
            await self._final_progress(job.id, f"finished: bisect {report['status']}")
            await self._reply(thread, blocks=blocks, text=text)
            return
        if result is None or result.status != "done":
            reason = error or (result.reason if result else "unknown")
            status = "REFUSED" if result is not None and result.status == "refused" else "FAILED"
            await self._final_progress(job.id, status)
            blocks, text = failure_blocks(label, reason, result.log_tail if result else None, status)
            await self._reply(thread, blocks=blocks, text=text)
            return
        stored = await asyncio.to_thread(storage.load_run, self.db, run_id)
        report, trials = stored_report(stored)
        text = summary_line(stored, report)
        goal = stored.run.settings.get("calibration")
        calibration = app.calibration_lines(trials, goal, report["settings"]["alpha"], report.get("cost"),
                                            self.max_trials) if goal else None
        await self._final_progress(job.id, "finished: " + text)
        history = await asyncio.to_thread(add_history, self.db, stored, report)
        await self._reply(thread, blocks=verdict_blocks(stored, report, calibration, history), text=text)
        title = f"run {run_id}: {stored.run.engine_name} {stored.run.head_sha[:12]} vs {stored.run.base_sha[:12]}"
        chart = data_dir() / "charts" / f"run-{run_id}.png"
        await asyncio.to_thread(render_chart, trials, chart, title, report.get("launches"))
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
        await self._final_progress(job.id, f"interrupted; {after}")
        await self._reply(await self._thread(job), text=f"job {job.id} was interrupted: {escape(reason)}; {after}")

    async def job_note(self, job, text) -> None:
        await self._reply(await self._thread(job), text=text)
