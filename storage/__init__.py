"""Persistence for runs, trials, environment snapshots and verdicts (SQLModel over SQLAlchemy).

SQLite by default, any SQLAlchemy URL (PostgreSQL: ``postgresql+psycopg://...``) by config;
the schema is migrated with Alembic on open. It only persists: the database handle is called
``db`` (a SQLAlchemy ``Engine``, never an LLM engine), progress reaches front ends through
their own observers beside :class:`RunStore`, and whether a recorded owner process is alive is
a rule the caller passes in (``owner_alive``).

Layer: imports ``core`` (public names only); imported by ``bot``; ``core`` never imports
from here.

Public names: open_database, default_url, StorageError, NoSuchRunError, RunStore, WriteBehind (a recorder's
writes on a thread of their own), BisectStore, StoredRun, load_run,
list_runs, abandoned_runs, mark_abandoned, update_settings, unsettled_slurm_runs,
load_series (history series, as core._history.series.Series),
load_findings (what a period's runs found, as core._history.findings.PeriodRuns), and
the tables Run, Arm, Trial, EnvSnapshot, VerdictRow; the bot's job queue (enqueue, claim_next, run_threads,
cancel_queued, orphaned_jobs, requeue_or_fail, ...) and command audit (record_command,
list_commands, receive_command, answer_command, unanswered_commands, take_command), replay
protection (first_sight, table SeenRequest) with the tables Job and CommandRecord; the
scheduler's watch_jobs and its log (record_tick, list_ticks, table ScheduleTick); who owns a
running row and whether it is alive (identity, owner_alive, keep_alive, Heartbeat, table
Owner; short_error names a database error without its SQL).
"""

from storage._db import NoSuchRunError, StorageError, default_url, open_database
from storage._history import load_findings, load_series
from storage._job_queue import (
    adopt,
    answer_command,
    cancel_queued,
    claim_next,
    enqueue,
    first_sight,
    get_job,
    job_by_key,
    job_for_run,
    list_commands,
    list_jobs,
    list_ticks,
    orphaned_jobs,
    receive_command,
    record_command,
    record_tick,
    requeue,
    requeue_or_fail,
    run_threads,
    take_command,
    unanswered_commands,
    update_job,
    watch_jobs,
)
from storage._models import (
    Arm,
    CommandRecord,
    EnvSnapshot,
    Job,
    Owner,
    Run,
    ScheduleTick,
    SeenRequest,
    Trial,
    VerdictRow,
)
from storage._owners import Heartbeat, identity, keep_alive, owner_alive, short_error
from storage._store import (
    BisectStore,
    RunStore,
    StoredRun,
    abandoned_runs,
    earlier_runs,
    latest_calibration,
    list_runs,
    load_run,
    mark_abandoned,
    unsettled_slurm_runs,
    update_settings,
)
from storage._write_behind import WriteBehind

__all__ = [
    "open_database", "default_url", "StorageError", "NoSuchRunError",
    "RunStore", "WriteBehind", "earlier_runs",
    "BisectStore", "StoredRun", "load_run", "list_runs", "abandoned_runs", "mark_abandoned",
    "latest_calibration", "update_settings", "unsettled_slurm_runs",
    "Run", "Arm", "Trial", "EnvSnapshot", "VerdictRow", "Job", "CommandRecord", "load_series", "load_findings",
    "enqueue", "claim_next", "get_job", "job_by_key", "job_for_run", "run_threads", "update_job", "cancel_queued", "list_jobs",
    "orphaned_jobs", "adopt", "requeue_or_fail", "record_command", "list_commands",
    "ScheduleTick", "watch_jobs", "record_tick", "list_ticks",
    "requeue", "receive_command", "answer_command", "unanswered_commands", "take_command", "first_sight",
    "SeenRequest", "Owner", "Heartbeat", "identity", "keep_alive", "owner_alive", "short_error",
]
