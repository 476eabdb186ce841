"""The ``/specperf`` commands of the Slack bot: each one acknowledged first from the text and
the config alone (parse, resolve the target, authorise against ``[slack.allow]``), then run
after the ack (git, the database, the queue), audited, and answered ephemerally. Compare,
calibrate, watch and bisect (:data:`bot._slack.commands.QUEUED`) become jobs in the host's queue;
status, queue, cancel, history and env answer at once; help is the ack itself.

Every command is checked first, from the text and the config alone (parse, authorise); usage
errors and refusals are the ack's ephemeral text, and nothing is queued for them. A command
that needs work is then written to the audit table as ``received`` (with what answering it
needs) before it is acknowledged; git, the queue and the Web API come after the ack. Queued
commands are carried out one at a time in the order they were received, so their
jobs are queued in that order whichever command's git answers first. A
received command whose bot died before answering it is carried out by the next bot
(:meth:`SlackCommands.resume`). Every command ends in the audit table (who, what, when,
result). A database error reaches the user as one line naming it, never SQL.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.exc import SQLAlchemyError

import core
import storage
from bot import _app as app
from bot import _slurm_batch as slurm
from bot._common import fmt, owner_alive, pick
from bot._jobs.queue_workers import JobQueue, compare_request
from bot._runs import recheck_plan
from bot._slack.client import reply_via
from bot._slack.commands import HELP, MAX_COMMAND_CHARS, QUEUED, Command, UsageError, parse
from bot._slack.mrkdwn import escape
from bot._slack.notifier import SlackNotifier, job_what, queued_by
from core._env.checks import run_checks, worst
from core._env.probe import probe_async
from core._experiments.compare import resolve_refs
from core._git import first_parent_range, resolve_commit

log = logging.getLogger("specperf.bot")

IO_SLOTS = 2  # commands doing database or git work at once, after their ack


class SlackCommands:
    """The command handlers: ``await handle(ack, body, respond)`` for each ``/specperf``
    request the transport passes on; ``cancel()`` stops the ones still running."""

    def __init__(self, config, db, queue: JobQueue, notifier: SlackNotifier) -> None:
        self.config, self.db, self.slack = config, db, config.slack
        self.queue, self.notifier = queue, notifier
        self._tasks: set[asyncio.Task] = set()
        self._io_slots = asyncio.Semaphore(IO_SLOTS)
        # Compare and bisect commands take this in the order their tasks start, which is the
        # order received (asyncio.Lock wakes its waiters first in, first out).
        self._queue_in_order = asyncio.Lock()

    def cancel(self) -> None:
        """Cancel every command still running after its ack."""
        for task in list(self._tasks):
            task.cancel()

    async def _io(self, fn, /, *args, **kwargs):
        """``fn(*args, **kwargs)`` in a thread, at most :data:`IO_SLOTS` commands at a time: a burst
        of commands' database and git work (GIL-bound ORM code) cannot starve the event loop
        that sends the next acks."""
        async with self._io_slots:
            return await asyncio.to_thread(fn, *args, **kwargs)


    def _target(self, cmd: Command) -> tuple[str | None, str | None]:
        """(host, engine) a command acts on, from the config alone; ``None`` for any.

        Raises:
            UsageError: an unknown engine or host.
        """
        host = engine = None
        if cmd.name in QUEUED and cmd.name != "recheck":  # a recheck's host and engine are its run's
            try:
                engine = pick(self.config.engines, cmd.engine, "engine")
                host = cmd.host or self.config.engine(engine).host
                if cmd.name == "bisect":
                    cmd.options["mode"] = app.bisect_mode(self.config, engine, cmd.mode)
                    cmd.options["modes"] = [cmd.mode]
                elif cmd.name == "calibrate":
                    cmd.options["goal"] = app.calibration_goal(cmd.launches, cmd.change_pct, cmd.power, cmd.windows)
                    cmd.options["modes"] = app.resolve_modes(self.config, engine, cmd.modes)
                elif cmd.name == "compare":
                    cmd.options["modes"] = app.resolve_modes(self.config, engine, cmd.modes)
                    if cmd.base_engine:  # the set-ups are checked after the allow-list (_resolve)
                        self.config.engine(cmd.base_engine)
            except core.ConfigError as exc:
                raise UsageError(str(exc)) from None
            if cmd.name == "watch" and host in self.config.hosts and self.config.hosts[host].kind == "slurm":
                raise UsageError(f"host {host!r} is a Slurm partition: its nodes are taken per job, so there is no "
                                 "one machine to watch; watch a host that runs engines itself")
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

    async def handle(self, ack, body: dict, respond) -> None:
        """Acknowledge one ``/specperf`` request, then run it in a task."""
        text = (body.get("text") or "").strip()
        who = (body.get("user_id", ""), body.get("channel_id", ""), body.get("team_id", ""))
        try:
            cmd = parse(text)
            host, engine = self._target(cmd)
        except UsageError as exc:
            await ack(response_type="ephemeral", text=f"usage error: {escape(str(exc))}")
            self._audit(who, text, f"usage error: {str(exc).splitlines()[0]}")
            return
        if cmd.name == "help":
            await ack(response_type="ephemeral", text=HELP)  # every command of COMMANDS, one example each
            self._audit(who, text, "help")
            return
        base_engine = cmd.options.get("base_engine")  # compare's base arm on another engine entry (allowed too)
        denied = [e for e in ([engine] + ([base_engine] if base_engine is not None else []))
                  if not self.slack.allow.allows(who[0], who[1], host, e)]
        if denied:
            engine = denied[0]
            where = " and ".join(x for x in (f"host {host}" if host else "", f"engine {engine}" if engine else "") if x)
            await ack(response_type="ephemeral",
                      text=f"refused: <@{who[0]}> in this channel is not allowed to use specperf"
                           f"{' on ' + where if where else ''}; ask an admin to add you to [slack.allow] "
                           "(user and channel IDs)")
            self._audit(who, text, "refused: not on the allow-list")
            return
        payload = {"trigger_id": body.get("trigger_id"), "response_url": body.get("response_url")}
        try:  # persisted before the ack: a crash from here on loses nothing
            command_id = await asyncio.to_thread(storage.receive_command, self.db, *who, text, payload)
        except SQLAlchemyError as exc:
            log.warning("command not taken: database unavailable (%s)", storage.short_error(exc))
            await ack(response_type="ephemeral", text=f"`/specperf {text}`: not taken: the bot's database is "
                                                      f"unavailable ({storage.short_error(exc)}); try again shortly")
            return
        await ack(response_type="ephemeral", text=f"`/specperf {text}`: working on it")
        self._spawn(self._execute(cmd, who, text, payload, host, engine, command_id))

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _audit(self, who: tuple[str, str, str], text: str, result: str, job_id: int | None = None) -> None:
        self._spawn(self._io(storage.record_command, self.db, *who, text[:MAX_COMMAND_CHARS], result, job_id))

    async def _execute(self, cmd, who, text, payload: dict, host, engine, command_id: int) -> None:
        """Carry out received command ``command_id``, record its result and answer it through
        its response URL (``payload``)."""
        try:
            handler = getattr(self, f"_cmd_{cmd.name}")
            if cmd.name in QUEUED:
                async with self._queue_in_order:
                    reply, result, job_id = await handler(cmd, who, payload, host, engine)
            else:
                reply, result, job_id = await handler(cmd, who, payload, host, engine)
        except core.SpecperfError as exc:
            reply, result, job_id = f"error: {escape(str(exc))}", f"error: {str(exc).splitlines()[0]}", None
        except SQLAlchemyError as exc:
            short = storage.short_error(exc)
            log.warning("command %d: database unavailable (%s)", command_id, short)
            reply, result, job_id = (f"error: the bot's database is unavailable ({short}); try again shortly",
                                     f"error: database unavailable ({short})", None)
        except Exception as exc:  # one command's bug must not take the bot down
            log.exception("command %d failed", command_id)
            reply, result, job_id = f"internal error: {exc.__class__.__name__}", f"internal error: {exc!r}"[:500], None
        await self.queue.retrying(storage.answer_command, self.db, command_id, result, job_id)
        if reply and payload.get("response_url"):  # the ack went out; a lost ephemeral line is logged
            await reply_via(payload["response_url"], response_type="ephemeral", text=reply)

    async def resume(self) -> int:
        """Carry out the received commands whose bot died before answering them (each taken by
        one bot only); how many this bot took.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
        """
        taken = 0
        for row in await self._io(storage.unanswered_commands, self.db, owner_alive(self.db)):
            if not await self._io(storage.take_command, self.db, row):
                continue
            taken += 1
            who = (row.user_id, row.channel_id, row.team_id)
            try:
                cmd = parse(row.command)
                host, engine = self._target(cmd)
            except UsageError as exc:  # the config changed since it was received
                await self._io(storage.answer_command, self.db, row.id, f"usage error: {str(exc).splitlines()[0]}")
                continue
            log.warning("command %d (%s) was received by a bot that stopped before answering it: carrying it out",
                        row.id, row.command[:200])
            self._spawn(self._execute(cmd, who, row.command, row.payload or {}, host, engine, row.id))
        return taken

    def _job(self, kind: str, who, body, host: str, engine: str, args: dict, workload: str | None = None
             ) -> storage.Job:
        workload = workload or pick(self.config.workloads, None, "workload", default="default")
        return storage.Job(kind=kind, host=host, engine_name=engine, workload_name=workload, user_id=who[0],
                           channel_id=who[1], team_id=who[2],
                           dedupe_key=f"{who[2]}:{body['trigger_id']}" if body.get("trigger_id") else None,
                           args=args, slack={"channel": who[1], "response_url": body.get("response_url")})

    async def _resolve(self, job, host):
        """Resolve ``job``'s refs on ``host`` into ``job.args`` (``base_sha``, ``head_sha``);
        (the usage-error reply or ``None``, the compare's ``(base, head)`` refs as shown:
        :meth:`CompareRequest.refs`); the reply for a ref that names no commit or a base engine
        that cannot be the other arm (checked here, after the allow-list)."""
        try:
            request = compare_request(self.config, job, self.queue.host(host))
            base_sha, head_sha = await resolve_refs(request)
        except (core.GitError, core.ConfigError) as exc:  # a bad ref; set-ups that cannot be one compare's arms
            return (f"usage error: {escape(str(exc))}", f"usage error: {exc}", None), None
        job.args = {**job.args, "base_sha": base_sha, "head_sha": head_sha}
        return None, request.refs()

    async def _cmd_compare(self, cmd, who, body, host, engine):
        job = self._job("compare", who, body, host, engine,
                        {"head_ref": cmd.commit, "base_ref": cmd.base, "modes": cmd.modes, "rounds": cmd.rounds,
                         "base_engine": cmd.base_engine})
        refused, refs = await self._resolve(job, host)
        if refused is not None:
            return refused
        base_sha, head_sha = job.args["base_sha"], job.args["head_sha"]
        base, head = refs
        on = f"engine `{engine}`" if not cmd.base_engine else f"base engine `{cmd.base_engine}` against engine `{engine}`"
        return await self._queue(job, who, body, f"<@{who[0]}> compare `{head}` ({head_sha[:10]}) against `{base}` "
                                 f"({base_sha[:10]}) on host `{host}`, {on}, modes {', '.join(cmd.modes)}")

    async def _cmd_calibrate(self, cmd, who, body, host, engine):
        """An A/A compare of ``--commit`` with ``--launches`` per arm and mode, stored as the
        host's calibration: the compare job path with the same commit on both sides."""
        job = self._job("calibrate", who, body, host, engine,
                        {"head_ref": cmd.commit, "base_ref": cmd.commit, "modes": cmd.modes, "launches": cmd.launches,
                         "calibration": cmd.goal, "windows": cmd.windows})
        refused, _ = await self._resolve(job, host)
        if refused is not None:
            return refused
        head_sha = job.args["head_sha"]
        return await self._queue(job, who, body, f"<@{who[0]}> calibrate `{cmd.commit}` ({head_sha[:10]}) against "
                                 f"itself on host `{host}`, engine `{engine}`, modes {', '.join(cmd.modes)}, "
                                 f"{cmd.launches} launches per arm and mode")

    async def _cmd_recheck(self, cmd, who, body, host, engine):
        """A stored compare's commits again, on its host with its engine, as a compare job with
        its stored workload, modes, margin and launches (:func:`bot._runs.recheck_plan`),
        answered against that run alone in the thread. The allow-list is checked here, for the
        run's host and engine (the ack knew neither), before anything about the run is looked at
        or said."""
        stored = await self._io(storage.load_run, self.db, cmd.run)
        if stored is not None and not self.slack.allow.allows(who[0], who[1], stored.run.host, stored.run.engine_name):
            # before anything about the run is said: its kind, status and launches are not the user's to read
            return (f"refused: <@{who[0]}> in this channel is not allowed to use specperf on run {cmd.run}'s host and "
                    "engine; ask an admin to add you to [slack.allow]", "refused: not on the allow-list", None)
        try:
            plan = recheck_plan(self.config, stored, cmd.run, cmd.base_only)
        except core.ConfigError as exc:
            return f"usage error: {escape(str(exc))}", f"usage error: {str(exc).splitlines()[0]}", None
        run = stored.run
        job = self._job("recheck", who, body, run.host, run.engine_name,
                        {**plan, "head_ref": plan["head_sha"], "base_ref": plan["base_sha"]}, run.workload_name)
        sides = "its base on both sides" if cmd.base_only else f"{run.head_sha[:10]} against {run.base_sha[:10]}"
        return await self._queue(job, who, body, f"<@{who[0]}> recheck run {run.id} ({sides}) on host `{run.host}`, "
                                 f"engine `{run.engine_name}`, modes {', '.join(run.modes)}, {plan['launches']} "
                                 "launches per arm and mode")

    async def _cmd_watch(self, cmd, who, body, host, engine):
        """The window monitor alone on the host for ``seconds``, as a job in its queue (under its lock)."""
        job = self._job("watch", who, body, host, engine, {"seconds": cmd.seconds})
        return await self._queue(job, who, body, f"<@{who[0]}> watch host `{host}` for {cmd.seconds:g} s "
                                 f"(the window monitor alone, with engine `{engine}`'s Python and CPUs)")

    async def _cmd_bisect(self, cmd, who, body, host, engine):
        job = self._job("bisect", who, body, host, engine, {"good_ref": cmd.good, "bad_ref": cmd.bad, "mode": cmd.mode})
        target = self.queue.host(host)
        repo = self.config.engine(engine).repo
        try:
            if not repo:
                raise core.GitError(f"engine {engine!r} has no repo")
            good = await resolve_commit(target, repo, cmd.good)
            bad = await resolve_commit(target, repo, cmd.bad)
            commits = await first_parent_range(target, repo, good, bad)
        except core.GitError as exc:
            return f"usage error: {escape(str(exc))}", f"usage error: {exc}", None
        return await self._queue(job, who, body, f"<@{who[0]}> bisect `{cmd.good}` ({good[:10]}) .. `{cmd.bad}` "
                                 f"({bad[:10]}), {len(commits)} commits, mode {cmd.mode}, on host `{host}`, engine "
                                 f"`{engine}`")

    async def _queue(self, job: storage.Job, who, body, text: str):
        """Queue ``job`` and post its parent message (``text`` plus the job and its place)."""
        host = job.host
        async with self._io_slots:
            queued = await self.queue.submit(job, wake=False)
        if queued is None:  # its job exists: a redelivery, or a command resumed after its bot died past the queueing
            existing = await self._io(storage.job_by_key, self.db, job.dedupe_key) if job.dedupe_key else None
            if existing is None:
                return None, "redelivery: already queued", None
            return None, f"queued job {existing.id} (already queued: a redelivery or a resumed command)", existing.id
        ready = self.notifier.parent_ready[queued.id] = asyncio.Event()
        try:
            ahead = sum(1 for j in await self._io(storage.list_jobs, self.db, host=host) if j.id < queued.id)
            text += f": job {queued.id}, " + (f"{ahead} job(s) ahead" if ahead else "next to run")
            sent = await self.notifier.post(who[1], text=text)
            if sent is not None:
                await self._io(storage.update_job, self.db, queued.id, slack={"thread_ts": sent["ts"]})
            else:
                await reply_via(body["response_url"], response_type="in_channel",
                                text=text + " (invite the bot to this channel for threaded progress)")
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
            line = (f"job {job.id} ({job.status}): {job_what(job)} on host `{job.host}`, "
                    f"engine `{job.engine_name}`, by {queued_by(job)}")
            if job.run_id:
                stored = await self._io(storage.load_run, self.db, job.run_id)
                ok = sum(1 for t in stored.trials if t.status == "ok")
                verdicts = ", ".join(f"{v.mode} {v.verdict}" for v in stored.verdicts) or "no verdict yet"
                line += f"; run {job.run_id} ({stored.run.status}): {ok} launches done, {verdicts}"
                if slurm_state := await slurm.live_line(self.config, stored.run):
                    line += f"; {slurm_state}"
            if job.reason:
                line += f"; {job.reason}"
            lines.append(line)
        return "\n".join(lines), "status", None

    async def _cmd_queue(self, cmd, who, body, host, engine):
        jobs = await self._io(storage.list_jobs, self.db)
        problems = self.queue.health([job for job in jobs if job.status == "queued"])
        health = "".join(f":warning: {line}\n" for line in problems)
        if not jobs:
            return health + "the queue is empty", "queue", None
        by_host: dict[str, list[str]] = {}
        for job in jobs:
            line = f"job {job.id} {job.status}: {job_what(job)} ({job.engine_name}) by {queued_by(job)}"
            stored = await self._io(storage.load_run, self.db, job.run_id) if job.run_id else None
            if stored and (slurm_state := await slurm.live_line(self.config, stored.run)):
                line += f"; {slurm_state}"
            by_host.setdefault(job.host, []).append(line)
        return health + "\n".join(f"*{h}*\n" + "\n".join(lines) for h, lines in by_host.items()), "queue", None

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
        snapshot = await probe_async(python, cheap=False, env=env, host=self.queue.host(host),
                                     container=engines[0][1].container if engines else None)
        checks = run_checks(snapshot, under_load=False, engine_cpus=engines[0][1].cpus if engines else None)
        lines = [(f"env of host `{host}` with {label} ({snapshot['kind']} probe, {fmt(snapshot['wall_s'], 2)} s): "
                  f"worst {worst(checks)}")]
        lines += [f"{c.status} {c.name}: {c.line}" for c in checks]
        return "\n".join(lines)[:3000], f"env: {worst(checks)}", None
