"""Persistence for runs, trials, environment snapshots and verdicts (SQLModel over SQLAlchemy).

SQLite by default, any SQLAlchemy URL (PostgreSQL: ``postgresql+psycopg://...``) by config;
the schema is migrated with Alembic on open. ``core`` never imports from here.

Public names: open_database, default_url, StorageError, RunStore, BisectStore, StoredRun, load_run,
list_runs, abandoned_runs, mark_abandoned, load_series (history series, as core.Series), and
the tables Run, Arm, Trial, EnvSnapshot, VerdictRow.
"""

from storage._db import StorageError, default_url, open_database
from storage._history import load_series
from storage._models import Arm, EnvSnapshot, Run, Trial, VerdictRow
from storage._store import (
    BisectStore,
    RunStore,
    StoredRun,
    abandoned_runs,
    list_runs,
    load_run,
    mark_abandoned,
)

__all__ = [
    "open_database", "default_url", "StorageError",
    "RunStore", "BisectStore", "StoredRun", "load_run", "list_runs", "abandoned_runs", "mark_abandoned",
    "Run", "Arm", "Trial", "EnvSnapshot", "VerdictRow",
    "load_series",
]
