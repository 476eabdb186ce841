"""Compares on a Slurm host (``kind = "slurm"``, :class:`core._hosts.SlurmHost`): one Slurm batch job
per compare, holding one node for all its launches (both arms, ABBA, on the same GPUs).

Where jobs are submitted (the CLI, the bot): :func:`submit` records the run, writes the job's
spec (``<workdir>/jobs/run-<id>.json``, readable by the submitting user only: it holds the
database URL) and calls ``sbatch``; :func:`follow` relays Slurm's state (pending reason, node)
and the trials the job streams into the database until the job ends. Slurm, not specperf's
host lock, decides when and where a compare runs. All of that goes through the host's
control host (:attr:`core._hosts.SlurmHost.control`): this machine, or the login node over SSH when
the host sets ``ssh``, where the spec and the job's output are written and read.

On the node, inside the job (``python -m bot._slurm_batch SPEC``): :func:`run_job` runs the compare
with the engine, probes, window monitor, GPU hygiene and the benchmark client all on the node,
recording into the run as it goes (the node reaches the database: a SQLite file on the shared
file system, or PostgreSQL). On a node that is not held exclusively (``exclusive = false``)
another of our jobs may run beside it, so the engine gets a free port instead of its
configured one. When Slurm ends the job (``scancel``, time limit, preemption) it sends
SIGTERM: the worker stops the engine's process group and marks the run interrupted.

A bisect on a Slurm host (:func:`bisect_runner`) runs each step's compare as such a job, the
compares of one round side by side on separate nodes; a bisect queued again after its bot
stopped or died follows the jobs its interrupted attempt submitted instead of submitting them
again, and one that will not run again has them cancelled (:func:`cancel_bisect_steps`). A
restarted bot finds a compare's job again by the run's stored job id, checked against Slurm's
name and comment (:func:`adoptable`), and follows it to its end (:func:`follow_again`).

:func:`settle` (run by every command that reconciles) closes the runs of jobs that Slurm has
ended, with Slurm's state and reason (``TIMEOUT``, ``CANCELLED``, ``NODE_FAIL``...), also
when the worker never got the chance (SIGKILL, node failure, a job cancelled while pending).
A job is taken as ended only on Slurm's word: while slurmctld is down or the login node cannot
be reached, following waits and asks again, and settling leaves the run for later.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import cast

import core
import storage
from bot._common import open_host, owner_alive
from core._experiments.bisection import BisectStep, CompareRunner
from core._experiments.compare import CompareRequest, PlannedLooks, compare
from core._hosts import SlurmHost, SlurmJob

# What each final Slurm state means for the run (Slurm's JobState names).
_ENDED = {
    "COMPLETED": "ended", "TIMEOUT": "reached its time limit", "CANCELLED": "was cancelled (scancel)",
    "PREEMPTED": "was preempted", "NODE_FAIL": "lost its node (node failure)", "FAILED": "failed",
    "OUT_OF_MEMORY": "ran out of memory", "BOOT_FAIL": "could not boot its node", "DEADLINE": "passed its deadline",
}
_KILLED = frozenset({"CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"})  # Slurm ended it
_SIGTERM = "Slurm signalled the job to end"
UNREACHABLE = "Slurm cannot be asked now"  # the progress line's start while Slurm does not answer
UNREACHABLE_POLL_MAX_S = 60.0  # the longest wait between two tries while Slurm does not answer
log = logging.getLogger("specperf.bot")


def ended_reason(job: SlurmJob) -> str:
    """``Slurm job 12 reached its time limit (TIMEOUT, TimeLimit) on node1``."""
    what = _ENDED.get(job.state, f"ended {job.state}")
    detail = ", ".join(x for x in (job.state, job.reason) if x)
    return f"Slurm job {job.job_id} {what} ({detail})" + (f" on {job.node}" if job.node else "")


CLIENT = SlurmHost.CLIENT_ON_NODE  # settings["client"] of a Slurm job's run


def run_settings() -> dict:
    """What a run of a Slurm job carries in its settings from its creation on (the job id once
    submitted): :func:`settle` finds such runs, and no owner-based clean-up closes them."""
    return {"client": CLIENT, "slurm": {"job_id": None}}


async def submit(db, request: CompareRequest, shas: tuple[str, str], extra: dict | None = None,
                 run_id: int | None = None) -> tuple[int, str]:
    """Record the run (or use run ``run_id``, recorded with :func:`run_settings`) and submit its
    job; returns (run id, Slurm job id). The job's folder and spec go through the host (its
    login node with ``ssh``), the spec readable by that user only.

    Raises:
        core.HostError: sbatch refused the job, or the host (its login node) could not be
            reached or could not write the spec; the run is then marked failed with its words.
    """
    host = cast(SlurmHost, request.host)
    python = (host.config.slurm and host.config.slurm.python) or sys.executable
    if run_id is None:
        run_id = await asyncio.to_thread(storage.RunStore(db).create, request, *shas,
                                         {**(extra or {}), **run_settings()})
    jobs = f"{host.workdir}/jobs"
    spec_path = f"{jobs}/run-{run_id}.json"
    spec = {"run_id": run_id, "db_url": db.url.render_as_string(hide_password=False), "host_name": host.name,
            "host": host.config.model_dump(mode="json"), "engine_name": request.engine_name,
            "engine": request.engine.model_dump(mode="json"), "workload_name": request.workload_name,
            "workload": request.workload.model_dump(mode="json"), "head_ref": request.head_ref,
            "base_ref": request.base_ref, "modes": request.modes,
            "settings": request.settings.model_dump(mode="json"), "shas": list(shas),
            "force_clean": request.force_clean, "base_engine_name": request.base_engine_name,
            "base_engine": request.base_engine.model_dump(mode="json") if request.base_engine else None,
            "profile_dir": request.profile_dir or f"{host.workdir}/profiles/run-{run_id}",
            "later_windows": request.later_windows, "planned_trials": {m: p.to_dict() for m, p in request.planned_trials.items()}}
    try:
        await host.makedirs(jobs)
        await host.write_file(spec_path, json.dumps(spec).encode(), private=True)
        job_id = await host.submit(run_id, [python, "-m", "bot._slurm_batch", spec_path], f"{jobs}/run-{run_id}.log")
    except core.HostError as exc:
        await asyncio.to_thread(storage.mark_abandoned, db, run_id, str(exc), "failed")
        raise
    await asyncio.to_thread(storage.update_settings, db, run_id, "slurm",
                            {"job_id": job_id, "job_name": f"{SlurmHost.JOB_PREFIX}{run_id}",
                             "state": "PENDING", "log": f"{jobs}/run-{run_id}.log"})
    return run_id, job_id


async def run(db, request: CompareRequest, shas: tuple[str, str], observer: core.CompareObserver | None = None,
              on_run: Callable[[int], Awaitable[None] | None] | None = None, extra: dict | None = None,
              run_id: int | None = None, detach: Callable[[], bool] | None = None) -> int:
    """Submit ``request`` as one Slurm job (:func:`submit`; ``run_id``: a run already recorded),
    call ``on_run(run_id)`` (awaited if it returns an awaitable), and :func:`follow` the job to
    its end with ``observer`` hearing its progress. Cancelled, it cancels the job and waits for
    Slurm to end it, unless ``detach()`` says to leave the job running (a bot stopping cleanly:
    the next bot follows it again, :func:`follow_again`). Returns the run id; the run as stored
    says how it ended.

    Raises:
        core.HostError: sbatch refused the job.
    """
    run_id, job_id = await submit(db, request, shas, extra, run_id)
    await _until_ended(db, cast(SlurmHost, request.host), run_id, job_id, observer, detach, on_run)
    return run_id


async def follow_again(db, host: SlurmHost, run_id: int, observer: core.CompareObserver | None = None,
                       detach: Callable[[], bool] | None = None) -> None:
    """Follow the Slurm job of run ``run_id``, submitted by a process that is gone (a bot that
    stopped cleanly, or was killed, and left its job to Slurm), to its end, as :func:`run` does
    after submitting; a job Slurm has already ended is settled at once from Slurm's record
    (``scontrol``, or ``sacct`` once slurmctld forgot it)."""
    stored = await _load(db, run_id)
    await _until_ended(db, host, run_id, stored.run.settings["slurm"]["job_id"], observer, detach)


async def _until_ended(db, host: SlurmHost, run_id: int, job_id: str, observer: core.CompareObserver | None,
                       detach: Callable[[], bool] | None,
                       on_run: Callable[[int], Awaitable[None] | None] | None = None) -> None:
    try:
        if on_run is not None and (pending := on_run(run_id)) is not None:
            await pending
        await follow(db, host, run_id, observer)
    except asyncio.CancelledError:  # scancel ours, and see the run marked once Slurm has ended it
        if detach is None or not detach():
            await asyncio.shield(cancel_and_settle(db, host, run_id, job_id))
        raise


def adoptable(run: storage.Run | None, said: SlurmJob | None) -> bool:
    """Whether a restarted bot may follow ``run``'s Slurm job again: the run is a compare whose
    job was submitted, and Slurm either no longer knows the job (it is settled as forgotten) or
    says it is ours and this run's (its name ``specperf-run-<run id>``, its comment)."""
    slurm_job = (run.settings.get("slurm") or {}) if run is not None else {}
    if run is None or run.kind != "compare" or not slurm_job.get("job_id"):
        return False
    return said is None or (said.ours and said.name == f"{SlurmHost.JOB_PREFIX}{run.id}")


