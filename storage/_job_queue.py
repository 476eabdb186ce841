"""The job queue of the Slack bot, in the database: jobs survive restarts.

A worker takes the next queued job of its host with :func:`claim_next` (lowest ``priority``
first: people's commands 0 before scheduled watches 10; then oldest), a compare-and-set
``UPDATE ... WHERE id = ? AND status = 'queued'``: two workers (or two bot processes) racing
for the same job cannot both win, on SQLite or PostgreSQL. Every change commits at once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from sqlalchemy import Engine, delete, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from storage._models import CommandRecord, Job, ScheduleTick, SeenRequest, utcnow
from storage._owners import identity

ACTIVE = ("queued", "running")


def enqueue(db: Engine, job: Job) -> Job | None:
    """Insert ``job`` as queued; ``None`` when a job with its ``dedupe_key`` already exists
    (a redelivered command)."""
    job.status = "queued"
    with Session(db, expire_on_commit=False) as session:
        session.add(job)
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
            return None
        return job


def claim_next(db: Engine, host: str) -> Job | None:
    """Mark the next queued job of ``host`` (lowest ``priority``, then oldest) running, owned by
    this process, and return it; ``None`` when none is queued. Atomic: a job is claimed by one
    caller only."""
    owner = identity().as_owner()
    with Session(db, expire_on_commit=False) as session:
        while True:
            job_id = session.exec(select(Job.id).where(Job.host == host, Job.status == "queued")
                                  .order_by(Job.priority, Job.id).limit(1)).first()
            if job_id is None:
                return None
            won = session.execute(update(Job).where(Job.id == job_id, Job.status == "queued")
                                  .values(status="running", owner=owner, started_at=utcnow()))
            session.commit()
            if won.rowcount == 1:
                return session.get(Job, job_id, populate_existing=True)


def job_by_key(db: Engine, dedupe_key: str) -> Job | None:
    """The job queued under ``dedupe_key`` (a Slack team and trigger id), or ``None``."""
    with Session(db, expire_on_commit=False) as session:
        return session.exec(select(Job).where(Job.dedupe_key == dedupe_key)).first()


def get_job(db: Engine, job_id: int) -> Job | None:
    """The job ``job_id`` or ``None``."""
    with Session(db, expire_on_commit=False) as session:
        return session.get(Job, job_id)


def job_for_run(db: Engine, run_id: int) -> Job | None:
    """The job that made run ``run_id``, or ``None``."""
    with Session(db, expire_on_commit=False) as session:
        return session.exec(select(Job).where(Job.run_id == run_id)).first()


def run_threads(db: Engine, run_ids: list[int]) -> dict[int, tuple[str, str]]:
    """Where the bot posted each of ``run_ids``: ``{run id: (channel, thread ts)}`` from the
    job that made the run; runs made outside the bot (the terminal) or whose job has no
    thread are left out."""
    if not run_ids:
        return {}
    with Session(db) as session:
        jobs = session.exec(select(Job).where(col(Job.run_id).in_(run_ids)))
        return {j.run_id: (j.slack.get("channel", j.channel_id), j.slack["thread_ts"])
                for j in jobs if j.run_id is not None and (j.slack or {}).get("thread_ts")}


def update_job(db: Engine, job_id: int, **fields) -> Job:
    """Set ``fields`` on job ``job_id`` (``slack`` is merged, not replaced) and return it."""
    with Session(db, expire_on_commit=False) as session:
        job = session.get(Job, job_id)
        for key, value in fields.items():
            setattr(job, key, {**job.slack, **value} if key == "slack" else value)
        if fields.get("status") in ("done", "failed", "cancelled", "interrupted"):
            job.finished_at = utcnow()
        session.add(job)
        session.commit()
        return job


def cancel_queued(db: Engine, job_id: int, reason: str) -> bool:
    """Cancel job ``job_id`` if it is still queued (atomic); whether it was."""
    with Session(db) as session:
        done = session.execute(update(Job).where(Job.id == job_id, Job.status == "queued")
                               .values(status="cancelled", reason=reason, finished_at=utcnow()))
        session.commit()
        return done.rowcount == 1


def list_jobs(db: Engine, statuses: tuple[str, ...] = ACTIVE, host: str | None = None,
              limit: int = 50) -> list[Job]:
    """Jobs in ``statuses`` (optionally of one host), oldest first."""
    with Session(db, expire_on_commit=False) as session:
        query = select(Job).where(Job.status.in_(statuses)).order_by(Job.id).limit(limit)
        if host:
            query = query.where(Job.host == host)
        return list(session.exec(query))


def orphaned_jobs(db: Engine, owner_alive: Callable[[dict], bool]) -> list[Job]:
    """Jobs marked running whose bot process is gone (``owner_alive`` of its recorded owner is
    false; the bot passes :func:`storage.owner_alive`): what a crash left, wherever it ran."""
    return [job for job in list_jobs(db, ("running",), limit=10_000) if not (job.owner and owner_alive(job.owner))]


def _claim(job_id: int, claimed_at: dt.datetime | None):
    """The WHERE clause of a write that must only touch job ``job_id`` while it is still the
    running claim that started at ``claimed_at`` (``None``: any state): a compare-and-set, so
    a bot that lost its lease and the bot that took the job over never both act on it."""
    where = [col(Job.id) == job_id]
    if claimed_at is not None:
        where += [col(Job.status) == "running", col(Job.started_at) == claimed_at]
    return where


def requeue(db: Engine, job_id: int, reason: str, claimed_at: dt.datetime | None = None) -> bool:
    """Queue job ``job_id`` again after a clean stop of its bot (keeping its place; the crash
    re-queue budget ``attempts`` is not spent): its run is dropped, ``reason`` kept. With
    ``claimed_at`` (the job's ``started_at`` when this process claimed it), only while that
    claim still holds. Whether it was queued again."""
    with Session(db) as session:
        done = session.execute(update(Job).where(*_claim(job_id, claimed_at))
                               .values(status="queued", owner=None, run_id=None, started_at=None, reason=reason))
        session.commit()
        return done.rowcount == 1


def adopt(db: Engine, job_id: int, claimed_at: dt.datetime | None) -> Job | None:
    """Take over job ``job_id``, left running by a bot that is gone, as this process's running
    job (a restarted bot following the Slurm job of its run again), while the claim that
    started at ``claimed_at`` still holds; the job as now claimed, or ``None`` when another bot
    got there first."""
    with Session(db, expire_on_commit=False) as session:
        done = session.execute(update(Job).where(*_claim(job_id, claimed_at))
                               .values(owner=identity().as_owner(), started_at=utcnow()))
        session.commit()
        return session.get(Job, job_id, populate_existing=True) if done.rowcount == 1 else None


def requeue_or_fail(db: Engine, job_id: int, requeue: bool, reason: str,
                    claimed_at: dt.datetime | None = None) -> str | None:
    """Close an orphaned job: queue it again (keeping its place: the queue is by id) if
    ``requeue`` and it was never re-queued before, else fail it, with ``reason``. With
    ``claimed_at`` (its ``started_at`` as the caller saw it), only while that claim still
    holds. Returns the new status, ``queued`` or ``failed``; ``None`` when the claim no longer
    held (another bot, or the owner itself, got there first)."""
    with Session(db) as session:
        job = session.get(Job, job_id)
        if job.attempts == 0 and requeue:
            values = dict(status="queued", attempts=1, owner=None, run_id=None, started_at=None,
                          reason=f"{reason}; re-queued")
        else:
            values = dict(status="failed", finished_at=utcnow(), reason=f"{reason}; not re-queued"
                          + (" (it was re-queued once already)" if requeue else ""))
        done = session.execute(update(Job).where(*_claim(job_id, claimed_at)).values(**values))
        session.commit()
        return values["status"] if done.rowcount == 1 else None


def record_command(db: Engine, user_id: str, channel_id: str, team_id: str, command: str,
                   result: str, job_id: int | None = None) -> None:
    """Append one command to the audit table."""
    with Session(db) as session:
        session.add(CommandRecord(user_id=user_id, channel_id=channel_id, team_id=team_id, command=command,
                                  result=result, job_id=job_id))
        session.commit()


def receive_command(db: Engine, user_id: str, channel_id: str, team_id: str, command: str,
                    payload: dict) -> int:
    """Record a command before it is acknowledged (``result`` ``received``, owned by this
    process) with ``payload`` (what carrying it out and answering it needs); its id."""
    with Session(db) as session:
        row = CommandRecord(user_id=user_id, channel_id=channel_id, team_id=team_id, command=command,
                            result="received", payload=payload, owner=identity().as_owner())
        session.add(row)
        session.commit()
        return row.id


def answer_command(db: Engine, command_id: int, result: str, job_id: int | None = None) -> None:
    """Record what came of received command ``command_id``."""
    with Session(db) as session:
        row = session.get(CommandRecord, command_id)
        row.result, row.job_id = result, job_id
        session.add(row)
        session.commit()


def unanswered_commands(db: Engine, owner_alive: Callable[[dict], bool]) -> list[CommandRecord]:
    """Received commands whose owner died before answering them (``owner_alive`` of it is
    false), oldest first."""
    with Session(db, expire_on_commit=False) as session:
        rows = list(session.exec(select(CommandRecord).where(CommandRecord.result == "received")
                                 .order_by(CommandRecord.id)))
    return [row for row in rows if not (row.owner and owner_alive(row.owner))]


def take_command(db: Engine, command: CommandRecord) -> bool:
    """Make this process the owner of unanswered ``command`` (compare-and-set on its
    ``claims``); whether it won (another bot may take it first)."""
    with Session(db) as session:
        won = session.execute(update(CommandRecord).where(CommandRecord.id == command.id,
                                                          CommandRecord.result == "received",
                                                          CommandRecord.claims == command.claims)
                              .values(owner=identity().as_owner(), claims=command.claims + 1))
        session.commit()
        return won.rowcount == 1


def list_commands(db: Engine, limit: int = 100) -> list[CommandRecord]:
    """The newest audited commands, oldest first."""
    with Session(db, expire_on_commit=False) as session:
        rows = list(session.exec(select(CommandRecord).order_by(CommandRecord.id.desc()).limit(limit)))
        return rows[::-1]


def watch_jobs(db: Engine, watch: str, limit: int = 20) -> list[Job]:
    """The jobs queued by watch ``watch``, newest first (any status)."""
    with Session(db, expire_on_commit=False) as session:
        return list(session.exec(select(Job).where(Job.watch == watch).order_by(Job.id.desc()).limit(limit)))


def record_tick(db: Engine, schedule_id: str, result: str, job_id: int | None = None) -> None:
    """Append one run of scheduled job ``schedule_id`` to the schedule log."""
    with Session(db) as session:
        session.add(ScheduleTick(schedule_id=schedule_id, result=result, job_id=job_id))
        session.commit()


def list_ticks(db: Engine, schedule_id: str | None = None, limit: int = 100) -> list[ScheduleTick]:
    """The newest runs of scheduled jobs (of ``schedule_id`` only, if given), oldest first."""
    with Session(db, expire_on_commit=False) as session:
        query = select(ScheduleTick).order_by(ScheduleTick.id.desc()).limit(limit)
        if schedule_id:
            query = query.where(ScheduleTick.schedule_id == schedule_id)
        return list(session.exec(query))[::-1]


def first_sight(db: Engine, signature: str, window_s: float) -> bool:
    """Record the signed request ``signature`` as served; ``False`` when it was already served
    (a replay), also by an earlier bot process. Entries older than ``window_s`` (past which
    Slack's timestamp check refuses a request anyway) are removed."""
    with Session(db) as session:
        session.execute(delete(SeenRequest).where(SeenRequest.at < utcnow() - dt.timedelta(seconds=window_s)))
        session.add(SeenRequest(signature=signature))
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
            return False
        return True
