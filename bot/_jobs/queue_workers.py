"""The bot's job queue: jobs live in the database (storage), one worker per host takes them
in order, one at a time per host, under the host's lock (the CLI's too), and runs each as a
compare, a calibrate (an A/A compare stored as the host's calibration), a bisect, or a watch
(the per-trial window monitor alone, under the same lock; it records no run, and its window is
saved as ``specperf env --watch`` saves one) (``Job.kind``). A Slurm host's worker submits each compare to Slurm at once
(:mod:`bot._slurm_batch`): Slurm queues and places them, side by side on separate nodes; a job whose
Slurm job Slurm ended early (time limit, preemption, node failure) is queued again once or
failed, as after a crash.

A :class:`Notifier` (the Slack front end) hears about each job's start, progress and end.

Ownership: a job runs owned by this process (:func:`storage.identity`), whose lease the queue
keeps renewed (:func:`storage.keep_alive`, ``[storage].owner_lease_s``). Every
``owner_lease_s / 3`` seconds, and at start, the queue reconciles: runs and jobs whose owner
is dead (:func:`storage.owner_alive`: gone from this machine, or its lease expired, wherever
it ran) are closed as below.

Storage outages: the queue's own database writes are retried with backoff (0.5 s doubling to
30 s) until the database answers, with one log line and one note in the job's thread when the
outage starts and when it ends; no SQL text reaches a user. A job whose run could not be
recorded has its engine stopped (by core), its run marked interrupted once the database is
back, and is queued again once (as after a crash) or failed.

Lost lease: when this process's lease has not been renewed for two thirds of
``owner_lease_s`` (a database outage), it may soon count as dead to other bots, which would
then take its running jobs over. So the queue stops them first (their engines are stopped, as
for a cancel), and once the database is back marks their runs interrupted and queues them
again, unless another bot took one over meanwhile: every write that closes or re-queues a
running job is a compare-and-set on its claim (:func:`storage.requeue`,
:func:`storage.requeue_or_fail`), so the old owner and the new one never both act on it.

A clean stop (SIGTERM, Ctrl-C) stops the running job's engine, marks its run interrupted and
queues the job again without spending its crash re-queue, saying so in its thread; a
compare on a Slurm host is left to Slurm instead (its job runs on), and the next bot start
follows its Slurm job again (:meth:`JobQueue._adopt`), as it does after a crash: it relays
the job's progress and posts its verdict, or settles it from Slurm's record if it ended.
``cancel`` of a running job cancels its task: core._experiments.compare.compare stops the engine's process group
and marks the run interrupted; the job is marked cancelled. At start, before any worker
runs, what a crashed bot left is reconciled: runs it left running have their recorded engine
groups stopped and are marked interrupted (:func:`bot._runs.reconcile_runs`, the same as the
CLI's), and each job it left running is marked interrupted, then queued again once or failed
(``[slack].requeue_interrupted``). Queued jobs stay queued and run once each.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

import core
import storage
from bot import _app as app
from bot import _slurm_batch as slurm
from bot._app import trial_line
from bot._common import data_dir, open_host, owner_alive
from bot._runs import calibration_plans, plan_request, reconcile_runs
from core._experiments.bisection import BisectObserver, BisectResult, BisectStep
from core._experiments.compare import CompareRequest
from core._hosts import Host, SlurmHost

log = logging.getLogger("specperf.bot")


async def every(interval_s: float, step, what: str) -> None:
    """Await ``step()`` every ``interval_s`` seconds, forever; a database outage is logged once
    when it starts and once when it ends (the next rounds retry)."""
    failing = False
    while True:
        await asyncio.sleep(interval_s)
        try:
            await step()
        except SQLAlchemyError as exc:
            if not failing:
                log.warning("%s: database unavailable (%s); retrying every %.0f s", what, storage.short_error(exc),
                            interval_s)
            failing = True
            continue
        if failing:
            log.warning("%s: database available again", what)
        failing = False


class Notifier:
    """What the queue tells a front end; every method is optional (no-op here) and must not raise."""

    async def job_started(self, job: storage.Job, run_id: int | None) -> None: ...  # None: a watch
    async def job_resumed(self, job: storage.Job, run_id: int) -> None: ...  # followed again after a restart
    def progress(self, job: storage.Job, message: str) -> None: ...
    async def job_finished(self, job: storage.Job, run_id: int | None,
                           result: core.CompareResult | BisectResult | app.WatchResult | None,
                           error: str | None) -> None: ...
    async def job_cancelled(self, job: storage.Job, reason: str) -> None: ...
    async def job_reconciled(self, job: storage.Job, status: str, reason: str) -> None: ...
    async def job_note(self, job: storage.Job, text: str) -> None: ...


class JobProgress(core.CompareObserver):
    """Passes a job's compare progress to the notifier; ``heading()``, when given, is put on
    the line above each message (a bisect's current step)."""

    def __init__(self, job: storage.Job, notifier: Notifier, heading: Callable[[], str] | None = None) -> None:
        self.job, self.notifier, self.heading = job, notifier, heading

    def progress(self, message: str) -> None:
        self.notifier.progress(self.job, f"{self.heading()}\n{message}" if self.heading else message)

    def trial_finished(self, arm, seq, trial) -> None:
        self.progress(f"launch {seq} ({arm.mode} {arm.role}): {trial_line(trial)}")

    def verdicts_updated(self, verdicts) -> None:
        self.progress("so far: " + ", ".join(f"{m} {v.verdict}" for m, v in verdicts.items()))


class JobBisectProgress(BisectObserver):
    """Passes a bisect job's progress to the notifier: its own lines, and each step's compare
    progress under the line that began the step (``step 2 (probe): ...``), so a progress
    message always says which step it is in (the notifier shows only the latest message)."""

    def __init__(self, job: storage.Job, notifier: Notifier) -> None:
        self.job, self.notifier, self.step_line = job, notifier, ""

    def progress(self, message: str) -> None:
        self.step_line = message
        self.notifier.progress(self.job, message)

    def compare_observer(self, step, request) -> core.CompareObserver:
        return JobProgress(self.job, self.notifier, lambda: self.step_line)

    def step_finished(self, step: BisectStep) -> None:
        self.notifier.progress(self.job, f"step {step.number} ({step.kind}) {step.head_sha[:12]}: "
                                         f"{step.evidence()} -> {step.outcome}")


COMPARE_KINDS = ("compare", "calibrate", "recheck")  # jobs that run one compare (a calibrate: an A/A one)


def compare_request(config: core.Config, job: storage.Job, host: Host) -> CompareRequest:
    """The compare a job asks for: its engine (on the job's host), workload and modes;
    ``args["rounds"]`` N fixes the launches per arm and mode at 2N (N ABBA rounds), and
    ``args["launches"]`` (a calibrate or recheck job) at that number; a recheck job also
    carries its run's ``margin_pct`` and ``workload``, a calibrate job its ``windows`` per launch.

    Raises:
        core.ConfigError: the engine, workload or a mode is no longer in the config.
    """
    choice = app.choose(config, job.engine_name, job.workload_name, job.host)
    if job.args.get("workload"):  # a recheck: the workload its run stored, not today's of that name
        choice = dataclasses.replace(choice, workload=core.WorkloadConfig.model_validate(job.args["workload"]))
    if job.args.get("windows"):  # a calibrate: its windows per launch
        choice = dataclasses.replace(choice, workload=choice.workload.model_copy(update={"windows": job.args["windows"]}))
    launches = job.args.get("launches")
    settings = app.compare_settings(config, rounds=job.args.get("rounds"), min_trials=launches, max_trials=launches,
                                    margin_pct=job.args.get("margin_pct"),
                                    profile="never" if job.args.get("calibration") else None)
    base = app.base_arm(config, choice, list(job.args["modes"]), job.args.get("base_engine"))
    return app.compare_request(config, choice, host, job.args["head_ref"], job.args.get("base_ref"),
                               list(job.args["modes"]), settings, base=base)


def save_watch(result: app.WatchResult, host: str) -> Path:
    """Save a watch's window and judgement as ``specperf env --watch`` does (``{"window",
    "disturbed"}``, under the data directory's ``env/``); the path."""
    path = data_dir() / "env" / f"watch-{host}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S%fZ}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"window": result.window, "disturbed": result.judged.to_dict()}, indent=2))
    return path


def watch_target(config: core.Config, job: storage.Job) -> app.ProbeTarget:
    """What a watch job runs the window monitor with: its engine's Python and CPUs on its host.

    Raises:
        core.ConfigError: the engine or host is no longer in the config.
    """
    return app.probe_target(config, job.engine_name, job.host)


class JobQueue:
    """The queue and its workers. ``start()`` reconciles, then starts one worker per host of
    the config; ``submit()`` queues a job and wakes its host's worker; ``cancel()`` cancels a
    queued or running job; ``stop()`` stops the workers (a running job's engine is stopped, its
    run marked interrupted, and the job queued again once or failed, as after a crash)."""

    def __init__(self, config: core.Config, db, notifier: Notifier) -> None:
        self.config, self.db, self.notifier = config, db, notifier
        self._heartbeat: storage.Heartbeat | None = None
        self._hosts: dict[str, Host] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._workers: list[asyncio.Task] = []
        self._running: dict[int, asyncio.Task] = {}
        self._cancelled: dict[int, str] = {}
        self._slurm_jobs: set[asyncio.Task] = set()  # jobs of Slurm hosts, which run side by side
        self._fenced: dict[int, str] = {}  # jobs stopped because this process's lease may run out
        self._settling: set[int] = set()  # jobs whose compare has ended: only their own records are written now
        self._host_workers: dict[str, asyncio.Task] = {}
        self.worker_restarts: dict[str, list[str]] = {}  # host -> why each of its workers ended (newest last)
        self._health_logged: list[str] = []
        self._stopping = False

    async def start(self) -> list[tuple[storage.Job, str, str]]:
        """Take this process's lease, reconcile what a dead bot left, then start the workers and
        the reconciler. Returns, for each job that was left running, (job, new status
        ``queued``/``failed``, reason).

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database cannot be written at start.
        """
        lease_s = self.config.storage.owner_lease_s
        self._heartbeat = await asyncio.to_thread(storage.keep_alive, self.db, lease_s, "bot")
        reconciled = await self.reconcile()
        for host in self.config.hosts:
            self._wake[host] = asyncio.Event()
            self._start_worker(host)
        self._workers.append(asyncio.create_task(self._reconciler(lease_s / 3), name="reconciler"))
        self._workers.append(asyncio.create_task(self._fence(lease_s), name="lease-fence"))
        return reconciled

    async def reconcile(self) -> list[tuple[storage.Job, str, str]]:
        """Close runs and jobs whose owner is dead (see the module docstring): the runs' engines
        are stopped through their recorded process groups and the host helper's checks, the
        jobs queued again once or failed, each said in its thread. Returns (job, new status,
        reason) for each job.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database cannot be read or written.
        """
        closed = dict(await reconcile_runs(self.db, self.config))
        reconciled = []
        for job in await asyncio.to_thread(storage.orphaned_jobs, self.db, owner_alive(self.db)):
            if job.id in self._running or await self._adopt(job):
                continue
            owner = job.owner or {}
            reason = (f"the bot that ran it (pid {owner.get('pid')} on {owner.get('host')}) "
                      "stopped while this job ran")
            if job.run_id in closed:
                reason += f" (run {job.run_id}: {closed[job.run_id].split('; ', 1)[-1]})"
            status = await asyncio.to_thread(storage.requeue_or_fail, self.db, job.id,
                                             self.config.slack.requeue_interrupted, reason, job.started_at)
            if status is None:  # its owner (or another bot) closed it meanwhile
                continue
            log.warning("job %s: %s; now %s", job.id, reason, status)
            reconciled.append((job, status, reason))
            await self._notify(self.notifier.job_reconciled(job, status, reason))
            if status == "queued":
                self.wake(job.host)
            else:
                await self._bisect_ended(job)
        return reconciled

    async def _reconciler(self, interval_s: float) -> None:
        async def step() -> None:
            await self.reconcile()
            self.health(await asyncio.to_thread(storage.list_jobs, self.db, ("queued",)))  # logged when it changes
        await every(interval_s, step, "reconciling dead owners' jobs")

    def _lease_at_risk(self) -> bool:
        lease_s = self.config.storage.owner_lease_s
        return self._heartbeat is not None and self._heartbeat.lease_left_s() < lease_s / 3

    async def _lease_held(self) -> bool:
        """Wait until this process's lease is not at risk (no new job is taken while it is);
        True."""
        while self._lease_at_risk():
            await asyncio.sleep(self.config.storage.owner_lease_s / 12)
        return True

    async def _fence(self, lease_s: float) -> None:
        """Stop the running jobs once this process's lease has gone unrenewed for two thirds of
        ``lease_s`` (see the module docstring); checked every ``lease_s / 12`` seconds."""
        while True:
            await asyncio.sleep(lease_s / 12)
            if self._heartbeat is None or not self._lease_at_risk():
                continue
            unrenewed = lease_s - self._heartbeat.lease_left_s()
            for job_id, task in list(self._running.items()):
                # a job whose compare has ended has no engine left to stop: its own records wait for the database
                if job_id not in self._fenced and job_id not in self._settling:
                    self._fenced[job_id] = (
                        f"this bot could not renew its lease for {unrenewed:.0f} s (the database was unavailable), so "
                        "another bot could have taken the job over; its engine was stopped first")
                    log.warning("job %s: stopping it: this bot's lease was last renewed %.0f s ago (the lease is "
                                "%.0f s)", job_id, unrenewed, lease_s)
                    task.cancel()

    async def _notify(self, call) -> None:
        """Await a notifier call; a failure is logged, never raised into a worker."""
        try:
            await call
        except Exception as exc:  # noqa: BLE001 - a lost message must not stop the queue
            log.warning("notifying failed: %s: %s", exc.__class__.__name__, str(exc).splitlines()[0][:200])

    async def retrying(self, fn, /, *args, job: storage.Job | None = None, **kwargs):
        """``fn(*args, **kwargs)`` in a thread, retried with backoff (0.5 s doubling to 30 s)
        while the database is unavailable; an outage is logged once and, with ``job``, noted
        in its thread when it starts and when it ends."""
        delay, down_since = 0.5, None
        while True:
            try:
                value = await asyncio.to_thread(fn, *args, **kwargs)
            except SQLAlchemyError as exc:
                if down_since is None:
                    down_since = time.monotonic()
                    what = f"job {job.id}: " if job else ""
                    log.warning("%sdatabase unavailable (%s); retrying with backoff", what, storage.short_error(exc))
                    if job:
                        await self._notify(self.notifier.job_note(
                            job, f"job {job.id}: the database is unavailable ({storage.short_error(exc)}); "
                                 "retrying until it is back"))
                await asyncio.sleep(delay)
                delay = min(2 * delay, 30.0)
                continue
            if down_since is not None:
                outage = f"database available again after {time.monotonic() - down_since:.0f} s"
                log.warning("%s%s; resuming", f"job {job.id}: " if job else "", outage)
                if job:
                    await self._notify(self.notifier.job_note(job, f"job {job.id}: {outage}; resuming"))
            return value

    def host(self, name: str) -> Host:
        """The bot's :class:`core._hosts.Host` for ``name``, opened once and reused (one SSH
        connection per host for the bot's life).

        Raises:
            core.ConfigError: no such host.
        """
        if name not in self._hosts:
            self._hosts[name] = open_host(self.config, name)
        return self._hosts[name]

    def wake(self, host: str) -> None:
        """Tell ``host``'s worker that a job may be waiting."""
        if host in self._wake:
            self._wake[host].set()

    async def submit(self, job: storage.Job, wake: bool = True) -> storage.Job | None:
        """Queue ``job``; ``None`` if its ``dedupe_key`` was queued before (a redelivery).

        Raises:
            core.ConfigError: its host is not configured.
        """
        if job.host not in self.config.hosts:
            raise core.ConfigError(f"no host named {job.host!r} in the config")
        queued = await asyncio.to_thread(storage.enqueue, self.db, job)
        if queued is not None and wake:
            self.wake(job.host)
        return queued

    async def cancel(self, job_id: int, reason: str) -> str:
        """Cancel job ``job_id``: a queued one is marked cancelled, a running one has its
        compare cancelled (its engine group stopped) and waits for that. Returns what happened,
        one line."""
        if await asyncio.to_thread(storage.cancel_queued, self.db, job_id, reason):
            job = await asyncio.to_thread(storage.get_job, self.db, job_id)
            await self.notifier.job_cancelled(job, reason)
            await self._bisect_ended(job)  # a bisect queued again may have left Slurm jobs running
            return f"job {job_id} was queued and is now cancelled"
        task = self._running.get(job_id)
        if task is None:
            job = await asyncio.to_thread(storage.get_job, self.db, job_id)
            if job is None:
                return f"there is no job {job_id} (`/specperf queue` lists them)"
            return f"job {job_id} is {job.status}; nothing to cancel"
        if job_id in self._settling:
            return f"job {job_id} has ended (its engine is stopped); its record is being written"
        self._cancelled[job_id] = reason
        task.cancel()
        await asyncio.wait([task])
        return f"job {job_id} was running; its engine was stopped and the job cancelled"

    def running(self) -> dict[int, asyncio.Task]:
        """Running jobs by id."""
        return dict(self._running)

    async def stop(self) -> None:
        """Stop the workers; a running compare is cancelled (its engine stopped, the job queued
        again); then this process's lease is released."""
        self._stopping = True  # a worker whose job swallowed the cancel must still end, not take the next job
        for task in [*self._workers, *self._slurm_jobs]:
            task.cancel()
        await asyncio.gather(*self._workers, *self._slurm_jobs, return_exceptions=True)
        for host in self._hosts.values():
            await host.close()
        if self._heartbeat is not None:
            await asyncio.to_thread(self._heartbeat.stop)

    def _start_worker(self, host: str) -> None:
        """Start ``host``'s worker under supervision: one that ends for any reason but a clean
        stop is logged with its cause and started again (:meth:`_worker_ended`)."""
        self._wake[host].set()  # jobs queued before it started run now
        task = asyncio.create_task(self._worker(host), name=f"worker-{host}")
        self._host_workers[host] = task
        self._workers.append(task)
        task.add_done_callback(lambda done: self._worker_ended(host, done))

    def _worker_ended(self, host: str, task: asyncio.Task) -> None:
        if task in self._workers:
            self._workers.remove(task)
        if self._stopping:
            return
        cause = ("it was cancelled" if task.cancelled() else
                 f"{type(task.exception()).__name__}: {task.exception()}" if task.exception() else "it returned")
        self.worker_restarts.setdefault(host, []).append(cause)
        log.error("the worker of host %s ended (%s); starting it again", host, cause,
                  exc_info=None if task.cancelled() else task.exception())
        self._start_worker(host)

    def health(self, queued: list[storage.Job]) -> list[str]:
        """What is wrong with the queue, one line each (empty when healthy): a host with queued
        jobs (``queued``: the jobs in the database with status ``queued``) and no live worker,
        and hosts whose worker had to be started again (supervisor)."""
        problems = []
        for host in sorted({job.host for job in queued}):
            worker = self._host_workers.get(host)
            if host in self.config.hosts and (worker is None or worker.done()) and not self._stopping:
                ids = ", ".join(str(job.id) for job in queued if job.host == host)
                problems.append(f"host {host}: job(s) {ids} queued and no worker is running for the host")
        for host, causes in sorted(self.worker_restarts.items()):
            problems.append(f"host {host}: its worker ended {len(causes)} time(s) and was started again "
                            f"(last: {causes[-1]})")
        if problems and problems != self._health_logged:  # each new state once in the log
            log.error("queue health: %s", "; ".join(problems))
        self._health_logged = problems
        return problems

    async def _worker(self, host: str) -> None:
        wake = self._wake[host]
        while not self._stopping:
            await wake.wait()
            wake.clear()
            while (not self._stopping and await self._lease_held()
                   and (job := await self.retrying(storage.claim_next, self.db, host))):
                if self.config.hosts[host].kind == "slurm":  # Slurm queues and places its jobs: no waiting here
                    self._start_slurm_job(job)
                    continue
                task = asyncio.create_task(self._run(job), name=f"job-{job.id}")
                self._running[job.id] = task
                try:
                    await task  # a cancel command ends the task normally; stopping the worker cancels it
                except asyncio.CancelledError:
                    me = asyncio.current_task()
                    if self._stopping or (me is not None and me.cancelling()):
                        raise  # this worker is being stopped
                    # the job's own task was cancelled (a fence or cancel landing after its compare had
                    # ended): the job is settled by whoever cancelled it; this worker goes on
                    log.warning("job %s: its task was cancelled after its compare ended; the worker of host %s goes "
                                "on", job.id, host)
                finally:
                    self._running.pop(job.id, None)
                    self._settling.discard(job.id)

    def _start_slurm_job(self, job: storage.Job, adopted_run: int | None = None) -> None:
        """Run ``job`` (of a Slurm host) as a task beside the others; ``adopted_run``: follow the
        Slurm job of that run, which a bot that is gone submitted, instead of submitting one."""
        task = asyncio.create_task(self._run(job, adopted_run), name=f"job-{job.id}")
        self._running[job.id] = task
        self._slurm_jobs.add(task)
        task.add_done_callback(self._slurm_job_done)

    def _slurm_job_done(self, task: asyncio.Task) -> None:
        self._slurm_jobs.discard(task)
        for job_id, running in list(self._running.items()):
            if running is task:
                del self._running[job_id]
                self._settling.discard(job_id)

    async def _run(self, job: storage.Job, adopted_run: int | None = None) -> None:
        run_id, claimed_at = adopted_run, job.started_at
        result: core.CompareResult | BisectResult | app.WatchResult
        try:
            host = self.host(job.host)
            # the same lock as the CLI's: a terminal compare on this host makes the job wait
            session = app.Session(f"bot job {job.id}", on_wait=lambda message: self.notifier.progress(job, message))

            async def started(new_run_id: int | None) -> None:  # None: a watch, which records no run
                nonlocal job, run_id
                run_id = new_run_id
                if run_id is not None:
                    job = await asyncio.to_thread(storage.update_job, self.db, job.id, run_id=run_id)
                await self._notify(self.notifier.job_started(job, run_id))

            # stored with the run: a calibration, or the run a recheck answers against
            extra = {k: job.args[k] for k in ("calibration", "recheck_of") if job.args.get(k)} or None
            if job.kind == "watch":
                await started(None)
                result = await app.watch(self.config, host, watch_target(self.config, job), float(job.args["seconds"]),
                                         session, tick=lambda s: self.notifier.progress(
                                             job, f"watching: {s:.0f} of {float(job.args['seconds']):g} s"))
                result.path = str(await asyncio.to_thread(save_watch, result, job.host))
            elif job.kind == "bisect":
                choice = app.choose(self.config, job.engine_name, job.workload_name, job.host)
                bisect = app.bisect_request(self.config, choice, host, job.args["good_ref"], job.args["bad_ref"],
                                            job.args["mode"])
                _, result = await app.bisect(self.config, self.db, bisect, session,
                                             lambda store: JobBisectProgress(job, self.notifier), on_run=started,
                                             detach=self._detaching, bot_job=job.id)
            elif isinstance(host, SlurmHost):  # one Slurm job; Slurm's kill re-queues the job once
                if adopted_run is not None:  # submitted by a bot that is gone: follow its Slurm job again
                    await slurm.follow_again(self.db, host, adopted_run, JobProgress(job, self.notifier),
                                             detach=self._detaching)
                    run_id = adopted_run
                else:
                    request = await self._planned(compare_request(self.config, job, host), job, extra)
                    shas = (job.args["base_sha"], job.args["head_sha"])
                    run_id = await app.compare_on_slurm(self.config, self.db, request, shas, session,
                                                        JobProgress(job, self.notifier), on_run=started,
                                                        extra=extra, detach=self._detaching)
                stored = await self.retrying(storage.load_run, self.db, run_id, job=job)
                run = stored.run
                if slurm.killed_by_slurm(run):
                    status = await self.retrying(storage.requeue_or_fail, self.db, job.id,
                                                 self.config.slack.requeue_interrupted, run.reason, job=job)
                    await self._notify(self.notifier.job_reconciled(job, status, run.reason))
                    if status == "queued":
                        self.wake(job.host)
                    return
                result = slurm.stored_result(stored)
            else:
                request = await self._planned(compare_request(self.config, job, host), job, extra)
                shas = (job.args["base_sha"], job.args["head_sha"])
                _, result = await app.compare(self.config, self.db, request, shas, session,
                                              JobProgress(job, self.notifier), on_run=started, extra=extra)
        except asyncio.CancelledError:
            if job.id in self._fenced:
                await self._lease_lost(job, run_id, claimed_at)
                return
            reason = self._cancelled.pop(job.id, None)
            if reason is None and await self._left_to_slurm(job, run_id):
                raise
            if reason is None:  # the bot is stopping: the engine is stopped, the run interrupted
                reason = ("the bot was stopped cleanly while this bisect ran; its Slurm jobs run on and the job is "
                          "queued again: when a bot runs, the bisect starts over and follows them again"
                          if self._slurm_bisect(job) else  # app.bisect's detach left its step jobs running
                          "the bot was stopped cleanly while this job ran; its engine was stopped and the job is "
                          "queued again (it starts over when a bot runs)")
                await self.retrying(storage.requeue, self.db, job.id, reason)
                log.warning("job %s: %s", job.id, reason)
                await self._notify(self.notifier.job_reconciled(job, "queued", reason))
                raise
            await self.retrying(storage.update_job, self.db, job.id, status="cancelled", reason=reason)
            await self._notify(self.notifier.job_cancelled(job, reason))
            await self._bisect_ended(job)
            return
        except Exception as exc:  # a job's failure must never stop its host's worker
            await self._failed(job, run_id, claimed_at, exc)
            return
        await self._finished(job, run_id, result)

    async def _planned(self, request: CompareRequest, job: storage.Job, extra: dict | None) -> CompareRequest:
        """A compare job's request with the host's calibration put in, as the terminal's compare
        does (:func:`bot._runs.plan_request`; stored with the run as ``later_windows`` and
        ``planned_trials``), its lines logged; a calibrate or recheck job (``extra``) fixes its
        launches and takes no plan."""
        if extra is None:
            run_id, plans = await asyncio.to_thread(calibration_plans, self.db, job.engine_name, job.host,
                                                    job.workload_name, request.settings)
            for line in plan_request(request, run_id, plans):
                log.info("job %s: %s", job.id, line)
        return request

    async def _failed(self, job: storage.Job, run_id: int | None, claimed_at, exc: Exception) -> None:
        """Settle a job whose run raised ``exc`` (its engine is already stopped): a database
        error hands it to :meth:`_storage_lost` (or :meth:`_lease_lost` when its lease was
        taken meanwhile); any other error marks it failed with the error's message, logged
        with its traceback unless it is one of specperf's own."""
        self._settling.add(job.id)
        if isinstance(exc, SQLAlchemyError):
            if job.id in self._fenced:  # the run's last write failed on the way out of the stop
                await self._lease_lost(job, run_id, claimed_at)
            else:
                await self._storage_lost(job, run_id, claimed_at, exc)
            return
        message = str(exc) if isinstance(exc, core.SpecperfError) else f"{exc.__class__.__name__}: {exc}"
        if not isinstance(exc, core.SpecperfError):
            log.exception("job %s failed unexpectedly", job.id, exc_info=exc)
        await self.retrying(storage.update_job, self.db, job.id, status="failed", reason=message, job=job)
        await self._notify(self.notifier.job_finished(job, run_id, None, message))
        await self._bisect_ended(job)

    async def _finished(self, job: storage.Job, run_id: int | None,
                        result: core.CompareResult | BisectResult | app.WatchResult) -> None:
        """Settle a job whose run ended: done, or failed when the run failed or was refused."""
        self._settling.add(job.id)
        status = "failed" if result.status in ("failed", "refused") else "done"
        # a re-queued job keeps why it was interrupted unless the run itself has a reason
        reason = result.message if isinstance(result, BisectResult) else result.reason
        kept = {"reason": reason} if reason else {}
        await self.retrying(storage.update_job, self.db, job.id, status=status, job=job, **kept)
        await self._notify(self.notifier.job_finished(job, run_id, result, None))
        await self._bisect_ended(job)

    async def _bisect_ended(self, job: storage.Job) -> None:
        """For a bisect on a Slurm host that will not run again (done, failed or cancelled): cancel
        the Slurm jobs of its steps that no attempt followed to their end, and say so in its thread."""
        if not self._slurm_bisect(job):
            return
        host = self.host(job.host)
        assert isinstance(host, SlurmHost)
        try:
            asked = await slurm.cancel_bisect_steps(self.db, host, job.id)
        except SQLAlchemyError as exc:  # never stops the worker: settle closes the runs when Slurm ends them
            log.warning("job %s: its bisect's Slurm jobs cannot be looked up now (%s)", job.id,
                        storage.short_error(exc))
            return
        if asked:
            note = (f"job {job.id}: the bisect has ended; scancel was sent to the Slurm jobs of its steps that no "
                    f"attempt followed to their end: {', '.join(asked)}")
            log.warning(note)
            await self._notify(self.notifier.job_note(job, note))

    def _slurm_bisect(self, job: storage.Job) -> bool:
        """Whether ``job`` is a bisect on a Slurm host (each step a Slurm job of its own)."""
        host = self.config.hosts.get(job.host)
        return job.kind == "bisect" and host is not None and host.kind == "slurm"

    def _detaching(self) -> bool:
        """Whether a cancelled Slurm compare leaves its Slurm job running: the bot is stopping
        cleanly (the next bot follows the job again), not cancelling the job."""
        return self._stopping and not self._fenced

    async def _left_to_slurm(self, job: storage.Job, run_id: int | None) -> bool:
        """When the bot stops cleanly while ``job`` follows a submitted Slurm job: leave the job
        running (owned by this process, whose lease ends with it) for the next bot to follow
        again (:meth:`reconcile`), say so in its thread, and return True."""
        if job.kind not in COMPARE_KINDS or run_id is None or job.id in self._fenced or not self._stopping:
            return False
        stored = await asyncio.to_thread(storage.load_run, self.db, run_id)
        slurm_job = (stored.run.settings.get("slurm") or {}) if stored else {}
        if not slurm_job.get("job_id") or slurm_job.get("ended"):
            return False
        note = (f"job {job.id}: the bot was stopped cleanly; Slurm job {slurm_job['job_id']} runs on, and the next "
                "bot start follows it again")
        log.warning(note)
        await self._notify(self.notifier.job_note(job, note))
        return True

    async def _adopt(self, job: storage.Job) -> bool:
        """Follow again the Slurm job of orphaned ``job`` (a compare on a Slurm host whose bot
        stopped or died after submitting it): claim the job and run it as :meth:`_run` with the
        run's Slurm job, which then relays its progress and posts its verdict, or settles it at
        once from Slurm's record when it already ended. False when it is not such a job; True,
        leaving it as it is, when Slurm cannot be asked now (slurmctld down, login node
        unreachable): re-queued, a job Slurm still runs would run twice."""
        if job.kind not in COMPARE_KINDS or job.run_id is None or self.config.hosts.get(job.host) is None \
                or self.config.hosts[job.host].kind != "slurm":
            return False
        stored = await asyncio.to_thread(storage.load_run, self.db, job.run_id)
        host = self.host(job.host)
        assert isinstance(host, SlurmHost)
        job_id = ((stored.run.settings.get("slurm") or {}) if stored else {}).get("job_id")
        try:
            said = await host.job(job_id) if job_id else None
        except core.HostError as exc:  # neither queued again nor failed: the next reconcile asks again
            log.warning("job %s: cannot ask Slurm about its job %s now (%s); asking again at the next reconcile",
                        job.id, job_id, exc)
            return True
        if not slurm.adoptable(stored.run if stored else None, said):
            return False
        taken = await asyncio.to_thread(storage.adopt, self.db, job.id, job.started_at)
        if taken is not None:
            log.warning("job %s: following its Slurm job %s again (%s)", job.id, job_id,
                        said.line() if said else "forgotten by Slurm")
            await self._notify(self.notifier.job_note(
                taken, f"job {job.id}: a restarted bot follows Slurm job {job_id} again"
                       + (f" ({said.line()})" if said else "")))
            await self._notify(self.notifier.job_resumed(taken, job.run_id))
            self._start_slurm_job(taken, job.run_id)
        return True

    async def _lease_lost(self, job: storage.Job, run_id: int | None, claimed_at) -> None:
        """Job ``job`` was stopped because this process's lease may have run out: once the
        database answers, mark its run interrupted and queue it again, unless another bot took
        it over meanwhile (then it is left to that bot)."""
        reason = self._fenced[job.id]  # kept until done: the fence must not cancel this ending again
        try:
            if run_id is not None:
                await self.retrying(storage.mark_abandoned, self.db, run_id, reason)
            if await self.retrying(storage.requeue, self.db, job.id, reason, claimed_at):
                log.warning("job %s: queued again", job.id)
                await self._notify(self.notifier.job_reconciled(job, "queued", reason))
                self.wake(job.host)
            else:
                log.warning("job %s: another bot took it over while this one could not renew its lease; left to it",
                            job.id)
        finally:
            self._fenced.pop(job.id, None)

    async def _storage_lost(self, job: storage.Job, run_id: int | None, claimed_at, exc: SQLAlchemyError) -> None:
        """The database failed under a running job (its engine is already stopped): say so, wait
        for the database, mark the run interrupted, queue the job again once or fail it."""
        short = storage.short_error(exc)
        log.warning("job %s: database unavailable during the run (%s); its engine was stopped", job.id, short)
        await self._notify(self.notifier.job_note(
            job, f"job {job.id}: the database became unavailable during the run ({short}); its engine was stopped; "
                 "the job is queued again once the database is back"))
        reason = f"the database became unavailable during the run ({short})"
        if run_id is None:
            run_id = (await self.retrying(storage.get_job, self.db, job.id, job=job)).run_id
        if run_id is not None:
            await self.retrying(storage.mark_abandoned, self.db, run_id, reason, job=job)
        status = await self.retrying(storage.requeue_or_fail, self.db, job.id, self.config.slack.requeue_interrupted,
                                     reason, claimed_at, job=job)
        if status is None:  # another bot took it over while the database was away from this one
            return
        await self._notify(self.notifier.job_reconciled(job, status, reason))
        if status == "queued":
            self.wake(job.host)