def bisect_runner(db, store: storage.BisectStore, detach: Callable[[], bool] | None = None) -> CompareRunner:
    """How a bisect on a Slurm host runs each step (a :data:`core._experiments.bisection.CompareRunner`): as a Slurm job
    of its own (:func:`run`) into the compare run ``store`` recorded for the step, so the
    compares of one round run side by side on separate nodes; each step gets the job's node
    time (``node_s``: Slurm's run time of the job) and ``where`` (``Slurm job 12 on node2``).

    A step whose compare an interrupted bisect had submitted (``store.resumed``: a bot stopped
    or killed mid-bisect, its job queued again) is not submitted again: its Slurm job is
    followed again (:func:`follow_again`), or its verdict taken when the job had finished; a
    taken job that Slurm ended without a verdict is submitted anew. Cancelled, a step's job is
    cancelled unless ``detach()`` says to leave it running (the bot stopping cleanly: the bisect
    is queued again and the next bot's attempt follows the job)."""

    async def run_step(step: BisectStep, request: CompareRequest,
                       observer: core.CompareObserver | None) -> core.CompareResult:
        run_id = store.compare_runs[step.number]
        shas = (step.base_sha, step.head_sha)
        if step.number in store.resumed:
            stored = await _load(db, run_id)
            said = (f"step {step.number}: Slurm job {stored.run.settings['slurm']['job_id']} (run {run_id}), submitted "
                    "by an interrupted attempt of this bisect,")
            _say(observer, f"{said} is followed again" if stored.run.status == "running"
                 else f"{said} had finished: its verdict is taken")
            # also for a finished one: Slurm's record of its end (run time, node) is kept
            await follow_again(db, cast(SlurmHost, request.host), run_id, observer, detach)
            stored = await _load(db, run_id)
            if stored.run.status != "done":
                _say(observer, f"step {step.number}: that job ended without a verdict ({stored.run.reason}): "
                               "submitting the step again")
                await asyncio.to_thread(store.record_step, step, request)
                run_id = await run(db, request, shas, observer, run_id=store.compare_runs[step.number], detach=detach)
        else:
            run_id = await run(db, request, shas, observer, run_id=run_id, detach=detach)
        stored = await _load(db, run_id)
        job = stored.run.settings["slurm"]
        step.node_s = job.get("run_s")
        step.where = f"Slurm job {job.get('job_id')}" + (f" on {job['node']}" if job.get("node") else "")
        return stored_result(stored)

    return run_step


