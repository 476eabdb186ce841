"""The bot's job queue: jobs live in the database (storage), one worker per host takes them
in order, one at a time per host, under the host's lock (the CLI's too), and runs each as a
compare or a bisect (``Job.kind``).

A :class:`Notifier` (the Slack front end) hears about each job's start, progress and end.
``cancel`` of a running job cancels its task: core.compare stops the engine's process group
and marks the run interrupted; the job is marked cancelled. At start, before any worker
runs, what a crashed bot left is reconciled: runs it left running have their recorded engine
groups stopped and are marked interrupted (:func:`bot._runs.reconcile_runs`, the same as the
CLI's), and each job it left running is marked interrupted, then queued again once or failed
(``[slack].requeue_interrupted``). Queued jobs stay queued and run once each.
"""

from __future__ import annotations

import asyncio
import logging

import core
import storage
from bot import _app as app
from bot._app import trial_line
from bot._common import open_host, owner_alive
from bot._runs import reconcile_runs

log = logging.getLogger("specperf.bot")


class Notifier:
    """What the queue tells a front end; every method is optional (no-op here) and must not raise."""

    async def job_started(self, job: storage.Job, run_id: int) -> None: ...
    def progress(self, job: storage.Job, message: str) -> None: ...
    async def job_finished(self, job: storage.Job, run_id: int | None,
                           result: core.CompareResult | core.BisectResult | None,
                           error: str | None) -> None: ...
    async def job_cancelled(self, job: storage.Job, reason: str) -> None: ...
    async def job_reconciled(self, job: storage.Job, status: str, reason: str) -> None: ...


class JobProgress(core.CompareObserver):
    """Passes a job's compare progress to the notifier."""

    def __init__(self, job: storage.Job, notifier: Notifier) -> None:
        self.job, self.notifier = job, notifier

    def progress(self, message: str) -> None:
        self.notifier.progress(self.job, message)

    def trial_finished(self, arm, seq, trial) -> None:
        self.notifier.progress(self.job, f"launch {seq} ({arm.mode} {arm.role}): {trial_line(trial)}")

    def verdicts_updated(self, verdicts) -> None:
        self.notifier.progress(self.job, "so far: " + ", ".join(f"{m} {v.verdict}" for m, v in verdicts.items()))


class JobBisectProgress(core.BisectObserver):
    """Passes a bisect job's progress (and each step's compare progress) to the notifier."""

    def __init__(self, job: storage.Job, notifier: Notifier) -> None:
        self.job, self.notifier = job, notifier

    def progress(self, message: str) -> None:
        self.notifier.progress(self.job, message)

    def compare_observer(self, step, request) -> core.CompareObserver:
        return JobProgress(self.job, self.notifier)

    def step_finished(self, step: core.BisectStep) -> None:
        self.notifier.progress(self.job, f"step {step.number} ({step.kind}) {step.head_sha[:12]}: "
                                         f"{step.evidence()} -> {step.outcome}")


def compare_request(config: core.Config, job: storage.Job, host: core.Host) -> core.CompareRequest:
    """The compare a job asks for: its engine (on the job's host), workload and modes;
    ``args["rounds"]`` N fixes the launches per arm and mode at 2N (N ABBA rounds).

    Raises:
        core.ConfigError: the engine, workload or a mode is no longer in the config.
    """
    choice = app.choose(config, job.engine_name, job.workload_name, job.host)
    return app.compare_request(config, choice, host, job.args["head_ref"], job.args.get("base_ref"),
                               list(job.args["modes"]), app.compare_settings(config, rounds=job.args.get("rounds")))


