"""The bot's scheduler: APScheduler 3.11's ``AsyncIOScheduler`` inside the ``specperf bot``
process, running the ``[schedule]`` summary and the ``[[watches]]`` from the config.

Jobs (ids ``summary`` and ``watch:<name>``) live in the run database (APScheduler's
``SQLAlchemyJobStore``, table ``apscheduler_jobs``) so a tick missed while the bot was down
runs once after restart (coalesced), if it is at most ``[schedule].misfire_grace_s`` late.
The store pickles jobs, so they name module-level coroutines (:func:`run_watch`,
:func:`run_summary`) with plain-string arguments; those find the bot's database, queue and
notifier through the context this module holds while its scheduler runs.

Only one scheduler runs: it takes an exclusive ``flock`` on ``<data dir>/scheduler.lock``;
a second bot process (sharing the data directory) logs that the schedules run elsewhere and
serves commands without a scheduler. Every tick is recorded in ``schedule_log``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fcntl
import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger

import core
import storage
from bot._common import data_dir
from bot._history_pages import commit_orders
from bot._jobs.queue_workers import JobQueue, compare_request
from core._experiments.compare import resolve_refs
from core._git import branch_head
from core._history.findings import PeriodRuns
from core._history.summary import build_summary, render_trend_chart

log = logging.getLogger("specperf.scheduler")

SUMMARY_ID = "summary"
WATCH_PRIORITY = 10  # people's commands are 0: a watch's compare waits behind them
WATCH_USER = "specperf-watch"
_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun"]


def watch_id(name: str) -> str:
    """The scheduled job id of watch ``name``: ``watch:<name>``."""
    return f"watch:{name}"


def _crontab_weekdays(field: str) -> str:
    """A crontab day-of-week field in APScheduler 3's terms: crontab counts 0 (and 7) as
    Sunday, APScheduler 3 counts 0 as Monday, so numbers become day names."""
    parts = []
    for part in field.split(","):
        span, slash, step = part.partition("/")
        if span in ("0-6", "0-7", "1-7"):
            span = "*"
        else:
            span = re.sub(r"\d+", lambda m: _DAYS[int(m.group())] if int(m.group()) <= 7 else m.group(), span)
        parts.append(span + slash + step)
    return ",".join(parts)


def cron_trigger(expression: str, timezone: str) -> CronTrigger:
    """The trigger of a cron ``expression`` read in ``timezone``: 5 fields as crontab (minute
    hour day month day-of-week, Sunday 0 or 7) or 6 with a leading seconds field.

    Raises:
        core.ConfigError: a field APScheduler cannot read (the message quotes the expression).
    """
    fields = expression.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    if len(fields) != 6:
        raise core.ConfigError(f"cron expression {expression!r}: expected 5 or 6 fields")
    second, minute, hour, day, month, weekday = fields
    try:
        return CronTrigger(second=second, minute=minute, hour=hour, day=day, month=month,
                           day_of_week=_crontab_weekdays(weekday), timezone=timezone)
    except ValueError as exc:
        raise core.ConfigError(f"cron expression {expression!r}: {exc}") from None


class SchedulerLock:
    """An exclusive, non-blocking ``flock`` on ``path`` (held by an open file: released when
    this process exits, however it exits); the holder's pid is written in the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock; ``False`` when another open file (another process) holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def holder(self) -> str:
        """The pid written by the holder, or ``unknown``."""
        try:
            return self.path.read_text().strip() or "unknown"
        except OSError:
            return "unknown"

    def release(self) -> None:
        """Give the lock up (a no-op when not held)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


@dataclass
class ScheduleContext:
    """What a tick needs: the config, the run database, the bot's job queue (hosts, submit)
    and its Slack notifier (``post``, ``post_summary``, ``upload``, ``permalink``, ``parent_ready``; ``None``: nothing
    is posted)."""

    config: core.Config
    db: object
    queue: JobQueue
    notifier: object | None = None


_current: ScheduleContext | None = None  # set while this process runs the scheduler
_ticks: set[asyncio.Task] = set()  # running ticks: stop() waits for them to end


async def _in_context(what: str, tick, *args) -> None:
    if _current is None:
        log.warning("%s: no scheduler context in this process; tick skipped", what)
        return
    task = asyncio.current_task()
    _ticks.add(task)
    try:
        await tick(_current, *args)
    finally:
        _ticks.discard(task)


async def run_watch(name: str) -> None:
    """The scheduled job of watch ``name`` (what the job store references): :func:`watch_tick`
    in the running bot's context."""
    await _in_context(f"watch {name}", watch_tick, name)