def _say(observer: core.CompareObserver | None, line: str) -> None:
    if observer is not None:
        observer.progress(line)


async def cancel_bisect_steps(db, host: SlurmHost, bot_job: int) -> list[str]:
    """``scancel`` the Slurm jobs of bot job ``bot_job``'s bisect steps that are not yet
    recorded as ended (the job has ended: nothing will follow them); the job ids asked.
    :func:`settle` marks their runs once Slurm has ended them. A job Slurm cannot be asked to
    cancel now is logged and left to its time limit."""
    asked = []
    for run in await asyncio.to_thread(storage.unsettled_slurm_runs, db):
        job_id = run.settings["slurm"].get("job_id")
        if run.settings.get("bot_job") != bot_job or not run.settings.get("bisect") or not job_id:
            continue
        try:
            await host.cancel(job_id)
            asked.append(job_id)
        except core.HostError as exc:
            log.warning("run %s: cannot cancel its Slurm job %s now (%s)", run.id, job_id, exc)
    return asked


async def bisect_parallel(host: SlurmHost) -> int:
    """How many compares a bisect on ``host`` runs side by side: ``bisect_parallel`` of its
    ``[slurm]`` table, else the partition's node count up to 4, else 2 where sinfo fails
    (see :class:`core._config.SlurmConfig`)."""
    slurm = host.config.slurm
    if slurm and slurm.bisect_parallel:
        return slurm.bisect_parallel
    try:
        return max(1, min(4, await host.partition_nodes()))
    except core.HostError:
        return 2