class JobQueue:
    """The queue and its workers. ``start()`` reconciles, then starts one worker per host of
    the config; ``submit()`` queues a job and wakes its host's worker; ``cancel()`` cancels a
    queued or running job; ``stop()`` stops the workers (a running job's engine is stopped, its
    run marked interrupted, and the job queued again once or failed, as after a crash)."""

    def __init__(self, config: core.Config, db, notifier: Notifier) -> None:
        self.config, self.db, self.notifier = config, db, notifier
        self._hosts: dict[str, core.Host] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._workers: list[asyncio.Task] = []
        self._running: dict[int, asyncio.Task] = {}
        self._cancelled: dict[int, str] = {}

    async def start(self) -> list[tuple[storage.Job, str, str]]:
        """Reconcile what a crash left, then start the workers. Returns, for each job that was
        left running, (job, new status ``queued``/``failed``, reason)."""
        closed = dict(await reconcile_runs(self.db, self.config))
        reconciled = []
        for job in await asyncio.to_thread(storage.orphaned_jobs, self.db, owner_alive):
            reason = f"the bot (pid {job.owner['pid']}) stopped while this job ran"
            if job.run_id in closed:
                reason += f" (run {job.run_id}: {closed[job.run_id].split('; ', 1)[-1]})"
            status = await asyncio.to_thread(storage.requeue_or_fail, self.db, job.id,
                                             self.config.slack.requeue_interrupted, reason)
            log.warning("job %s: %s; now %s", job.id, reason, status)
            reconciled.append((job, status, reason))
            await self.notifier.job_reconciled(job, status, reason)
        for host in self.config.hosts:
            self._wake[host] = asyncio.Event()
            self._wake[host].set()  # jobs queued before the start run now
            self._workers.append(asyncio.create_task(self._worker(host), name=f"worker-{host}"))
        return reconciled

    def host(self, name: str) -> core.Host:
        """The bot's :class:`core.Host` for ``name``, opened once and reused (one SSH
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
            return f"job {job_id} was queued and is now cancelled"
        task = self._running.get(job_id)
        if task is None:
            job = await asyncio.to_thread(storage.get_job, self.db, job_id)
            if job is None:
                return f"there is no job {job_id} (`/specperf queue` lists them)"
            return f"job {job_id} is {job.status}; nothing to cancel"
        self._cancelled[job_id] = reason
        task.cancel()
        await asyncio.wait([task])
        return f"job {job_id} was running; its engine was stopped and the job cancelled"

    def running(self) -> dict[int, asyncio.Task]:
        """Running jobs by id."""
        return dict(self._running)

    async def stop(self) -> None:
        """Stop the workers; a running compare is cancelled (its engine stopped)."""
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        for host in self._hosts.values():
            await host.close()

    async def _worker(self, host: str) -> None:
        wake = self._wake[host]
        while True:
            await wake.wait()
            wake.clear()
            while (job := await asyncio.to_thread(storage.claim_next, self.db, host)) is not None:
                task = asyncio.create_task(self._run(job), name=f"job-{job.id}")
                self._running[job.id] = task
                try:
                    await task  # a cancel command ends the task normally; stopping the worker cancels it
                finally:
                    self._running.pop(job.id, None)

    async def _run(self, job: storage.Job) -> None:
        run_id = None
        result: core.CompareResult | core.BisectResult
        try:
            host = self.host(job.host)
            # the same lock as the CLI's: a terminal compare on this host makes the job wait
            session = app.Session(f"bot job {job.id}", on_wait=lambda message: self.notifier.progress(job, message))

            async def started(new_run_id: int) -> None:
                nonlocal job, run_id
                run_id = new_run_id
                job = await asyncio.to_thread(storage.update_job, self.db, job.id, run_id=run_id)
                await self.notifier.job_started(job, run_id)

            if job.kind == "bisect":
                choice = app.choose(self.config, job.engine_name, job.workload_name, job.host)
                bisect = app.bisect_request(self.config, choice, host, job.args["good_ref"], job.args["bad_ref"],
                                            job.args["mode"])
                _, result = await app.bisect(self.config, self.db, bisect, session,
                                             lambda store: JobBisectProgress(job, self.notifier), on_run=started)
            else:
                request = compare_request(self.config, job, host)
                shas = (job.args["base_sha"], job.args["head_sha"])
                _, result = await app.compare(self.config, self.db, request, shas, session,
                                              JobProgress(job, self.notifier), on_run=started)
        except asyncio.CancelledError:
            reason = self._cancelled.pop(job.id, None)
            if reason is None:  # the bot is stopping: the engine is stopped, the run interrupted
                storage.requeue_or_fail(self.db, job.id, self.config.slack.requeue_interrupted,
                                        "the bot was stopped while this job ran")
                raise
            await asyncio.to_thread(storage.update_job, self.db, job.id, status="cancelled", reason=reason)
            await self.notifier.job_cancelled(job, reason)
            return
        except Exception as exc:  # a job's failure must never stop its host's worker
            message = str(exc) if isinstance(exc, core.SpecperfError) else f"{exc.__class__.__name__}: {exc}"
            if not isinstance(exc, core.SpecperfError):
                log.exception("job %s failed unexpectedly", job.id)
            await asyncio.to_thread(storage.update_job, self.db, job.id, status="failed", reason=message)
            await self.notifier.job_finished(job, run_id, None, message)
            return
        status = "failed" if result.status == "failed" else "done"
        # a re-queued job keeps why it was interrupted unless the run itself has a reason
        reason = result.message if isinstance(result, core.BisectResult) else result.reason
        kept = {"reason": reason} if reason else {}
        await asyncio.to_thread(storage.update_job, self.db, job.id, status=status, **kept)
        await self.notifier.job_finished(job, run_id, result, None)