async def run_summary() -> None:
    """The scheduled summary (what the job store references): :func:`summary_tick` in the
    running bot's context."""
    await _in_context("summary", summary_tick)


async def _record(ctx: ScheduleContext, schedule_id: str, result: str, job_id: int | None = None) -> None:
    await asyncio.to_thread(storage.record_tick, ctx.db, schedule_id, result, job_id)


async def watch_tick(ctx: ScheduleContext, name: str) -> storage.Job | None:
    """One tick of watch ``name``: fetch its branch on its host (when the repo has a remote)
    and read the head; if it differs from the head of the newest job this watch queued,
    queue one compare of the new head (priority :data:`WATCH_PRIORITY`) against the head of
    the newest of its jobs that did not fail or get cancelled (the last measured commit), or
    against the head's first parent when the watch has measured nothing yet. The job's
    messages go to the watch's channel: a parent message there, then the job's thread.

    Returns the queued job, or ``None`` when nothing is new (or on an error, which is logged
    and recorded: a tick never raises). Every tick is recorded in ``schedule_log``.
    """
    schedule_id = watch_id(name)
    watch = next((w for w in ctx.config.watches if w.name == name), None)
    if watch is None:
        await _record(ctx, schedule_id, "error: no such watch in the config")
        return None
    try:
        engine = ctx.config.engine(watch.engine)
        host_name = watch.host or engine.host
        head = await branch_head(ctx.queue.host(host_name), engine.repo, watch.branch)
        jobs = await asyncio.to_thread(storage.watch_jobs, ctx.db, name)
        if jobs and jobs[0].args.get("head_sha") == head:
            await _record(ctx, schedule_id, f"nothing new: {watch.branch} is at {head[:12]}")
            return None
        measured = next((j for j in jobs if j.status not in ("failed", "cancelled")), None)
        base = measured.args["head_sha"] if measured else None
        if base == head:
            await _record(ctx, schedule_id, f"nothing new: {watch.branch} is back at {head[:12]}")
            return None
        channel = watch.channel or ctx.config.schedule.channel
        modes = ctx.config.watch_modes(watch)
        job = storage.Job(host=host_name, engine_name=watch.engine, workload_name=watch.workload,
                          user_id=WATCH_USER, channel_id=channel, priority=WATCH_PRIORITY, watch=name,
                          dedupe_key=f"{schedule_id}:{head}",
                          args={"head_ref": head, "base_ref": base, "modes": modes, "rounds": None},
                          slack={"channel": channel})
        base_sha, head_sha = await resolve_refs(compare_request(ctx.config, job, ctx.queue.host(host_name)))
        job.args = {**job.args, "base_ref": base_sha, "base_sha": base_sha, "head_sha": head_sha}
        queued = await ctx.queue.submit(job, wake=False)
        if queued is None:  # this head was queued by the watch before (the branch went back)
            await _record(ctx, schedule_id, f"nothing new: {head[:12]} was queued before")
            return None
    except core.SpecperfError as exc:
        log.warning("watch %s: %s", name, exc)
        await _record(ctx, schedule_id, f"error: {str(exc).splitlines()[0]}")
        return None
    notifier = ctx.notifier
    ready = notifier.parent_ready.setdefault(queued.id, asyncio.Event()) if notifier is not None else None
    try:
        if notifier is not None:
            text = (f"watch `{name}`: `{watch.branch}` of `{watch.engine}` moved to {head_sha[:10]}; compare against "
                    f"{base_sha[:10]} on host `{host_name}`, modes {', '.join(modes)}: job {queued.id}")
            sent = await notifier.post(channel, text=text)
            if sent is not None:
                queued = await asyncio.to_thread(storage.update_job, ctx.db, queued.id, slack={"thread_ts": sent["ts"]})
    finally:
        if ready is not None:
            ready.set()
        ctx.queue.wake(host_name)
    log.info("watch %s: %s moved to %s; queued job %s against %s", name, watch.branch, head_sha[:12], queued.id,
             base_sha[:12])
    await _record(ctx, schedule_id, f"queued job {queued.id}: {head_sha[:12]} vs {base_sha[:12]}", queued.id)
    return queued