async def _load(db, run_id: int) -> storage.StoredRun:
    stored = await asyncio.to_thread(storage.load_run, db, run_id)
    if stored is None:
        raise core.ConfigError(f"no run {run_id} in the database")
    return stored


async def follow(db, host: SlurmHost, run_id: int, observer: core.CompareObserver | None = None) -> storage.Run:
    """Relay run ``run_id``'s job until Slurm ends it: each change of Slurm's state (with the
    pending reason and node) and each trial the job records, as ``observer.progress`` lines;
    then :func:`settle` it. Returns the run as finally stored.

    Slurm that cannot be asked for a while (the login node's SSH connection dropped, slurmctld
    down or restarting: :meth:`SlurmHost.job`'s HostError) is said once as a progress line and
    asked again, every ``poll_s`` doubling up to :data:`UNREACHABLE_POLL_MAX_S`, for as long as
    it takes: the job runs on without us, and only Slurm's own word ends the following."""
    slurm = host.config.slurm
    poll_s = slurm.poll_s if slurm else 2.0
    observer = observer or core.CompareObserver()
    said, told, wait_s = "", set(), poll_s
    while True:
        stored = await _load(db, run_id)
        job_id = stored.run.settings["slurm"]["job_id"]
        try:
            job = await host.job(job_id)
        except core.HostError as exc:
            if not said.startswith(UNREACHABLE):
                said = f"{UNREACHABLE} ({exc}); asking again until it answers"
                observer.progress(said)
            await asyncio.sleep(wait_s)
            wait_s = min(wait_s * 2, UNREACHABLE_POLL_MAX_S)
            continue
        wait_s = poll_s
        line = job.line() if job else f"Slurm job {job_id}: unknown to Slurm"
        if line != said:
            observer.progress(line)
            said = line
        for trial in stored.trials:
            if trial.status != "running" and trial.seq not in told:
                told.add(trial.seq)
                arm = stored.arms[trial.arm_id]
                what = f"{trial.output_tok_s:,.1f} tok/s" if trial.status == "ok" else trial.status
                observer.progress(f"trial {trial.seq}: {arm.mode} {arm.role}: {what}")
        if job is None or not job.active:
            break
        await asyncio.sleep(poll_s)
    await _record_end(db, host, stored.run, job)
    return (await _load(db, run_id)).run


async def _settle_one(db, host: SlurmHost, run: storage.Run) -> str | None:
    """Ask Slurm about ``run``'s job and :func:`_record_end` what it says. Returns that reason
    (``None``: nothing to do yet, or the worker's own outcome stands).

    Raises:
        core.HostError: Slurm cannot be asked (see :meth:`SlurmHost.job`); nothing is marked.
    """
    slurm = run.settings["slurm"]
    if not slurm.get("job_id") and owner_alive(db)(run.settings.get("owner") or {}):
        return None  # its submitter is still at sbatch
    job = await host.job(slurm["job_id"]) if slurm.get("job_id") else None
    return await _record_end(db, host, run, job)