async def summary_tick(ctx: ScheduleContext, now: dt.datetime | None = None) -> core.RegressionSummary:
    """The scheduled summary: :func:`core._history.summary.build_summary` over the whole stored history
    (:func:`storage.load_series`, each engine in its repo's first-parent order) for the
    period (``[schedule].period``: the 1 or 7 days before ``now``), posted to
    ``[schedule].channel`` through the notifier's ``post_summary`` (Block Kit), with the trend
    chart PNG uploaded to that message's thread; a quiet period is its one line, no chart.
    What the period's runs found (``storage.load_findings``) comes first, each finding linked
    to the thread of its run's job (``chat.getPermalink``); with ``[report] html_base_url`` the
    summary links to the history pages served there.
    Returns the :class:`core.RegressionSummary`; recorded in ``schedule_log``.
    """
    schedule = ctx.config.schedule
    now = now or dt.datetime.now(dt.UTC)
    notes: list[str] = []
    orders = await commit_orders(ctx.config, None, notes.append)
    since = now - dt.timedelta(days=schedule.since_days)
    series = await asyncio.to_thread(storage.load_series, ctx.db, commit_order=orders)
    runs = await asyncio.to_thread(storage.load_findings, ctx.db, since=since)
    summary = await asyncio.to_thread(build_summary, series, since=since, now=now,
                                      margin_pct=ctx.config.compare.margin_pct, alpha=ctx.config.compare.alpha,
                                      runs=runs)
    links = await _thread_links(ctx, runs) if ctx.notifier else {}
    title = f"specperf {schedule.period} regression summary"
    sent = await ctx.notifier.post_summary(schedule.channel, summary, title, links,
                                           ctx.config.report.html_base_url or None) if ctx.notifier else None
    result = "posted" if sent else "not posted"
    if sent and not summary.quiet:
        chart = data_dir() / "charts" / f"summary-{now:%Y%m%d-%H%M%S}.png"
        await asyncio.to_thread(render_trend_chart, summary, chart, f"specperf: {summary.headline}")
        uploaded = await ctx.notifier.upload(schedule.channel, sent["ts"], chart, f"trend: {summary.headline}")
        result += ", chart uploaded" if uploaded else ", chart upload failed"
    await _record(ctx, SUMMARY_ID, f"{result}: {summary.headline}")
    return summary


async def _thread_links(ctx: ScheduleContext, runs: PeriodRuns) -> dict[int, str]:
    """``{run id: permalink}`` of the threads where the bot posted the findings' runs (their
    jobs' ``thread_ts``; a failure group by its newest run); runs started from the terminal
    have none."""
    run_ids = [f.run_id for f in (*runs.compares, *runs.bisects)] + [g.runs[0].run_id for g in runs.failure_groups()]
    threads = await asyncio.to_thread(storage.run_threads, ctx.db, run_ids)
    links = {}
    for run_id, (channel, ts) in threads.items():
        if url := await ctx.notifier.permalink(channel, ts):
            links[run_id] = url
    return links


class BotScheduler:
    """The scheduler of one bot process. ``await start()`` takes the scheduler lock, brings
    the persistent job store in line with the config and starts; ``await stop()`` stops.

    Every job has an explicit id, ``replace_existing=True``, ``coalesce=True`` (missed ticks
    run once, not once each), ``max_instances=1`` (a slow tick never overlaps the next) and
    ``misfire_grace_time`` = ``[schedule].misfire_grace_s``.
    """

    def __init__(self, config: core.Config, db, queue: JobQueue, notifier=None, lock_path: Path | None = None) -> None:
        self.config, self.db, self.queue, self.notifier = config, db, queue, notifier
        self.lock = SchedulerLock(lock_path or data_dir() / "scheduler.lock")
        self.scheduler: AsyncIOScheduler | None = None
        self.status = "not started"

    def wanted(self) -> dict[str, tuple]:
        """``{job id: (function, args, trigger)}`` for the config's summary and watches.

        Raises:
            core.ConfigError: a cron expression APScheduler cannot read.
        """
        zone = self.config.schedule.timezone
        jobs = {}
        if self.config.schedule.summary_cron:
            jobs[SUMMARY_ID] = (run_summary, (), cron_trigger(self.config.schedule.summary_cron, zone))
        for watch in self.config.watches:
            jobs[watch_id(watch.name)] = (run_watch, (watch.name,), cron_trigger(watch.cron, zone))
        return jobs

    async def start(self) -> bool:
        """Start the schedules; whether this process runs them. ``False`` (and ``status``
        says why, also logged) when none is configured or another process holds the lock.

        Raises:
            core.ConfigError: a cron expression APScheduler cannot read.
        """
        global _current
        wanted = self.wanted()
        if not wanted:
            self.status = "no schedules configured"
            return False
        if not self.lock.acquire():
            self.status = (f"not started: another specperf bot (pid {self.lock.holder()}) runs the schedules "
                           f"(lock {self.lock.path}); this one serves commands only")
            log.warning("scheduler %s", self.status)
            return False
        _current = ScheduleContext(self.config, self.db, self.queue, self.notifier)
        grace = self.config.schedule.misfire_grace_s
        self.scheduler = AsyncIOScheduler(
            jobstores={"default": SQLAlchemyJobStore(engine=self.db)},
            # APScheduler's default grace is 1 s: a tick due while the bot was down, or while its loop
            # was busy for a second, would be dropped. Ticks are idempotent (a watch queues only a
            # head it has not queued; a summary covers the period up to when it runs), so a missed
            # one is worth running late, once (coalesce), up to the configured grace (6 h by default:
            # a restart in the morning still posts the night's summary, a bot down for days does not
            # post at a surprising hour).
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": max(1, math.ceil(grace))},
            timezone=self.config.schedule.timezone,
        )
        self.scheduler.start(paused=True)  # the job store is open; nothing runs until resume()
        for job in self.scheduler.get_jobs():
            if job.id not in wanted:
                log.info("scheduler: removing job %s (no longer in the config)", job.id)
                job.remove()
        for job_id, (function, args, trigger) in wanted.items():
            old = self.scheduler.get_job(job_id)
            # Replacing a stored job would compute its next run from now and forget a tick missed
            # while the bot was down: an unchanged job keeps its stored next run time.
            keep = (old is not None and old.next_run_time is not None and repr(old.trigger) == repr(trigger)
                    and tuple(old.args) == args and old.func_ref == f"{__name__}:{function.__name__}")
            extra = {"next_run_time": old.next_run_time} if keep else {}
            self.scheduler.add_job(function, trigger=trigger, args=args, id=job_id, name=job_id,
                                   replace_existing=True, **extra)
        self.scheduler.resume()
        self.status = f"running {len(wanted)} schedule(s): {', '.join(wanted)}"
        log.info("scheduler %s", self.status)
        return True

    def next_runs(self) -> dict[str, dt.datetime | None]:
        """``{job id: next run time}`` of the running scheduler (empty when it is not running)."""
        if self.scheduler is None:
            return {}
        return {job.id: job.next_run_time for job in self.scheduler.get_jobs()}

    async def stop(self) -> None:
        """Stop the scheduler, cancel a running tick and wait for it (its git command is stopped),
        and release the lock; a second call does nothing."""
        global _current
        scheduler, self.scheduler = self.scheduler, None
        if scheduler is not None:
            if scheduler.running:
                scheduler.shutdown(wait=False)
            await asyncio.sleep(0.05)  # AsyncIOScheduler shuts down through the loop
            running = list(_ticks)
            for task in running:  # a tick cut short is harmless: the next one sees the same branch head
                task.cancel()
            if running:
                await asyncio.wait(running, timeout=30)
            _current = None
        self.lock.release()