async def _record_end(db, host: SlurmHost, run: storage.Run, job: SlurmJob | None) -> str | None:
    """Record the end of ``run``'s job once Slurm has ended it, from what Slurm just said of it
    (``job``; ``None``: Slurm does not know it). A run the worker did not finish (Slurm's signal
    stopped it, or it never got to: a hard kill, a node failure, a job that never started or
    crashed) is marked with Slurm's state and reason: interrupted when Slurm ended the job,
    failed otherwise (with where the job's output is). Returns that reason (``None``: nothing
    to do yet, or the worker's own outcome stands)."""
    run_id = cast(int, run.id)
    slurm = run.settings["slurm"]
    if job is not None and job.active:
        return None
    ended = {"ended": True, "state": job.state if job else "UNKNOWN", "reason": job.reason if job else None,
             "node": (job.node if job else None) or slurm.get("node"), "run_s": job.run_s if job else None}
    await asyncio.to_thread(storage.update_settings, db, run_id, "slurm", ended)
    fresh = (await _load(db, run_id)).run
    killed = job is not None and job.state in _KILLED
    stopped_by_signal = fresh.status == "interrupted" and (fresh.reason or "").startswith(_SIGTERM)
    # Slurm signals every process of the job at once: an engine that dies of it first fails its
    # trial, and the worker can record "failed" before its own SIGTERM handler runs
    failed_by_the_kill = killed and fresh.status == "failed"
    if fresh.status != "running" and not stopped_by_signal and not failed_by_the_kill:
        return None  # the worker finished the run (done, failed, refused): its own words stand
    why = ended_reason(job) if job else f"Slurm no longer knows job {slurm.get('job_id')} (it ended and was forgotten)"
    if failed_by_the_kill:
        why += f"; the worker had recorded: {fresh.reason}"
    tail = None
    if not killed and slurm.get("log"):
        why += f"; the job's output: {slurm['log']}"
        tail = await _output_tail(host, slurm["log"])
    await asyncio.to_thread(storage.mark_abandoned, db, run_id, why, "interrupted" if killed else "failed", tail)
    return why


async def _output_tail(host: SlurmHost, path: str, lines: int = 40) -> str | None:
    """The last ``lines`` lines of a job's output file, read through the host (its login node
    with ``ssh``); ``None`` when it cannot be read (gone, or the host unreachable)."""
    try:
        text = await host.read_text(path, 0, 64 << 10)
    except (OSError, core.HostError):
        return None
    return "\n".join(text.splitlines()[-lines:]).rstrip() or None


async def settle(db, config: core.Config) -> list[tuple[int, str]]:
    """Close the runs whose Slurm job has ended without finishing them (see the module
    docstring); returns ``[(run id, reason)]`` for each run marked."""
    closed = []
    for run in await asyncio.to_thread(storage.unsettled_slurm_runs, db):
        if run.host not in config.hosts or config.hosts[run.host].kind != "slurm":
            continue
        try:
            async with open_host(config, run.host) as host:
                why = await _settle_one(db, cast(SlurmHost, host), run)
        except core.HostError as exc:  # left as it is: settled once Slurm answers again
            log.warning("run %s: its Slurm job cannot be checked now: %s", run.id, exc)
            continue
        if why:
            closed.append((cast(int, run.id), why))
    return closed


async def cancel_and_settle(db, host: SlurmHost, run_id: int, job_id: str) -> None:
    """``scancel`` our job ``job_id`` and wait for Slurm to end it (its worker stops the engine),
    then mark run ``run_id`` (:func:`follow` without progress)."""
    try:
        await host.cancel(job_id)
    except core.HostError:
        pass  # Slurm no longer knows it: settled below all the same
    await follow(db, host, run_id)


def stored_result(stored: storage.StoredRun) -> core.CompareResult:
    """The outcome of a Slurm job's run as a :class:`core.CompareResult`: status, SHAs, reason,
    log tail, each mode's verdict and the launch numbers of its measured trials (``seqs``, by
    mode and role), which is what a notifier and a bisect's step read; the trials' figures stay
    in the database, where reports read them."""
    run = stored.run
    seqs: dict[str, dict[str, list[int]]] = {mode: {"base": [], "head": []} for mode in run.modes}
    for trial in stored.trials:
        arm = stored.arms[trial.arm_id]
        if trial.status == "ok" and arm.mode in seqs:
            seqs[arm.mode][arm.role].append(trial.seq)
    verdicts = {row.mode: row.to_verdict() for row in stored.verdicts}
    return core.CompareResult(core.RunStatus(run.status), run.base_sha, run.head_sha, verdicts=verdicts, seqs=seqs,
                              reason=run.reason, log_tail=run.log_tail)


def killed_by_slurm(run: storage.Run) -> bool:
    """Whether Slurm ended ``run``'s job before the run finished by its own decision (time
    limit, preemption, node failure; not a ``scancel``): the bot re-queues such a job once, as
    after a crash."""
    slurm = run.settings.get("slurm") or {}
    return run.status == "interrupted" and bool(slurm.get("ended")) and slurm.get("state") != "CANCELLED"


async def live_line(config: core.Config, run: storage.Run) -> str | None:
    """Slurm's state of ``run``'s job now (``Slurm job 12 PENDING (Resources)``), or as stored
    once over; ``None`` for a run that is not a Slurm job's."""
    slurm = run.settings.get("slurm")
    if not slurm or not slurm.get("job_id"):
        return None
    if not slurm.get("ended") and run.host in config.hosts:
        try:
            async with open_host(config, run.host) as host:
                job = await cast(SlurmHost, host).job(slurm["job_id"])
            if job is not None:
                return job.line()
        except core.HostError as exc:
            return f"Slurm job {slurm['job_id']}: state unknown ({exc})"
    node = f" on {slurm['node']}" if slurm.get("node") else ""
    reason = f" ({slurm['reason']})" if slurm.get("reason") else ""
    return f"Slurm job {slurm['job_id']} {slurm.get('state', 'UNKNOWN')}{reason}{node}"


def _free_port() -> int:
    """A TCP port no process on this node holds now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


async def run_job(spec_path: str) -> int:
    """The job's worker on the node: run the compare of the spec at ``spec_path`` into its
    recorded run; 0 when the compare ended on its own (done, failed or refused: the run says
    which), 143 when Slurm ended the job."""
    with open(spec_path) as fh:
        spec = json.load(fh)
    db = storage.open_database(spec["db_url"])
    run_id = spec["run_id"]
    job_id = os.environ.get("SLURM_JOB_ID", "")
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    host = SlurmHost(spec["host_name"], core.HostConfig.model_validate(spec["host"]), "").on_node(node)
    engine = core.EngineConfig.model_validate(spec["engine"])
    base_engine = core.EngineConfig.model_validate(spec["base_engine"]) if spec.get("base_engine") else None
    if host.config.slurm and not host.config.slurm.exclusive:  # a job of ours may share the node
        engine = engine.model_copy(update={"port": _free_port()})
        base_engine = base_engine.model_copy(update={"port": engine.port}) if base_engine else None
    planned = {m: PlannedLooks.from_stored(p) for m, p in (spec.get("planned_trials") or {}).items()}
    request = CompareRequest(
        engine_name=spec["engine_name"], engine=engine,
        workload_name=spec["workload_name"], workload=core.WorkloadConfig.model_validate(spec["workload"]),
        head_ref=spec["head_ref"], base_ref=spec["base_ref"], modes=spec["modes"],
        settings=core.CompareConfig.model_validate(spec["settings"]), host=host, force_clean=spec["force_clean"],
        profile_dir=spec.get("profile_dir"), base_engine_name=spec.get("base_engine_name"), base_engine=base_engine,
        later_windows=spec.get("later_windows") or {}, planned_trials=planned)
    store = storage.RunStore(db)
    await asyncio.to_thread(store.resume, run_id)
    await asyncio.to_thread(storage.update_settings, db, run_id, "slurm",
                            {"job_id": job_id, "node": node, "state": "RUNNING"})
    task = asyncio.create_task(compare(request, store, shas=tuple(spec["shas"])))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        await asyncio.to_thread(storage.mark_abandoned, db, run_id,
                                f"{_SIGTERM} (job {job_id} on {node}); its engine was stopped", "interrupted")
        return 143
    return 0


def main() -> None:
    """``python -m bot._slurm_batch SPEC``: the entry point of the batch job."""
    sys.exit(asyncio.run(run_job(sys.argv[1])))


if __name__ == "__main__":
    main()
